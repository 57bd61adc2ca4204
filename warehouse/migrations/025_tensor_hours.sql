-- gpulens warehouse, migration 25 (issue 17): the Utilisation page's tensor-core activity
-- (warehouse/queries/tensor.py) joined every allocation-hour of its range with the 1-hour
-- tier on each call: 8 s over a 24,576-GPU week, 348 ms (p95) over 30 days of 1,024 GPUs.
-- The analytics refresh now keeps, per hour and job, what the query sums (derived; see
-- docs/analytics.md, "The 1-hour tier per hour"), with fleet_hours_1h's hours: a query
-- reads a whole hour from it only where fleet_hours_1h's read check holds (the hour's
-- samples and allocations as they were). Every TIMESTAMP is naive UTC.
CREATE TABLE tensor_hours_1h (
    ts TIMESTAMP NOT NULL,         -- hour start
    job_id VARCHAR NOT NULL,
    gpu_us BIGINT NOT NULL,        -- GPU-microseconds the job's allocations held, in GPU-hours
                                   -- that have a 1-hour tier row
    util_gap_us BIGINT NOT NULL,   -- of those, the microseconds in GPU-hours without
    sm_gap_us BIGINT NOT NULL,     -- util_pct_avg, sm_active_pct_avg, tensor_active_pct_avg,
    tensor_gap_us BIGINT NOT NULL, -- dram_active_pct_avg (the profiling fields are NULL
    dram_gap_us BIGINT NOT NULL,   -- where the exporter lacks them)
    util_pct REAL,                 -- the GPU-microsecond weighted means of those fields over
    sm_active_pct REAL,            -- the rest, percent; NULL where no GPU-hour had the field
    tensor_active_pct REAL,
    dram_active_pct REAL
);
ALTER TABLE fleet_hours_1h ADD COLUMN tensor_kept BOOLEAN;  -- TRUE: the hour's
                                                            -- tensor_hours_1h rows are kept
-- NULL on rows kept before this migration: such hours are due again (the newest first, 168
-- per refresh), and a range that holds one reads tensor activity live until then.
