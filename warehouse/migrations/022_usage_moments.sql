-- gpulens warehouse, migration 22 (issue 17 review): before the recheck window an hour of
-- gpu_usage_1h was recomputed when its day's allocated GPU-microseconds changed; an
-- allocation moved within its day with its length kept, or to another GPU at the same
-- times, kept them equal and left the hour's per-run GPU-seconds and energy stale for
-- good. The ledger keeps two more exact, additive integers of the allocations clipped to
-- the hour (as fleet_hours_1h does since migration 21; warehouse/usage.py:_SIGNATURES),
-- compared per day:
ALTER TABLE gpu_usage_hours ADD COLUMN alloc_m2 HUGEINT;      -- sum of epoch_us(end)^2 -
                                                              -- epoch_us(start)^2
ALTER TABLE gpu_usage_hours ADD COLUMN alloc_gpu_us HUGEINT;  -- sum of microseconds x
                                                              -- gpu_index
-- NULL on rows kept before this migration: a day with such a row keeps the former check
-- (its allocated microseconds) until its hours are recomputed or age out of the minute
-- tier, so the upgrade does not make the whole history due.
