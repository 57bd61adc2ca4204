-- gpulens warehouse, migration 31 (issue 17): r_f's exposure (each run's days in the
-- window x the distinct nodes it held) counted the distinct nodes of every run of its
-- window on each read: a DISTINCT over 1.3 M run_nodes rows and a join of them back to
-- the runs, ~0.27 s of CPU for a 24,576-GPU week. A run's node count changes only when
-- its allocations do: this table keeps it, per run, and warehouse/run_nodes.py
-- recomputes a job's rows with its run_nodes rows, in the same transaction. Filled
-- here from run_nodes (migration 29).
CREATE TABLE run_node_counts (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    nodes INTEGER NOT NULL        -- distinct nodes of the run's allocations (any node)
);
INSERT INTO run_node_counts
SELECT job_id, run_index, count(DISTINCT node)::INTEGER AS nodes
FROM run_nodes GROUP BY ALL ORDER BY job_id, run_index;
