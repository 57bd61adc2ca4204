-- gpulens warehouse, migration 8: stragglers in multi-node jobs (issue 15, MegaScale).
-- Derived by warehouse/stragglers.py from the 1-minute tier and the allocations; rebuilt
-- from a moving start by the analytics refresh (idempotent).
CREATE TABLE stragglers (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    node VARCHAR NOT NULL,
    start_ts TIMESTAMP NOT NULL,  -- first lagging minute
    end_ts TIMESTAMP NOT NULL,    -- end of the last lagging minute
    minutes INTEGER,              -- lagging minutes in [start_ts, end_ts)
    gpu_indices SMALLINT[],       -- the node's GPUs that lagged
    job_gpus INTEGER,             -- GPUs of the run
    slowdown_frac DOUBLE,         -- mean lag of the slowest member, 0-1 (1 - clock / peers')
    gpu_hours_lost DOUBLE,        -- job GPUs x slowdown x duration, GPU-hours
    clock_mhz DOUBLE,             -- mean SM clock of the lagging GPUs
    peer_clock_mhz DOUBLE,        -- mean of the run's median SM clock
    power_w DOUBLE,               -- mean power of the lagging GPUs
    peer_power_w DOUBLE,          -- mean of the run's median power
    thermal_s DOUBLE,             -- seconds of thermal throttling on the lagging GPUs
    power_brake_s DOUBLE,         -- seconds of power throttling / brake on them
    PRIMARY KEY (job_id, run_index, node, start_ts)
);
