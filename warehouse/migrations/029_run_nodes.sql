-- gpulens warehouse, migration 29 (issue 17): the pages that ask which nodes a run held
-- (r_f's exposure, lemon nodes, Placement's runs and usual job size) grouped every
-- allocation, one row per GPU, per run and node: 4.86 M rows for a 24,576-GPU week.
-- This table holds the same allocations counted per run, node and span (1.32 M rows for
-- that week): a run's GPUs on a node mostly share their start and end, and a row stands
-- for the allocations with its run, node, start and end, so a query that filters
-- allocations on their times filters these rows the same way.
-- The table is a function of allocations alone: warehouse/run_nodes.py recomputes a
-- job's rows in the transaction that writes the job's allocations. It is filled here
-- from the allocations already stored (1.8 s for that week; 90 days of that fleet:
-- migrations 29 and 30 together 56 s within a 512-MiB memory_limit, peak RSS 740 MiB).
CREATE TABLE run_nodes (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    node VARCHAR NOT NULL,
    start_ts TIMESTAMP,           -- the allocations' start (naive UTC); NULL as theirs
    end_ts TIMESTAMP,             -- their end; NULL while running
    gpus INTEGER NOT NULL         -- allocation rows (GPUs) with this run, node, start, end
);
INSERT INTO run_nodes
SELECT job_id, run_index, node, start_ts, end_ts, count(*)::INTEGER AS gpus
FROM allocations GROUP BY ALL ORDER BY start_ts, job_id, run_index, node;
