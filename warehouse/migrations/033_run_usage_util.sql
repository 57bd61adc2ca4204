-- gpulens warehouse, migration 33 (issue 17): utilisation by user, by job type and the job
-- distribution read run_usage_1h's sums per hour and run too, which gpu_usage_1h's 1.5 M
-- rows of a 24,576-GPU week summed per job on every read took ~0.12 s. They need the
-- utilised seconds and whether the node was in the topology (utilisation counts only
-- nodes of nodes): util_s and known are added, and the kept rows are written again by the
-- next analytics refresh from gpu_usage_1h (meta 'run_usage_built' deleted; until then
-- the readers read gpu_usage_1h, as before migration 32). warehouse/run_usage.py.
ALTER TABLE run_usage_1h ADD COLUMN util_s DOUBLE;   -- utilised GPU-seconds (gpu_usage_1h.util_s summed)
ALTER TABLE run_usage_1h ADD COLUMN known BOOLEAN;   -- the rows' node was in nodes when written
DELETE FROM run_usage_1h;
DELETE FROM meta WHERE key = 'run_usage_built';
