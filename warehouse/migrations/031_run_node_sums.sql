-- gpulens warehouse, migration 31 (issue 17). Two reads went over the window's
-- allocations on every call, though the writer keeps run_nodes (migration 29) with them:
-- * r_f's exposure (each run's days in the window x the distinct nodes it held) counted
--   the distinct nodes of every run of its window: a DISTINCT over 1.3 M run_nodes rows
--   joined back to the runs, ~0.27 s of CPU for a 24,576-GPU week. run_node_counts keeps
--   each run's count;
-- * the kept hours' read check (warehouse/fleet_hours.py) summed the allocations' exact
--   moments (microseconds x GPU index, key and share) over 4.86 M allocations: most
--   of the check's 100-165 ms.
--   A run_nodes row's allocations share its times, so the same integers come from the
--   row's sums of GPU index, key and share: run_nodes gains those three columns.
-- warehouse/run_nodes.py recomputes a job's rows of both tables in the transaction that
-- writes its allocations. Both are filled here from the allocations already stored.
-- The columns are added to the table of migration 29 and its rows computed again.
ALTER TABLE run_nodes ADD COLUMN gpu_index_sum BIGINT;  -- their GPU indices, summed
ALTER TABLE run_nodes ADD COLUMN key_sum BIGINT;        -- their keys (allocations.alloc_key)
ALTER TABLE run_nodes ADD COLUMN share_ppm_sum BIGINT;  -- their shares of a GPU (0-1, NULL
                                                        -- as 1) in millionths, summed
DELETE FROM run_nodes;
INSERT INTO run_nodes
SELECT job_id, run_index, node, start_ts, end_ts, count(*)::INTEGER AS gpus,
       sum(gpu_index)::BIGINT AS gpu_index_sum, sum(alloc_key)::BIGINT AS key_sum,
       -- warehouse/kept_hours.py:SHARE_PPM, as warehouse/run_nodes.py:SELECT_SQL sums it
       sum(CAST(least(greatest(coalesce(share, 1.0), 0.0), 1.0) * 1000000 AS BIGINT))::BIGINT
           AS share_ppm_sum
FROM allocations GROUP BY ALL ORDER BY start_ts, job_id, run_index, node;
ALTER TABLE run_nodes ALTER COLUMN gpu_index_sum SET NOT NULL;
ALTER TABLE run_nodes ALTER COLUMN share_ppm_sum SET NOT NULL;
CREATE TABLE run_node_counts (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    nodes INTEGER NOT NULL        -- distinct nodes of the run's allocations (any node)
);
INSERT INTO run_node_counts
SELECT job_id, run_index, count(DISTINCT node)::INTEGER AS nodes
FROM run_nodes GROUP BY ALL ORDER BY job_id, run_index;
