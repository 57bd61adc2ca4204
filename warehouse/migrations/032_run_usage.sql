-- gpulens warehouse, migration 32 (issue 17): the per-run energy (energy by user, of
-- failures, the carbon of goodput, the weekly report) read gpu_usage_1h's rows, one per
-- hour, node and run (1.5 M in a 24,576-GPU week), and joined each to nodes for the
-- node's GPUs. run_usage_1h keeps them summed per hour, run and the node's GPU count
-- (603,217 rows in that week), written with gpu_usage_1h's hours in the same transaction,
-- and run_usage_nodes the nodes' GPU counts they were written with (warehouse/run_usage.py).
-- Left empty here: the first analytics refresh fills both from gpu_usage_1h and nodes
-- (meta 'run_usage_built' absent until then, and the per-run energy reads gpu_usage_1h
-- as before). Every TIMESTAMP is naive UTC.
CREATE TABLE run_usage_1h (
    ts TIMESTAMP NOT NULL,        -- hour start
    job_id VARCHAR NOT NULL,
    run_index INTEGER,
    gpus INTEGER,                 -- nodes.gpus of the rows' nodes when written (NULL:
                                  -- unknown; the fleet's typical count applies when read)
    gpu_s DOUBLE,                 -- GPU-seconds (gpu_usage_1h.gpu_s summed)
    energy_j DOUBLE,              -- GPU energy, joules (gpu_usage_1h.energy_j summed)
    it_s DOUBLE,                  -- the two over the rows holding both (the node's
    it_j DOUBLE                   -- non-GPU share is priced with the GPUs' joules of those)
);

CREATE TABLE run_usage_nodes (    -- nodes (node, gpus) as run_usage_1h was written with
    node VARCHAR PRIMARY KEY,
    gpus INTEGER
);
