-- gpulens warehouse, migration 26 (issue 17): every read of a kept hour (fleet_hours_1h,
-- gpu_usage_1h through it, tensor_hours_1h) checks the allocations' exact moments, and
-- one of them weights each allocation by a 32-bit key of it (warehouse/kept_hours.py:
-- ALLOC_KEY). The key was hashed on each read: ~90 ms of the ~180-ms check over a
-- 24,576-GPU week (4.86 M allocations). It is now a column, set by the writer
-- (warehouse/schema.py:DERIVED) from the row's primary key, which never changes.
-- The table is built again rather than altered: a column added and updated in place
-- read at 172-196 ms against 98-116 ms for the rebuilt table (the check, full-size week).
-- The key of every row is the value the kept moments were summed with, so no kept hour
-- changes. ~12 s and ~650 MiB at 4.86 M allocations.
CREATE TABLE allocations_keyed (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    share DOUBLE,                  -- fraction 0-1 of the GPU's shards/MPS; NULL: whole GPU
    gpu_i_ids INTEGER[],           -- MIG GPU instance ids (GPU_I_ID); NULL: none
    alloc_key UINTEGER NOT NULL,   -- hash(job_id, run_index, node, gpu_index) >> 32
    PRIMARY KEY (job_id, run_index, node, gpu_index)
);
INSERT INTO allocations_keyed
SELECT job_id, run_index, node, gpu_index, start_ts, end_ts, share, gpu_i_ids,
       (hash(job_id::VARCHAR, run_index::INTEGER, node::VARCHAR, gpu_index::SMALLINT)
        >> 32)::UINTEGER
FROM allocations;
DROP TABLE allocations;
ALTER TABLE allocations_keyed RENAME TO allocations;
-- The DuckDB that hashed these keys: the key moments kept before were summed with the
-- keys of the DuckDB that signed them (meta fleet_hours_hash_duckdb); where the two
-- differ, the next analytics refresh signs them again (warehouse/fleet_hours.py:
-- resign_after_upgrade, which removes this row).
INSERT OR REPLACE INTO meta
SELECT 'alloc_key_duckdb', library_version FROM pragma_version();
