-- gpulens warehouse, migration 18 (issue 17 review): what the 1-hour tier's kept energy
-- (gpu_usage_from_1h) was computed from includes the allocations' shares. The read check
-- compared samples and allocated GPU-microseconds only, so an allocation whose share
-- changed (shard/MPS learnt after the hour was kept) left the kept energy served stale.
-- alloc_share_us: per hour, the sum over the allocations clipped to the hour of their
-- microseconds x their fraction of the GPU in millionths (an integer: sums over hours
-- equal sums over the range exactly). NULL on rows kept before this migration: those
-- hours are computed live until the refresh recomputes them (warehouse/fleet_hours.py).
ALTER TABLE fleet_hours_1h ADD COLUMN alloc_share_us HUGEINT;
