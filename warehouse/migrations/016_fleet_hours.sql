-- gpulens warehouse, migration 16: the fleet's GPU-hours per hour, precomputed from the
-- 1-hour tier and the allocations by warehouse/fleet_hours.py:refresh_fleet_hours
-- (derived, idempotent; issue 17: the weekly report joined every allocation-hour of two
-- weeks with the hour tier). See docs/analytics.md. Every TIMESTAMP is naive UTC.
CREATE TABLE fleet_hours_1h (
    ts TIMESTAMP PRIMARY KEY,     -- hour start
    reporting_s DOUBLE,           -- covered seconds of the hour tier's GPU-hours
    allocated_s DOUBLE,           -- those x the fraction of the hour allocations held the GPU
    utilised_s DOUBLE,            -- allocated_s x utilisation / 100
    throttled_s DOUBLE,           -- seconds thermally throttled
    samples BIGINT,               -- sum(samples) of gpu_samples_1h in the hour
    alloc_sig HUGEINT,            -- sum of hashes of the allocations clipped to the hour
    alloc_us BIGINT,              -- their GPU-microseconds in the hour
    computed_at TIMESTAMP
);
