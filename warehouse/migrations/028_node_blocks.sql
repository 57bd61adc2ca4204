-- gpulens warehouse, migration 28 (issue 17): a job's telemetry and straggler heat map
-- read the per-node minute sums of every minute the job held a node (1.2 M rows for an
-- 8,192-GPU job's day, ~0.3 s each). Their buckets are 5, 15 or more minutes; the same
-- sums per node and 5-minute block stand for a block's five minute rows wherever the
-- job held the node for the whole block.
-- The table is a function of gpu_nodes_1m alone (warehouse/node_minutes.py recomputes a
-- block whenever its minutes change, and after retention cuts one). It is not filled
-- from the minutes already there (migration 19 took ~13 minutes to sum a 24,576-GPU x
-- 90-day minute tier): the blocks before the one after the last minute written so far
-- are read from the minute rows, as before; meta 'gpu_nodes_5m.from' holds that block.
CREATE TABLE gpu_nodes_5m (
    ts TIMESTAMP NOT NULL,        -- block start (a multiple of 5 minutes)
    node VARCHAR NOT NULL,
    minutes UTINYINT,             -- bit i: the block's minute i has a row in gpu_nodes_1m
    gpus INTEGER,                 -- minute rows summed (GPU-minutes reporting)
    gpu_mask UBIGINT,             -- the minutes' gpu_mask OR-ed; NULL where any is NULL
    samples BIGINT,
    covered_s DOUBLE,
    util_n INTEGER,
    util_pct_sum DOUBLE,
    util_pct_min REAL,
    power_w_sum DOUBLE,
    temp_n INTEGER,
    temp_c_sum DOUBLE,
    temp_c_wsum DOUBLE,
    temp_c_max REAL,
    throttle_thermal_s DOUBLE,
    throttle_power_s DOUBLE,
    power_n INTEGER,              -- NULL where any minute's is NULL (written before 027)
    sm_clock_mhz_min REAL
);
INSERT INTO meta
SELECT 'gpu_nodes_5m.from',
       CAST(time_bucket(INTERVAL 5 MINUTE, max(ts)) + INTERVAL 5 MINUTE AS VARCHAR)
FROM gpu_nodes_1m HAVING max(ts) IS NOT NULL
ON CONFLICT (key) DO UPDATE SET value = excluded.value;
