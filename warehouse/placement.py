"""Topology-aware placement and fragmentation (issue 15, section 3).

The network tree is the topology tables: a node's leaf switch is its rack (``nodes.rack``,
from the inventory or Slurm's ``topology.conf``) and a rack's zone (pod) is
``racks.zone``; a rack without a zone counts as one zone of its own, so a fleet without
zones measures racks only. Meta's scheduling talk places tensor parallelism within a
rack, pipeline parallelism within a zone and data parallelism across zones: a job spread
over more racks or zones than its size needs trains slower.

Per job run (:func:`job_placement`, from ``allocations`` counted per run and node in
``run_nodes``, the whole runs of a window from ``run_shapes``: warehouse/run_shapes.py):

- ``racks`` and ``zones``: the racks and zones its GPUs span;
- ``min_racks = ceil(gpus / rack_gpus)``, ``min_zones = ceil(gpus / zone_gpus)``: the
  fewest possible, where ``rack_gpus`` and ``zone_gpus`` are the GPUs of the largest rack
  and zone of the run's partition (GPUs per node from ``nodes.gpus``);
- ``score = (min_racks + min_zones) / (racks + zones)``: 1 when placed as tightly as
  its size allows, lower the more it is spread;
- ``misplaced``: it spans more racks or zones than it had to; ``gpu_hours`` (GPUs x
  hours within the window) are the GPU-hours it ran that way.

Fleet fragmentation at an instant (:func:`free_gpus` then :func:`fragmentation`), per
partition (a job runs within its partition):

- ``free_gpus``: GPUs of the partition's nodes not allocated at that instant;
- ``largest_rack_gpus`` / ``largest_zone_gpus``: the largest job that could start within
  one rack / one zone: the most free GPUs on wholly free nodes of one rack (zone), or the
  most free GPUs of one node if more (a single-node job may share a node);
- ``usual_gpus``: the usual size of a multi-node job: the median GPUs of the partition's
  multi-node runs started in the window (:func:`usual_gpus`), else one node's GPUs;
- ``stranded_gpus``: free GPUs that could not be part of any usual-size job placed within
  one zone: ``free_gpus - sum over zones of floor(whole_free_z / usual) x usual``, with
  ``whole_free_z`` the GPUs of the zone's wholly free nodes.

The jobs that waited while their GPUs were free but scattered read this module's
fragmentation: warehouse/placement_waits.py. Instants are hourly; times are UTC,
GPU-hours and hours the units.

SQL here is constant text; every value is a parameter.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from warehouse.db import fill, own_cursor, transaction

#: The network tree: one row per node with its rack, zone (the rack itself when the
#: racks table names none), partition and GPUs.
TREE = """
tree AS (
    SELECT n.node, n.rack, coalesce(r.zone, 'rack ' || n.rack) AS zone,
           coalesce(n.partition, '') AS partition, coalesce(n.gpus, 0) AS gpus
    FROM nodes n LEFT JOIN racks r USING (rack)
    WHERE n.rack IS NOT NULL
)"""

#: The tree's rows as ``run_shapes_tree`` keeps them (warehouse/run_shapes.py).
TREE_ROWS = "WITH " + TREE + " SELECT node, rack, zone, partition FROM tree"

#: The rows of the tree now and of ``run_shapes_tree`` that the other lacks (both ways,
#: duplicates counted; the writer's nodes moved, warehouse/run_shapes.py)...
TREE_DIFF = fill("""now AS ({rows}),
tree_diff AS (
    (SELECT * FROM now EXCEPT ALL SELECT * FROM run_shapes_tree)
    UNION ALL
    (SELECT * FROM run_shapes_tree EXCEPT ALL SELECT * FROM now)
)""", rows=TREE_ROWS)
#: ...and true when there are none: the runs' kept shapes are then the tree's.
SAME_TREE_SQL = "WITH " + TREE_DIFF + "\nSELECT NOT EXISTS (SELECT * FROM tree_diff)"

_CAPACITY = """
rack_cap AS (SELECT partition, rack, sum(gpus) AS g FROM tree GROUP BY ALL),
zone_cap AS (SELECT partition, zone, sum(gpus) AS g FROM tree GROUP BY ALL),
cap AS (
    SELECT r.partition, r.rack_gpus, z.zone_gpus
    FROM (SELECT partition, max(g) AS rack_gpus FROM rack_cap GROUP BY ALL) r
    JOIN (SELECT partition, max(g) AS zone_gpus FROM zone_cap GROUP BY ALL) z USING (partition)
)"""

#: The allocations of the runs active in the window, counted per run, node and span
#: (``gpus``; warehouse/run_nodes.py, issue 17: 4x fewer rows than the allocations).
_WINDOW_FILTER = "start_ts < $end AND start_ts <= $now AND coalesce(end_ts, $now) > $start"
_WINDOW = fill("""
window_rows AS (
    SELECT job_id, run_index, node, start_ts, end_ts, gpus FROM run_nodes
    WHERE {window}
)""", window=_WINDOW_FILTER)

#: The runs of ``run_shapes`` (warehouse/run_shapes.py) that may have an allocation in the
#: window (``cand``), those every allocation of which passes :data:`_WINDOW`'s filter
#: (``whole``: grouping their allocations gives their kept figures) and the others
#: (``edge``: allocations of one run with different spans across the window's edge, or a
#: NULL start), whose allocations in the window are grouped as before (issue 17: the
#: grouping took ~1.5 s of CPU for a 24,576-GPU week's runs). For runs on 2 or more
#: nodes only (:data:`_MULTI_ONLY`: a whole run is not filtered so).
_WHOLE = ("last_start < $end AND last_start <= $now AND (first_end IS NULL"
          " OR first_end > $start) AND (end_ts IS NOT NULL OR $now > $start)")
_KEPT = fill("""
cand AS (
    SELECT * FROM run_shapes
    WHERE start_ts < $end AND start_ts <= $now AND (end_ts IS NULL OR end_ts > $start)
),
whole AS (SELECT * FROM cand WHERE {whole}),
edge AS (SELECT job_id, run_index FROM cand WHERE ({whole}) IS NOT TRUE),
window_rows AS (
    SELECT a.job_id, a.run_index, a.node, a.start_ts, a.end_ts, a.gpus
    FROM run_nodes a SEMI JOIN edge USING (job_id, run_index)
    WHERE {window}
)""", window=_WINDOW_FILTER, whole=_WHOLE)
#: The whole runs beside the grouped ones: a run's end is its latest allocation's, or now
#: while one is open, and no later than now, as the grouping gives it.
_KEPT_RUNS = """
    UNION ALL BY NAME
    SELECT job_id, run_index, gpus, nodes, racks, zones, start_ts,
           CASE WHEN end_ts IS NULL THEN $now ELSE least(end_ts, $now) END AS end_ts, partition
    FROM whole"""

#: Each run's partition (``part``) from ``{rows}`` (its rows per node with their
#: partition and GPUs): the one holding most of its GPUs; of those holding as many, a
#: named one before nodes without a partition, then the first by name.
PART = """part AS (
    SELECT job_id, run_index,
           first(partition ORDER BY gpus DESC, partition = '', partition) AS partition
    FROM (SELECT job_id, run_index, partition, sum(gpus) AS gpus FROM {rows} GROUP BY ALL)
    GROUP BY ALL
)"""

#: A run's score and how far it is spread, from ``sized``'s columns (one definition for
#: the page, its chart and cards, and the weekly report): ``extra_racks`` and
#: ``extra_zones`` beyond the fewest possible, ``score = (min_racks + min_zones) /
#: (racks + zones)`` (at most 1), ``misplaced`` when either is more than needed. A
#: partition whose inventory counts no GPUs has no fewest possible: its runs' score is
#: NULL, their extras 0 (``greatest`` passes over NULL), and they are not misplaced.
_SCORED = """
    SELECT *, CAST(greatest(racks - min_racks, 0) AS BIGINT) AS extra_racks,
           CAST(greatest(zones - min_zones, 0) AS BIGINT) AS extra_zones,
           CASE WHEN min_racks + min_zones >= racks + zones THEN 1.0
                ELSE (min_racks + min_zones) / greatest(racks + zones, 1) END AS score,
           coalesce(racks > min_racks OR zones > min_zones, false) AS misplaced
    FROM sized"""
WORST_FIRST = "score, gpu_hours DESC, job_id, run_index"

#: Runs are counted per node first (a whole-node job's GPUs are one row, issue 17), on
#: the three keys of the allocation alone, then given their node's place in the tree
#: (issue 17: with the six keys of the tree's, 11.2 -> 8.3 s of CPU for bench/scale.py's
#: 24,576-GPU week of multi-node runs). The run's partition is :data:`PART`'s (a run split
#: evenly between two partitions got either before).
#: ``{window}``: :data:`_WINDOW`, or :data:`_KEPT` with ``{kept}`` :data:`_KEPT_RUNS`
#: (else nothing); ``{only}``: nothing, or :data:`_MULTI_ONLY`; ``{rack_list}``,
#: ``{names}``, ``{rack_names}`` and ``{jobs}``: the run's racks and job's names
#: (:data:`_DETAIL`), or nothing where only the figures are wanted (:data:`_FIGURES`);
#: ``{materialized}`` and ``{tail}``: the runs scored (``scored``) read once in order
#: (:data:`_EACH`), or kept and read twice (warehouse/placement_runs.py).
_JOBS_SQL = "WITH " + TREE + "," + _CAPACITY + ",{window}" + """,
node_rows AS (
    SELECT job_id, run_index, node, sum(gpus) AS gpus, min(start_ts) AS start_ts,
           max(least(coalesce(end_ts, $now), $now)) AS end_ts
    FROM window_rows GROUP BY ALL
),
per_node AS (
    SELECT a.job_id, a.run_index, a.node, t.rack, t.zone, t.partition, a.gpus, a.start_ts,
           a.end_ts
    FROM node_rows a{only} JOIN tree t USING (node)
),
{part},
runs AS (
    SELECT job_id, run_index, CAST(sum(gpus) AS BIGINT) AS gpus, count(*) AS nodes,
           count(DISTINCT rack) AS racks, count(DISTINCT zone) AS zones,
           {rack_list}min(start_ts) AS start_ts, max(end_ts) AS end_ts
    FROM per_node GROUP BY job_id, run_index
),
placed AS (
    SELECT r.*, part.partition FROM runs r JOIN part USING (job_id, run_index){kept}
),
sized AS (
    SELECT p.job_id, p.run_index, {names}p.partition, p.gpus, p.nodes, p.racks, p.zones,
           CAST(ceil(p.gpus / nullif(c.rack_gpus, 0)) AS INTEGER) AS min_racks,
           CAST(ceil(p.gpus / nullif(c.zone_gpus, 0)) AS INTEGER) AS min_zones,
           {rack_names}p.start_ts, p.end_ts,
           p.gpus * greatest(epoch_us(least(p.end_ts, $end))
                             - epoch_us(greatest(p.start_ts, $start)), 0) / 3.6e9 AS gpu_hours
    FROM placed p JOIN cap c USING (partition){jobs}
    WHERE p.end_ts > p.start_ts
      AND ($partition::VARCHAR IS NULL OR p.partition = $partition)
      AND p.gpus >= $min_gpus AND p.nodes >= $min_nodes
),
scored AS {materialized}(""" + _SCORED + """)
{tail}"""
_JOBS_SQL = fill(_JOBS_SQL, part=fill(PART, rows="per_node"))
#: The runs one by one, worst placed first, then most GPU-hours, then by job and run (so
#: a page that shows the first 500 shows the same ones on every call).
_EACH = {"materialized": "", "tail": "SELECT * FROM scored ORDER BY " + WORST_FIRST}

#: Only the runs on more than one node (a superset of the runs with more than one node in
#: the tree) are placed in the tree and grouped: the weekly report reads multi-node runs
#: only (issue 17: 0.5 -> 0.13 s of CPU for a 24,576-GPU week of the benchmark's
#: whole-node jobs; bench/scale.py's simulated week has mostly multi-node runs).
_MULTI_ONLY = """ SEMI JOIN (
        SELECT job_id, run_index FROM node_rows GROUP BY ALL HAVING count(*) > 1
    ) m USING (job_id, run_index)"""
#: The columns that name a run's racks and its job (the Placement page's table and hover).
#: A run's racks, by name, space-separated, from its rows' ``{rack}`` (an aggregate).
_RACK_NAMES = "array_to_string(list(DISTINCT {rack} ORDER BY {rack}), ' ')"
_DETAIL = {"rack_list": fill(_RACK_NAMES, rack="rack") + " AS rack_names, ",
           "names": "j.name, j.user_name, j.job_type, ",
           "rack_names": "p.rack_names, ",
           "jobs": "\nLEFT JOIN jobs j USING (job_id)"}
#: None of them: the runs' figures alone (``detail=False``, warehouse/placement_runs.py;
#: issue 17: the racks' lists and the names cost ~1 s of a 24,576-GPU week's 3.1 s in the
#: report).
_FIGURES = dict.fromkeys(_DETAIL, "")
_LIVE = {"window": _WINDOW, "kept": ""}
_JOBS = fill(_JOBS_SQL, only="", **_LIVE, **_DETAIL, **_EACH)
_JOBS_MULTI = fill(_JOBS_SQL, only=_MULTI_ONLY, **_LIVE, **_DETAIL, **_EACH)
RUNS_MULTI = fill(_JOBS_SQL, only=_MULTI_ONLY, **_LIVE, **_FIGURES)
#: :data:`RUNS_MULTI` with the whole runs read from ``run_shapes``.
RUNS_KEPT = fill(_JOBS_SQL, only=_MULTI_ONLY, window=_KEPT, kept=_KEPT_RUNS, **_FIGURES)
_FIGURES_MULTI = fill(RUNS_MULTI, **_EACH)
_FIGURES_KEPT = fill(RUNS_KEPT, **_EACH)


#: The instants ``$ticks`` and per instant and node the GPUs allocations held (``used``).
#: The allocations are first cut to those held at some instant and counted per node and
#: interval (a whole-node job's GPUs are one row), so the range join pairs each interval
#: with its instants once (issue 17: every allocation in the warehouse against every
#: instant took 2.5 s of CPU for a 24,576-GPU week).
_USED = """
ticks AS (SELECT unnest($ticks::TIMESTAMP[]) AS ts),
held AS (
    SELECT node, start_ts, coalesce(end_ts, 'infinity'::TIMESTAMP) AS end_ts,
           CAST(sum(gpus) AS BIGINT) AS n
    FROM run_nodes
    WHERE start_ts <= (SELECT max(ts) FROM ticks)
      AND coalesce(end_ts, 'infinity'::TIMESTAMP) > (SELECT min(ts) FROM ticks)
    GROUP BY ALL
),
used AS (
    SELECT k.ts, a.node, sum(a.n) AS used
    FROM ticks k JOIN held a ON a.start_ts <= k.ts AND a.end_ts > k.ts
    GROUP BY ALL
),
free AS (
    SELECT k.ts, t.partition, t.zone, t.rack, t.node, t.gpus,
           CAST(greatest(t.gpus - coalesce(u.used, 0), 0) AS BIGINT) AS free
    FROM ticks k CROSS JOIN tree t
    LEFT JOIN used u ON u.ts = k.ts AND u.node = t.node
    WHERE $partition::VARCHAR IS NULL OR t.partition = $partition
)"""

_FREE = "WITH " + TREE + "," + _USED + """
SELECT * FROM free ORDER BY ts, node
"""

#: The nodes of the tree (of ``$partition``, or all) numbered from 0 (``i``) by partition,
#: then node: :func:`fragmentation`'s rows.
_NUMBERED = TREE + """,
numbered AS (
    SELECT *, row_number() OVER (ORDER BY partition, node) - 1 AS i FROM tree
    WHERE $partition::VARCHAR IS NULL OR partition = $partition
)"""

_NODES = "WITH " + _NUMBERED + """
SELECT node, rack, zone, partition, gpus FROM numbered ORDER BY i
"""

#: The allocations held at some instant of ``[$first, $last]`` on the nodes of
#: :data:`_NODES`, as ``run_nodes`` counts them per run, node (its number ``i``) and
#: interval, in microseconds: the start no earlier than ``$first``, an open end or one
#: after ``$last`` as ``$after`` (later than every instant). Nodes by number, not name
#: (issue 17: matching 1.3 M names of a 24,576-GPU week to the nodes in pandas took
#: ~0.3 s); from ``run_nodes`` (0.33 -> 0.18 s for that week), not grouped again per node
#: and interval (:func:`_used` sums rows alike; 1,315,267 rows were 1,315,260 grouped,
#: 0.17 -> 0.06 s).
_HELD = "WITH " + _NUMBERED + """
SELECT n.i, epoch_us(greatest(a.start_ts, $first::TIMESTAMP)) AS s,
       epoch_us(least(a.end_ts, $after::TIMESTAMP)) AS e, a.gpus AS n
