-- gpulens warehouse, migration 21 (issue 17 review): the read check of fleet_hours_1h
-- (and so of gpu_usage_from_1h and the method card's seconds) compared the allocations'
-- GPU-microseconds summed over the range: an allocation whose start and end moved by the
-- same amount (a jobcomp log re-imported with a corrected time zone), or that moved to
-- another GPU at the same times, kept them equal and was served stale. Two more exact,
-- additive integers per hour over the allocations clipped to the hour (their sums over
-- hours equal the range's sums exactly; warehouse/fleet_hours.py:MOMENTS):
ALTER TABLE fleet_hours_1h ADD COLUMN alloc_m2 HUGEINT;      -- sum of epoch_us(end)^2 -
                                                             -- epoch_us(start)^2
ALTER TABLE fleet_hours_1h ADD COLUMN alloc_gpu_us HUGEINT;  -- sum of microseconds x
                                                             -- gpu_index
-- NULL on rows kept before this migration: they are not read until the analytics refresh
-- fills them (cheaply, where the hour's allocations are still those the row was computed
-- from, else it recomputes the hour).
