-- gpulens warehouse, migration 5: GPU usage per hour, node and job run, precomputed from
-- the 1-minute tier and the allocations by warehouse/usage.py:refresh_usage (derived,
-- idempotent). See docs/analytics.md, "GPU usage per hour". Every TIMESTAMP is naive UTC.

-- One row per hour, node and job run that held a GPU of the node in that hour, plus one
-- row (job_id and run_index NULL) for the GPU-seconds no allocation held.
CREATE TABLE gpu_usage_1h (
    ts TIMESTAMP NOT NULL,        -- hour start
    node VARCHAR NOT NULL,
    job_id VARCHAR,               -- NULL: unallocated
    run_index INTEGER,
    gpu_s DOUBLE,                 -- GPU-seconds: allocated overlap with minutes that have
                                  -- telemetry; unallocated: covered seconds not held
    util_s DOUBLE,                -- GPU-seconds x utilisation / 100
    energy_j DOUBLE,              -- GPU energy, joules (each minute prorated by overlap)
    idle_s DOUBLE,                -- the part of gpu_s in minutes whose maximum utilisation
    idle_j DOUBLE                 -- stayed below idle_pct, and of energy_j
);

-- Which hours gpu_usage_1h holds, and what they were computed from: a recomputation is
-- due when the hour's samples, its clipped allocations or the idle threshold change.
CREATE TABLE gpu_usage_hours (
    ts TIMESTAMP PRIMARY KEY,     -- hour start
    samples BIGINT,               -- sum(samples) of gpu_samples_1h in the hour
    alloc_sig HUGEINT,            -- sum of hashes of the allocations clipped to the hour
    alloc_us BIGINT,              -- their GPU-microseconds in the hour (summed per day to
                                  -- check old hours cheaply)
    idle_pct DOUBLE,              -- utilisation threshold of idle_s/idle_j, percent
    computed_at TIMESTAMP
);
