-- gpulens warehouse, migration 19 (issue 17): the 1-minute tier summed per node and
-- minute, kept by the rollup in the same transaction as the minute rows it sums
-- (warehouse/node_minutes.py has the columns and their units). The day's charts of the
-- whole fleet and a job's telemetry read it instead of every GPU's minute rows.
-- Every TIMESTAMP is naive UTC.
CREATE TABLE gpu_nodes_1m (
    ts TIMESTAMP NOT NULL,        -- minute start
    node VARCHAR NOT NULL,
    gpus INTEGER,                 -- minute rows summed (GPUs reporting)
    gpu_mask UBIGINT,             -- bit i: GPU index i reported; NULL: an index beyond 0-63
    samples BIGINT,               -- raw samples
    covered_s DOUBLE,             -- s
    util_n INTEGER,               -- rows with util_pct_avg
    util_pct_sum DOUBLE,          -- sum of util_pct_avg, percent
    util_pct_min REAL,            -- percent
    power_w_sum DOUBLE,           -- sum of power_w_avg, W
    temp_n INTEGER,               -- rows with temp_c_avg
    temp_c_sum DOUBLE,            -- sum of temp_c_avg, °C
    temp_c_wsum DOUBLE,           -- sum of temp_c_avg x samples
    temp_c_max REAL,              -- °C
    throttle_thermal_s DOUBLE,    -- GPU-seconds
    throttle_power_s DOUBLE       -- GPU-seconds
);
-- a warehouse written before this migration: its minute tier's sums (the same SELECT as
-- warehouse/node_minutes.SELECT_SQL; the rows are logged, not this statement)
-- No ORDER BY: with it (and optimistic writes off) DuckDB held the whole output in memory,
-- which a 90-day minute tier at scale does not fit in the service's memory limit.
INSERT INTO gpu_nodes_1m
SELECT ts, node, count(*)::INTEGER,
       CASE WHEN bool_and(gpu_index BETWEEN 0 AND 63)
            THEN bit_or(CASE WHEN gpu_index BETWEEN 0 AND 63
                             THEN (1::UBIGINT << gpu_index::UBIGINT) END) END,
       sum(samples), sum(covered_s), count(util_pct_avg)::INTEGER, sum(util_pct_avg),
       min(util_pct_avg), sum(power_w_avg), count(temp_c_avg)::INTEGER, sum(temp_c_avg),
       sum(temp_c_avg * samples), max(temp_c_max), sum(throttle_thermal_s),
       sum(throttle_power_s)
FROM gpu_samples_1m
GROUP BY ts, node;