FROM run_nodes a JOIN numbered n USING (node)
WHERE a.start_ts <= $last AND coalesce(a.end_ts, 'infinity'::TIMESTAMP) > $first
"""

#: Only runs on more than one node are counted (a superset of the multi-node runs of the
#: tree; issue 17: counting every run's nodes took 0.3 s of CPU a 24,576-GPU fortnight),
#: counted per node first, on the allocation's keys alone, as :data:`_JOBS_SQL` does
#: (issue 17: 5.7 -> 2.8 s of CPU for bench/scale.py's 24,576-GPU fortnight), from
#: ``run_nodes`` (migration 029: 0.65 -> 0.5 s for its week). A run's partition is chosen
#: as :data:`_JOBS_SQL` chooses it.
_USUAL_SQL = "WITH " + TREE + ",{started}" + """,
per_partition AS (
    SELECT a.job_id, a.run_index, t.partition, sum(a.gpus) AS gpus, count(*) AS nodes
    FROM started a SEMI JOIN (
        SELECT job_id, run_index FROM started GROUP BY ALL HAVING count(*) > 1
    ) m USING (job_id, run_index) JOIN tree t USING (node)
    GROUP BY ALL
),
runs AS (
    SELECT job_id, run_index, sum(gpus) AS gpus, sum(nodes) AS nodes,
           first(partition ORDER BY gpus DESC, partition = '', partition) AS partition
    FROM per_partition GROUP BY ALL{kept}
)
SELECT t.partition, median(r.gpus) AS multi_node_gpus, (SELECT median(gpus) FROM tree x
       WHERE x.partition = t.partition) AS node_gpus
