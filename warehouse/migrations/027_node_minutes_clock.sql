-- gpulens warehouse, migration 27 (issue 17): a job's straggler heat map shows per node
-- and time bucket the SM clock of the node's slowest GPU the job held and their mean
-- power. It read every GPU's minute rows of the job (8,192 GPUs: ~1.1 s over 16 hours);
-- where the job holds the whole node, the per-node minute sums can stand for them with
-- the node's lowest SM clock and how many rows had a power reading.
-- Rows written before this migration keep NULL in both (no fill: a 24,576-GPU x 90-day
-- minute tier took ~13 minutes to sum in migration 19); the heat map reads those
-- node-minutes from the GPU rows, as before, and reads only the last 2 days of a job.
ALTER TABLE gpu_nodes_1m ADD COLUMN power_n INTEGER;       -- rows with power_w_avg
ALTER TABLE gpu_nodes_1m ADD COLUMN sm_clock_mhz_min REAL;  -- lowest sm_clock_mhz_avg, MHz
