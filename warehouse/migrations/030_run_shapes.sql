-- gpulens warehouse, migration 30 (issue 17): Placement's runs and the usual job size
-- grouped every run of their window per node, partition and run on each read (~1.5 s of
-- CPU for a 24,576-GPU week's 563,566 multi-node runs). A run's GPUs, nodes, racks,
-- zones and partition change only when its allocations or the tree change: this table
-- keeps them per run, and run_shapes_tree the tree they were computed with
-- (warehouse/run_shapes.py recomputes a job's rows with its run_nodes rows, and every
-- row when a topology delivery changes the tree). Filled here from run_nodes (migration
-- 29) and the tree (1.3 s for that week).
CREATE TABLE run_shapes (
    job_id VARCHAR NOT NULL,
    run_index INTEGER NOT NULL,
    partition VARCHAR NOT NULL,   -- the partition holding most of its GPUs
    gpus INTEGER NOT NULL,        -- GPUs on nodes of the tree
    nodes INTEGER NOT NULL,       -- nodes of the tree
    racks INTEGER NOT NULL,
    zones INTEGER NOT NULL,
    start_ts TIMESTAMP,           -- earliest allocation start (naive UTC)
    last_start TIMESTAMP,         -- latest allocation start; NULL when any start is NULL
    first_end TIMESTAMP,          -- earliest end of an ended allocation; NULL: none ended
    end_ts TIMESTAMP              -- latest end; NULL while any allocation is open
);
CREATE TABLE run_shapes_tree (
    node VARCHAR,
    rack VARCHAR,
    zone VARCHAR,
    partition VARCHAR
);
INSERT INTO run_shapes WITH
tree AS (
    SELECT n.node, n.rack, coalesce(r.zone, 'rack ' || n.rack) AS zone,
           coalesce(n.partition, '') AS partition, coalesce(n.gpus, 0) AS gpus
    FROM nodes n LEFT JOIN racks r USING (rack)
    WHERE n.rack IS NOT NULL
),
rows AS (
    SELECT a.job_id, a.run_index, a.node, a.start_ts, a.end_ts, a.gpus, t.rack, t.zone,
           t.partition
    FROM run_nodes a JOIN tree t USING (node)
),
part AS (
    SELECT job_id, run_index,
           first(partition ORDER BY gpus DESC, partition = '', partition) AS partition
    FROM (SELECT job_id, run_index, partition, sum(gpus) AS gpus FROM rows GROUP BY ALL)
    GROUP BY ALL
),
runs AS (
    SELECT job_id, run_index, CAST(sum(gpus) AS INTEGER) AS gpus,
           CAST(count(DISTINCT node) AS INTEGER) AS nodes,
           CAST(count(DISTINCT rack) AS INTEGER) AS racks,
           CAST(count(DISTINCT zone) AS INTEGER) AS zones,
           min(start_ts) AS start_ts,
           CASE WHEN bool_and(start_ts IS NOT NULL) THEN max(start_ts) END AS last_start,
           min(end_ts) AS first_end,
           CASE WHEN bool_and(end_ts IS NOT NULL) THEN max(end_ts) END AS end_ts
    FROM rows GROUP BY ALL
)
SELECT r.job_id, r.run_index, p.partition, r.gpus, r.nodes, r.racks, r.zones, r.start_ts,
       r.last_start, r.first_end, r.end_ts
FROM runs r JOIN part p USING (job_id, run_index)
ORDER BY r.start_ts;
INSERT INTO run_shapes_tree WITH
tree AS (
    SELECT n.node, n.rack, coalesce(r.zone, 'rack ' || n.rack) AS zone,
           coalesce(n.partition, '') AS partition, coalesce(n.gpus, 0) AS gpus
    FROM nodes n LEFT JOIN racks r USING (rack)
    WHERE n.rack IS NOT NULL
) SELECT node, rack, zone, partition FROM tree;