FROM (SELECT DISTINCT partition FROM tree) t
LEFT JOIN runs r ON r.partition = t.partition AND r.nodes > 1
GROUP BY t.partition
"""
_STARTED_FILTER = "start_ts >= $start AND start_ts < $end"
_STARTED = fill("""
started AS (
    SELECT job_id, run_index, node, sum(gpus) AS gpus FROM run_nodes
    WHERE {started} GROUP BY ALL
)""", started=_STARTED_FILTER)
#: The runs of ``run_shapes`` that may have an allocation started in the window, those
#: all of whose allocations started in it (``whole``: read as kept) and the others, whose
#: allocations started in the window are grouped as before (issue 17).
_STARTED_KEPT = fill("""
cand AS (
    SELECT * FROM run_shapes
    WHERE start_ts < $end AND (last_start IS NULL OR last_start >= $start)
),
whole AS (SELECT * FROM cand WHERE {whole}),
edge AS (SELECT job_id, run_index FROM cand WHERE ({whole}) IS NOT TRUE),
started AS (
    SELECT a.job_id, a.run_index, a.node, sum(a.gpus) AS gpus
    FROM run_nodes a SEMI JOIN edge USING (job_id, run_index)
    WHERE {started} GROUP BY ALL
)""", started=_STARTED_FILTER, whole="start_ts >= $start AND last_start < $end")
_USUAL = fill(_USUAL_SQL, started=_STARTED, kept="")
_USUAL_KEPT = fill(_USUAL_SQL, started=_STARTED_KEPT, kept="""
    UNION ALL BY NAME
    SELECT job_id, run_index, gpus, nodes, partition FROM whole""")

def job_placement(cur, *, start: datetime, end: datetime, now: datetime,
                  partition: str | None = None, min_gpus: int = 1,
                  min_nodes: int = 1, detail: bool = True) -> pd.DataFrame:
    """Each run active in ``[start, end)`` with its span and placement score; only runs
    of at least ``min_gpus`` GPUs on at least ``min_nodes`` nodes (2 or more: single-node
    runs are left before they are grouped, :data:`_MULTI_ONLY`).

    Columns: job_id, run_index, name, user_name, job_type, partition, gpus, nodes, racks,
    zones, min_racks, min_zones, rack_names (space-separated), start_ts, end_ts,
    gpu_hours (GPU-hours within the window), score (0..1; NaN, and not misplaced, in a
    partition whose inventory counts no GPUs), misplaced (bool), extra_racks,
    extra_zones; worst placed first, then most GPU-hours, then by job and run (runs
    without a score last). ``detail=False`` (with ``min_nodes`` 2 or more) leaves out
    name, user_name, job_type and rack_names: the runs
    :func:`warehouse.placement_runs.placed_runs` counts, without naming them
    (:func:`name_runs` names a few of them)."""
    params = {"start": start, "end": end, "now": now, "partition": partition,
              "min_gpus": int(min_gpus), "min_nodes": int(min_nodes)}
    if min_nodes < 2 or detail:
        return cur.execute(_JOBS if min_nodes < 2 else _JOBS_MULTI, params).df()
    with own_cursor(cur) as own, transaction(own):  # the kept rows of the tree it checked
        sql = _FIGURES_KEPT if kept_shapes(own) else _FIGURES_MULTI
        return own.execute(sql, params).df()


def kept_shapes(cur) -> bool:
    """Whether ``run_shapes`` was computed with the tree as it is now: the writer keeps it
    so with each batch (warehouse/run_shapes.py); a tree changed by hand since is not,
    and the runs are then grouped from ``run_nodes``."""
    return bool(cur.execute(SAME_TREE_SQL).fetchall()[0][0])


#: The racks (space-separated, by name) and the job's names of the runs
#: ($jobs[i], $runs[i]), from their allocations in the window as :data:`_JOBS_SQL` reads
#: them (nodes outside the tree left out).
_NAMES = "WITH " + TREE + "," + _WINDOW + """,
picked AS (SELECT unnest($jobs::VARCHAR[]) AS job_id, unnest($runs::INTEGER[]) AS run_index),
racks AS (
    SELECT a.job_id, a.run_index,
           {rack_names} AS rack_names
    FROM window_rows a SEMI JOIN picked USING (job_id, run_index) JOIN tree t USING (node)
    GROUP BY ALL
)
SELECT p.job_id, p.run_index, j.name, j.user_name, j.job_type, r.rack_names
FROM picked p LEFT JOIN racks r USING (job_id, run_index) LEFT JOIN jobs j USING (job_id)
"""
_NAMES = fill(_NAMES, rack_names=fill(_RACK_NAMES, rack="t.rack"))


def name_runs(cur, runs: pd.DataFrame, *, start: datetime, end: datetime,
              now: datetime) -> pd.DataFrame:
    """``runs`` (:func:`warehouse.placement_runs.placed_runs`'s worst, or rows of
    :func:`job_placement` with ``detail=False``; the same window)
    with the columns ``detail=True`` adds: name, user_name, job_type, rack_names; in
    their order. For a page that shows a few hundred of a week's runs (issue 17: the
    Placement page read a 24,576-GPU week's 594,666 runs with names, 3.5 s, and its
    563,566 multi-node runs without names take 2.0-2.1 s)."""
    names = cur.execute(_NAMES, {
        "start": start, "end": end, "now": now,
        "jobs": [str(j) for j in runs["job_id"]],
        "runs": [int(r) for r in runs["run_index"]]}).df()
    return runs.merge(names, on=["job_id", "run_index"], how="left", validate="one_to_one")


def hourly_ticks(start: datetime, end: datetime, *, step: timedelta = timedelta(hours=1)
                 ) -> list[datetime]:
    """Instants from the first whole hour at or after ``start`` up to before ``end``."""
    t = start.replace(minute=0, second=0, microsecond=0)
    if t < start:
        t += timedelta(hours=1)
    out = []
    while t < end:
        out.append(t)
        t += step
    return out


def free_gpus(cur, *, ticks: list[datetime], partition: str | None = None) -> pd.DataFrame:
    """Per instant of ``ticks`` and node: ts, partition, zone, rack, node, gpus, free
    (GPUs not allocated at that instant)."""
    return cur.execute(_FREE, {"ticks": list(ticks), "partition": partition}).df()


def usual_gpus(cur, *, start: datetime, end: datetime) -> dict[str, float]:
    """Per partition, the usual size of a multi-node job: the median GPUs of the
    multi-node runs that started in ``[start, end)``, else one node's GPUs (median)."""
    with own_cursor(cur) as own, transaction(own):  # the kept rows of the tree it checked
        sql = _USUAL_KEPT if kept_shapes(own) else _USUAL
        rows = own.execute(sql, {"start": start, "end": end}).fetchall()
    return {p: float(m if m is not None and not np.isnan(m) else (n or 1))
            for p, m, n in rows}


