-- gpulens warehouse, migration 1: topology, telemetry, events, scheduler, rollups.
-- Units are in column names; every TIMESTAMP is UTC.

CREATE TABLE racks (
    rack VARCHAR PRIMARY KEY,
    zone VARCHAR,
    "row" INTEGER,
    x DOUBLE,            -- floor position, tiles
    y DOUBLE
);

CREATE TABLE nodes (
    node VARCHAR PRIMARY KEY,
    rack VARCHAR,
    partition VARCHAR,
    gpus INTEGER
);

CREATE TABLE gpus (
    gpu_uuid VARCHAR PRIMARY KEY,
    node VARCHAR,
    gpu_index SMALLINT,
    model VARCHAR,
    tdp_w DOUBLE,
    memory_mib DOUBLE
);

-- Raw telemetry: one row per GPU per scrape. No primary key (an index on a table of
-- billions of rows would live in memory); idempotency comes from an anti-join against
-- the rows already stored in the batch's time range (see warehouse/ingest.py).
CREATE TABLE gpu_samples (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    gpu_uuid VARCHAR,
    interval_s REAL,
    util_pct REAL,
    mem_util_pct REAL,
    sm_active_pct REAL,
    mem_used_mib REAL,
    power_w REAL,
    energy_j DOUBLE,
    temp_c REAL,
    mem_temp_c REAL,
    sm_clock_mhz REAL,
    throttle_thermal BOOLEAN,
    throttle_power BOOLEAN,
    ecc_sbe_volatile BIGINT,
    ecc_dbe_volatile BIGINT,
    xid_last INTEGER
);

CREATE TABLE gpu_events (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_index SMALLINT,
    gpu_uuid VARCHAR,
    kind VARCHAR NOT NULL,
    code INTEGER NOT NULL DEFAULT 0,
    detail VARCHAR
);

CREATE TABLE jobs (
    job_id VARCHAR PRIMARY KEY,
    name VARCHAR,
    user_name VARCHAR,
    account VARCHAR,
    partition VARCHAR,
    job_type VARCHAR,
    state VARCHAR,
    submit_ts TIMESTAMP,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    gpus INTEGER,
    nodes INTEGER,
    restarts INTEGER
);

CREATE TABLE job_runs (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    state VARCHAR,
    exit_code INTEGER,
    signal INTEGER,
    reason VARCHAR,
    failed_node VARCHAR,
    gpus INTEGER,
    nodelist VARCHAR,
    PRIMARY KEY (job_id, run_index)
);

CREATE TABLE allocations (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    PRIMARY KEY (job_id, run_index, node, gpu_index)
);

CREATE TABLE carbon_intensity (
    ts TIMESTAMP PRIMARY KEY,
    g_co2_per_kwh DOUBLE
);

-- Rollups. avg/min/max where they mean something; energy_j is the energy used in the
-- bucket (sum of power_w x interval_s), covered_s the seconds of samples behind the row,
-- throttle_*_s the seconds spent throttled.
CREATE TABLE gpu_samples_1m (
    ts TIMESTAMP NOT NULL,          -- bucket start
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    gpu_uuid VARCHAR,
    samples INTEGER,
    covered_s DOUBLE,
    util_pct_avg REAL,
    util_pct_max REAL,
    sm_active_pct_avg REAL,
    mem_used_mib_avg REAL,
    mem_used_mib_max REAL,
    power_w_avg REAL,
    power_w_max REAL,
    energy_j DOUBLE,
    temp_c_avg REAL,
    temp_c_min REAL,
    temp_c_max REAL,
    mem_temp_c_max REAL,
    sm_clock_mhz_avg REAL,
    throttle_thermal_s DOUBLE,
    throttle_power_s DOUBLE
);

CREATE TABLE gpu_samples_1h AS SELECT * FROM gpu_samples_1m WITH NO DATA;

-- Time ranges of raw samples not yet rolled up. Written in the same transaction as
-- the samples, so a crash never loses a pending rollup.
CREATE TABLE rollup_pending (
    ts_min TIMESTAMP NOT NULL,
    ts_max TIMESTAMP NOT NULL
);

-- Small facts the service keeps about itself (e.g. the simulator's anchor time).
CREATE TABLE meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR
);
