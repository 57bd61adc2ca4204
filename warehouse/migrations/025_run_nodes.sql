-- gpulens warehouse, migration 25 (issue 17): the nodes each job run held, one row per
-- (run, node). The failure rate's exposure (warehouse/queries/failures.py:_EXPOSURE_SQL,
-- the Goodput page's rate + MTTF and advisor, the weekly report, /metrics) counted every
-- run's distinct nodes from its allocations on every call: a DISTINCT over the window's
-- allocations, ~150 ms of CPU for 2 days of a 24,576-GPU fleet (727 k allocations,
-- 195 k run-node pairs), growing with the 30-day rate window. The writer now adds the
-- pairs of each allocations batch here in the same transaction (warehouse/ingest.py);
-- allocations are never deleted and an upsert never changes a row's node (it is part of
-- the key), so the table is the DISTINCT (job_id, run_index, node) of allocations.
CREATE TABLE run_nodes (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    node VARCHAR NOT NULL,
    PRIMARY KEY (job_id, run_index, node)
);
INSERT INTO run_nodes SELECT DISTINCT job_id, run_index, node FROM allocations;
