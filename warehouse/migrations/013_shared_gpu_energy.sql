-- gpulens warehouse, migration 13: shared GPUs' energy split between their jobs (issue 21).
-- Until now each job on a time-sliced or MPS-shared GPU took the GPU's whole energy for the
-- minutes it overlapped another job (warehouse/usage.py now splits it by seconds held and
-- leaves the rest unallocated). Emptying the ledger makes the next analytics refresh
-- recompute every hour of gpu_usage_1h the 1-minute tier reaches (older hours read the
-- 1-hour tier, which already split by overlap).
DELETE FROM gpu_usage_hours;
