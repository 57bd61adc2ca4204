-- gpulens warehouse, migration 11: each GPU's latest sample (issue 17).
-- One row per GPU holding the columns of its newest gpu_samples row, upserted by the
-- writer in the same transaction as each samples batch (warehouse/ingest.py), and only
-- when the batch's row is newer: late, out-of-order, retried and backfilled batches never
-- move it back. "Now" questions read these few rows instead of scanning the raw tier.
-- Its columns are gpu_samples' columns (a test keeps the two in step).
CREATE TABLE gpu_latest (
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
    xid_last INTEGER,
    tensor_active_pct REAL,
    dram_active_pct REAL,
    PRIMARY KEY (node, gpu_index)
);
-- a warehouse written before this migration: its GPUs' newest stored rows
INSERT INTO gpu_latest
SELECT ts, node, gpu_index, gpu_uuid, interval_s, util_pct, mem_util_pct, sm_active_pct,
       mem_used_mib, power_w, energy_j, temp_c, mem_temp_c, sm_clock_mhz, throttle_thermal,
       throttle_power, ecc_sbe_volatile, ecc_dbe_volatile, xid_last, tensor_active_pct,
       dram_active_pct
FROM gpu_samples
QUALIFY row_number() OVER (PARTITION BY node, gpu_index ORDER BY ts DESC) = 1;
