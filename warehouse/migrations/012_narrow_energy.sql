-- gpulens warehouse, migration 12: the rollup tiers' energy as REAL (issue 17).
-- energy_j of gpu_samples_1m and gpu_samples_1h is the energy of one GPU in one bucket
-- (J): at most a few MJ, where REAL's 24-bit mantissa keeps 7 significant digits (a
-- minute's 42,000 J to 0.004 J, relative error under 6e-8; sums are taken in DOUBLE).
-- Measured on 128 GPUs x 7 days at 15 s (docs/performance.md): 3.5 bytes per minute
-- row against 7.1 as DOUBLE, whose ALP fell back to ALPRD on these values.
-- The raw tier's energy_j stays DOUBLE: it is the cumulative counter (~1e10 J, to the
-- millijoule), which REAL cannot hold. The other readings already are REAL; DuckDB's ALP
-- stores integer-valued floats (temperatures, utilisation, clocks) as compactly as
-- narrow integer types would (measured), without rounding a fractional reading.
-- A finite value REAL cannot hold (beyond 3.4e38 J, possible only from absurd bulk input)
-- becomes NULL, counted in meta under 'migration_012_energy_nulled'; NaN and infinities
-- stay as they are. The rollup guards the same way (warehouse/rollups.py).
-- Only operators and casts in the USING expressions: DuckDB replays an ALTER's USING
-- from the write-ahead log after a crash, and its replay could not bind functions such
-- as isfinite() or abs() (it tried to download the core_functions extension).
INSERT OR REPLACE INTO meta VALUES ('migration_012_energy_nulled', (
    SELECT (SELECT count(*) FROM gpu_samples_1m
            WHERE energy_j NOT BETWEEN -3.4e38 AND 3.4e38
              AND energy_j NOT IN ('nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE))
         + (SELECT count(*) FROM gpu_samples_1h
            WHERE energy_j NOT BETWEEN -3.4e38 AND 3.4e38
              AND energy_j NOT IN ('nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE)))::VARCHAR);
ALTER TABLE gpu_samples_1m ALTER energy_j TYPE REAL USING
    CASE WHEN energy_j BETWEEN -3.4e38 AND 3.4e38
           OR energy_j IN ('nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE) THEN energy_j END;
ALTER TABLE gpu_samples_1h ALTER energy_j TYPE REAL USING
    CASE WHEN energy_j BETWEEN -3.4e38 AND 3.4e38
           OR energy_j IN ('nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE) THEN energy_j END;