def fragmentation(cur, *, ticks: list[datetime], usual: dict[str, float],
                  partition: str | None = None) -> pd.DataFrame:
    """Per instant of ``ticks`` (distinct; from the free GPUs per node, :func:`free_gpus`,
    and the usual sizes of :func:`usual_gpus`): ts, free_gpus, whole_node_gpus (free on
    wholly free nodes), largest_node_gpus, largest_rack_gpus, largest_zone_gpus,
    stranded_gpus, summed (free, whole, stranded) or maxed (largest) over partitions; and
    per partition the same in ``by_partition`` columns of the frame's ``attrs``.

    Counted in numpy on a nodes x instants matrix (issue 17: the same grouped in SQL
    over the 0.5 M node-instants of a 24,576-GPU week took ~0.45 s of CPU, before that
    in pandas ~1 s): each held interval adds its GPUs to its node from the first instant
    at or after its start to the first at or after its end. Integer counts throughout,
    so the figures are those of the SQL and pandas groupings (tests/test_speed_answers.py).
    A partition's usual size is at least 1 GPU (1 where ``usual`` names none)."""
    cols = ["ts", "free_gpus", "whole_node_gpus", "largest_node_gpus", "largest_rack_gpus",
            "largest_zone_gpus", "stranded_gpus"]
    t_us = np.unique(np.array(list(ticks), dtype="datetime64[us]").astype(np.int64))
    if not len(t_us):
        nodes = None
    else:  # one snapshot: _HELD numbers the nodes as _NODES lists them
        first, last = (pd.Timestamp(int(t), unit="us").to_pydatetime() for t in t_us[[0, -1]])
        with own_cursor(cur) as own, transaction(own):
            nodes = own.execute(_NODES, {"partition": partition}).df()
            held = own.execute(_HELD, {"first": first, "last": last, "partition": partition,
                                       "after": last + timedelta(microseconds=1)}
                               ).fetchnumpy()
    if nodes is None or len(nodes) == 0:
        out = pd.DataFrame(columns=cols)
        out.attrs["by_partition"] = pd.DataFrame(columns=[*cols, "partition"])
        return out
    used = _used(len(nodes), held, t_us)
    gpus = nodes["gpus"].to_numpy(np.int64)[:, None]
    free = np.maximum(gpus - used, 0)  # nodes x instants
    whole = np.where((free >= gpus) & (gpus > 0), free, 0)
    part = nodes["partition"].to_numpy(object)
    parts, pcode = np.unique(part, return_inverse=True)  # sorted, as ORDER BY partition
    free_p, whole_p = _reduce(np.add, free, pcode), _reduce(np.add, whole, pcode)
    node_p = _reduce(np.maximum, free, pcode)
    rack_p = _largest(whole, part, nodes["rack"].to_numpy(object), pcode)
    zcode, zpart = _codes(part, nodes["zone"].to_numpy(object), pcode)
    zone_w = _reduce(np.add, whole, zcode)  # zones x instants
    size = np.array([max(1.0, float(usual[p])) if p in usual else 1.0 for p in parts])
    usable = _reduce(np.add, np.floor(zone_w / size[zpart, None]) * size[zpart, None], zpart)
    n_p, n_t = len(parts), len(t_us)
    by_partition = pd.DataFrame({
        "ts": np.tile(t_us, (n_p, 1)).T.ravel().astype("datetime64[us]"),
        "partition": np.tile(parts, n_t),
        "free_gpus": free_p.T.ravel(), "whole_node_gpus": whole_p.T.ravel(),
        "largest_node_gpus": node_p.T.ravel(),
        "largest_rack_gpus": np.maximum(rack_p, node_p).T.ravel(),
        "largest_zone_gpus": np.maximum(_reduce(np.maximum, zone_w, zpart), node_p).T.ravel(),
        "stranded_gpus": (free_p - usable).T.ravel().astype(float)})
    fleet = by_partition.groupby("ts").agg(
        free_gpus=("free_gpus", "sum"), whole_node_gpus=("whole_node_gpus", "sum"),
        largest_node_gpus=("largest_node_gpus", "max"),
        largest_rack_gpus=("largest_rack_gpus", "max"),
        largest_zone_gpus=("largest_zone_gpus", "max"),
        stranded_gpus=("stranded_gpus", "sum")).reset_index()
    fleet.attrs["by_partition"] = by_partition
    return fleet[cols]


