-- gpulens warehouse, migration 16 (issue 17): what the weekly report asks of the 1-hour
-- tier, kept per hour by the analytics refresh (derived, idempotent) instead of joining
-- every allocation-hour of two weeks with the hour tier per report. See docs/analytics.md.
-- Every TIMESTAMP is naive UTC.

-- The fleet's GPU-hours per hour (warehouse/fleet_hours.py), and the ledger of both tables:
-- what each hour was computed from.
CREATE TABLE fleet_hours_1h (
    ts TIMESTAMP PRIMARY KEY,     -- hour start
    reporting_s DOUBLE,           -- covered seconds of the hour tier's GPU-hours
    allocated_s DOUBLE,           -- those x the fraction of the hour allocations held the GPU
    utilised_s DOUBLE,            -- allocated_s x utilisation / 100
    throttled_s DOUBLE,           -- seconds thermally throttled
    samples BIGINT,               -- sum(samples) of gpu_samples_1h in the hour
    alloc_sig HUGEINT,            -- sum of hashes of the allocations clipped to the hour
    alloc_us BIGINT,              -- their GPU-microseconds in the hour
    energy_idle_pct DOUBLE,       -- idle threshold of the hour's gpu_usage_from_1h rows,
                                  -- percent; NULL: none (gpu_usage_1h held the hour)
    computed_at TIMESTAMP
);

-- The 1-hour tier's job and idle energy of hours gpu_usage_1h does not hold, in parts that
-- do not depend on the range (warehouse/hour_usage.py has what each kind holds).
CREATE TABLE gpu_usage_from_1h (
    ts TIMESTAMP NOT NULL,        -- hour start
    node VARCHAR,                 -- NULL for kind idle_power
    kind VARCHAR NOT NULL,        -- held | free | idle_power | part | part_run
    job_id VARCHAR,               -- held, part_run
    run_index INTEGER,
    gpu_index INTEGER,            -- part, part_run
    idle BOOLEAN,                 -- the GPU-hour's maximum utilisation below energy_idle_pct
    gpu_s DOUBLE,                 -- seconds: allocated (held), data (free, idle_power)
    energy_j DOUBLE,              -- joules of those seconds
    share DOUBLE,                 -- part_run: the allocation's part of the held seconds
    hour_j DOUBLE,                -- part, part_run: the GPU-hour's energy, joules,
    data_s DOUBLE,                -- data seconds
    alloc_s DOUBLE                -- and allocated seconds
);
