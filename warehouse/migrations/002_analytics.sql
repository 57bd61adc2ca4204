-- gpulens warehouse, migration 2: reliability, goodput, energy and carbon analytics.
-- Units are in column names; every TIMESTAMP is UTC. Derived tables are rebuilt by
-- warehouse/analytics.py:refresh (idempotent); the others are inputs.

-- Checkpoints jobs wrote (ingest kind "checkpoints"; append-only facts).
CREATE TABLE checkpoints (
    ts TIMESTAMP NOT NULL,
    job_id VARCHAR NOT NULL,
    run_index INTEGER,
    step BIGINT,
    write_s DOUBLE,
    detail VARCHAR
);

-- Where a run's log lives (from sacct's stdout/stderr paths), read for classification.
CREATE TABLE run_logs (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    path VARCHAR NOT NULL,
    PRIMARY KEY (job_id, run_index)
);

-- Grid carbon intensity per region (imported CSV series); carbon_intensity stays the
-- region-less site series the collectors write.
CREATE TABLE grid_intensity (
    ts TIMESTAMP NOT NULL,
    region VARCHAR NOT NULL,
    g_co2_per_kwh DOUBLE,
    PRIMARY KEY (ts, region)
);

-- Power usage effectiveness over time (facility energy / IT energy), when measured.
CREATE TABLE pue (
    ts TIMESTAMP PRIMARY KEY,
    pue DOUBLE
);

-- Measured non-GPU power of a node (e.g. IPMI/Redfish total minus GPUs), when a source has it.
CREATE TABLE node_power (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    other_power_w DOUBLE,
    PRIMARY KEY (ts, node)
);

-- Derived: one row per failed run with its classification, evidence and cost.
CREATE TABLE failures (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    state VARCHAR,
    user_name VARCHAR,
    partition VARCHAR,
    job_type VARCHAR,
    gpus INTEGER,
    nodes INTEGER,
    node VARCHAR,                 -- node the failure is attributed to (NULL if unknown)
    rack VARCHAR,
    category VARCHAR NOT NULL,    -- infrastructure | framework | script | scheduler | unknown
    reason VARCHAR NOT NULL,
    source VARCHAR NOT NULL,      -- which evidence decided: log | xid | state | exit | none
    xids INTEGER[],               -- XID codes on the run's GPUs in the attribution window
    evidence VARCHAR,             -- JSON: state, exit code, signal, matched rule, XIDs, log excerpt
    restarted BOOLEAN,
    since_checkpoint_h DOUBLE,    -- work lost since the last checkpoint, hours
    restart_overhead_h DOUBLE,    -- failure -> next run productive, hours
    gpu_hours_lost DOUBLE,        -- GPU-hours
    checkpoint_known BOOLEAN,     -- since_checkpoint_h came from a recorded checkpoint
    classified_at TIMESTAMP,
    PRIMARY KEY (job_id, run_index)
);

-- Derived: energy per GPU per hour from the energy counter (deltas; resets and gaps fall
-- back to power x interval), or from the 1-hour rollup where raw samples are gone.
CREATE TABLE gpu_energy_1h (
    ts TIMESTAMP NOT NULL,        -- hour start
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    energy_j DOUBLE,
    samples INTEGER,              -- raw samples behind the row (matches gpu_samples_1h)
    counter_samples INTEGER,      -- of which the counter delta was used
    method VARCHAR                -- counter | power | mixed | rollup
);