def _used(n_nodes: int, held: dict, t_us: np.ndarray) -> np.ndarray:
    """GPUs held per node (rows 0..``n_nodes - 1``, :data:`_HELD`'s ``i``) and instant
    (columns, ``t_us`` sorted microseconds) by :data:`_HELD`'s intervals (rows of one
    node and interval are summed)."""
    n_t = len(t_us)
    i = np.asarray(held["i"], np.int64)
    lo = np.searchsorted(t_us, np.asarray(held["s"], np.int64), "left")
    hi = np.maximum(np.searchsorted(t_us, np.asarray(held["e"], np.int64), "left"), lo)
    n = np.asarray(held["n"], np.int64)
    width = n_t + 1  # each row's diff: +n from its first instant, -n from its end's
    diff = (np.bincount(i * width + lo, weights=n, minlength=n_nodes * width)
            - np.bincount(i * width + hi, weights=n, minlength=n_nodes * width))
    return np.cumsum(diff.reshape(n_nodes, width)[:, :n_t].astype(np.int64), axis=1)


def _reduce(ufunc, values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Rows of ``values`` reduced with ``ufunc`` per group code 0..max(codes), in code
    order (every code present)."""
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    return ufunc.reduceat(values[order], starts, axis=0)


def _codes(part: np.ndarray, group: np.ndarray, pcode: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Per node the code of its (partition, group) pair, and per pair its partition's
    code: racks and zones are grouped within a partition (on integer codes: names joined
    as text could run together, 'gpu' + 'r1' as '' + 'gpur1'; a missing name is a group)."""
    gcode = pd.factorize(group, use_na_sentinel=False)[0].astype(np.int64)
    _, code = np.unique(pcode.astype(np.int64) * (gcode.max() + 1) + gcode,
                        return_inverse=True)
    gpart = np.zeros(code.max() + 1, np.int64)
    gpart[code] = pcode
    return code, gpart


def _largest(whole: np.ndarray, part: np.ndarray, rack: np.ndarray,
             pcode: np.ndarray) -> np.ndarray:
    """Per partition and instant, the most GPUs on wholly free nodes of one rack."""
    code, gpart = _codes(part, rack, pcode)
    return _reduce(np.maximum, _reduce(np.add, whole, code), gpart)


def fleet_fragmentation(cur, *, start: datetime, end: datetime, now: datetime,
                        partition: str | None = None) -> pd.DataFrame:
    """:func:`fragmentation` at each whole hour of ``[start, min(end, now))`` and at
    ``now`` when it falls in ``[start, end]`` (the last row is then "now"), with the usual
    multi-node job size of the window. ``attrs["usual_gpus"]`` holds those sizes and
    ``attrs["by_partition"]`` the per-partition rows (for :func:`waits_while_scattered`)."""
    stop = min(end, now)
    ticks = hourly_ticks(start, stop)
    if start <= now <= end and (not ticks or ticks[-1] < now):
        ticks.append(now)
    usual = usual_gpus(cur, start=start - timedelta(days=7), end=stop)
    frag = fragmentation(cur, ticks=ticks, usual=usual, partition=partition)
    frag.attrs["usual_gpus"] = usual
    return frag
