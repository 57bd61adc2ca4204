-- gpulens warehouse, migration 17: the rollup tiers' power at 1 mW, as DOUBLE (issue 17).
-- power_w_avg and power_w_max of gpu_samples_1m and gpu_samples_1h are W rounded to
-- 0.001 W, the resolution the sources report (NVML and DCGM: integer milliwatts; the
-- raw tier keeps each reading as it came). An average of readings to the mW has many
-- more digits, which DuckDB's ALP cannot pack as decimals (ALPRD: 3.3 bytes a minute
-- row as REAL); rounded to the mW and stored as DOUBLE, ALP packs it as an integer
-- (2.6 bytes; measured on 128 GPUs x 7 days at 15 s, docs/performance.md). A value
-- changes by at most 0.0005 W.
-- Only operators and casts in the USING expressions (a DOUBLE cast to BIGINT rounds
-- to the nearest): DuckDB replays an ALTER's USING from the write-ahead log after a
-- crash and could not bind functions such as round() there (see migration 12).
-- NULL, NaN, infinities and magnitudes beyond 9e12 W stay as they are.
ALTER TABLE gpu_samples_1m ALTER power_w_avg TYPE DOUBLE USING
    CASE WHEN power_w_avg BETWEEN -9e12 AND 9e12
         THEN (power_w_avg::DOUBLE * 1000)::BIGINT::DOUBLE / 1000 ELSE power_w_avg END;
ALTER TABLE gpu_samples_1m ALTER power_w_max TYPE DOUBLE USING
    CASE WHEN power_w_max BETWEEN -9e12 AND 9e12
         THEN (power_w_max::DOUBLE * 1000)::BIGINT::DOUBLE / 1000 ELSE power_w_max END;
ALTER TABLE gpu_samples_1h ALTER power_w_avg TYPE DOUBLE USING
    CASE WHEN power_w_avg BETWEEN -9e12 AND 9e12
         THEN (power_w_avg::DOUBLE * 1000)::BIGINT::DOUBLE / 1000 ELSE power_w_avg END;
ALTER TABLE gpu_samples_1h ALTER power_w_max TYPE DOUBLE USING
    CASE WHEN power_w_max BETWEEN -9e12 AND 9e12
         THEN (power_w_max::DOUBLE * 1000)::BIGINT::DOUBLE / 1000 ELSE power_w_max END;
