-- gpulens warehouse, migration 23 (issue 17 review): the kept hours' allocation moments
-- (migrations 21 and 22) hold no node, job or run: GPU time moved to another node at the
-- same GPU index and times, or given to another job or run (a run's end learnt late and
-- the next run started then on another node), kept them equal, and before the recheck
-- window the hour was served stale (fleet_hours_1h) or never recomputed (gpu_usage_1h).
-- One more exact, additive integer per hour over the allocations clipped to the hour
-- (warehouse/usage.py:ALLOC_MOMENTS):
ALTER TABLE fleet_hours_1h ADD COLUMN alloc_key_us HUGEINT;   -- sum of microseconds x a
                                                              -- 32-bit key of the
                                                              -- allocation
ALTER TABLE gpu_usage_hours ADD COLUMN alloc_key_us HUGEINT;  -- the same
-- NULL on rows kept before this migration (and set back to NULL when another DuckDB
-- hashes otherwise): fleet_hours_1h's rows are not read until the analytics refresh
-- fills them where their other moments show the allocations unchanged; a day with such a
-- gpu_usage_hours row keeps the former check until its hours are recomputed.
