"""Issue 17 (speed), placement and the weekly report's scheduling figures: the faster
queries give the answers the former ones gave (scattered waits, fragmentation, runs'
spans, the usual multi-node job size). Each rewrite is checked against the
implementation it replaced, kept here as the reference, on hand-built and generated
inputs; the other rewrites are in tests/test_speed_answers.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS
from tests.support.placement import WriteBetween, assert_placed, scored
from warehouse import placement as pl
from warehouse import placement_runs, run_nodes
from warehouse import placement_waits as pw
from warehouse.db import fill
from warehouse.schema import derived_columns

T0 = datetime(2026, 11, 9)
H = timedelta(hours=1)

_hours = st.integers(min_value=-3, max_value=30)
_partition = st.sampled_from(["train", "eval", None])


def _window(params: dict) -> dict:
    """``params``' window and partition: what ``placement_runs.placed_runs`` is asked."""
    return {k: params[k] for k in ("start", "end", "now", "partition")}


def _scattered_waits_loop(pending, by_partition, *, now, node_gpus, step_h=1.0):
    """The per-job loop :func:`warehouse.placement_waits.scattered_waits` replaced."""
    out = pending.copy()
    pend, scat = [], []
    for job in pending.itertuples():
        until = job.start_ts if pd.notna(job.start_ts) else now
        rows = by_partition[(by_partition["partition"] == job.partition)
                            & (by_partition["ts"] >= job.submit_ts) & (by_partition["ts"] < until)]
        room = rows["whole_node_gpus"] if job.gpus > node_gpus else rows["largest_node_gpus"]
        pend.append(len(rows) * step_h)
        scat.append(int(((rows["free_gpus"] >= job.gpus) & (room < job.gpus)).sum()) * step_h)
    out["pending_h"] = pend
    out["scattered_h"] = scat
    return out


@st.composite
def _waits_inputs(draw):
    n_ticks = draw(st.integers(min_value=0, max_value=30))
    parts = draw(st.lists(st.sampled_from(["train", "eval"]), min_size=n_ticks,
                          max_size=n_ticks))
    gpus = st.one_of(st.integers(min_value=0, max_value=40).map(float), st.just(np.nan))
    by_partition = pd.DataFrame({
        "ts": [T0 + draw(_hours) * H for _ in range(n_ticks)],
        "partition": parts,
        "free_gpus": [draw(gpus) for _ in range(n_ticks)],
        "whole_node_gpus": [draw(gpus) for _ in range(n_ticks)],
        "largest_node_gpus": [draw(gpus) for _ in range(n_ticks)],
    })
    by_partition["ts"] = by_partition["ts"].astype("datetime64[us]")
    n_jobs = draw(st.integers(min_value=0, max_value=12))
    submit = [T0 + draw(_hours) * H + draw(st.integers(0, 59)) * timedelta(minutes=1)
              for _ in range(n_jobs)]
    started = [None if draw(st.booleans()) else s + draw(st.integers(0, 20)) * H
               for s in submit]
    pending = pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n_jobs)],
        "partition": [draw(_partition) for _ in range(n_jobs)],
        "gpus": [draw(st.sampled_from([4, 8, 16, 24, 32])) for _ in range(n_jobs)],
        "submit_ts": pd.Series(submit, dtype="datetime64[us]"),
        "start_ts": pd.Series(started, dtype="datetime64[us]"),
    })
    return pending, by_partition, draw(st.sampled_from([4.0, 8.0]))


@given(_waits_inputs())
def test_scattered_waits_as_the_per_job_loop(args):
    pending, by_partition, node_gpus = args
    now = T0 + 25 * H
    got = pw.scattered_waits(pending, by_partition, now=now, node_gpus=node_gpus)
    want = _scattered_waits_loop(pending, by_partition, now=now, node_gpus=node_gpus)
    assert got["pending_h"].tolist() == want["pending_h"].tolist()
    assert got["scattered_h"].tolist() == want["scattered_h"].tolist()
    assert got.drop(columns=["pending_h", "scattered_h"]).equals(
        want.drop(columns=["pending_h", "scattered_h"]))


def test_scattered_waits_by_hand():
    """Two jobs of 16 GPUs on 8-GPU nodes, hourly instants 0..3 of partition train:
    free 16/16/20/8, whole-node free 8/16/8/8. Job a pends hours 0-2 (started at 3):
    scattered at 0 and 2; job b (still pending at now = hour 4) from hour 1: 1..3,
    scattered at 2 only (hour 3 has 8 free)."""
    by_partition = pd.DataFrame({
        "ts": [T0 + k * H for k in range(4)], "partition": "train",
        "free_gpus": [16, 16, 20, 8], "whole_node_gpus": [8, 16, 8, 8],
        "largest_node_gpus": [8, 8, 8, 8]})
    pending = pd.DataFrame({"job_id": ["a", "b"], "partition": "train", "gpus": [16, 16],
                            "submit_ts": [T0, T0 + H - timedelta(minutes=5)],
                            "start_ts": [T0 + 3 * H, pd.NaT]})
    got = pw.scattered_waits(pending, by_partition, now=T0 + 4 * H, node_gpus=8.0)
    assert got["pending_h"].tolist() == [3.0, 3.0]
    assert got["scattered_h"].tolist() == [2.0, 1.0]


@pytest.mark.parametrize("partition", [None, "train", "other"])
@pytest.mark.parametrize("hours", [(0, 4), (-20, 5), (2, 4), (1, 3)])
def test_waits_read_the_fragmentation_frames_free_gpus(partition, hours):
    """The Placement page and the report read and group the free GPUs once: the waits from
    fleet_fragmentation's per-partition frame equal the waits that read their own
    (tests/support/placement.py: job P, submitted T + 30 min, pends 3 h, 2 of them
    scattered), for a partition, one without nodes, a range reaching past now, one
    starting after P's submission and one ending before now."""
    from tests.support.placement import NOW, T, seed_placement
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    try:
        seed_placement(w)
        start, end = T + hours[0] * H, T + hours[1] * H
        window = {"start": start, "end": end, "now": NOW, "min_gpus": 10,
                  "partition": partition}
        frag = pl.fleet_fragmentation(w.reader(), start=start, end=end, now=NOW,
                                      partition=partition)
        own = pw.waits_while_scattered(w.reader(), **window)
        shared = pw.waits_while_scattered(w.reader(), frag=frag, **window)
        pd.testing.assert_frame_equal(shared, own)
        if hours == (0, 4) and partition != "other":
            assert own[["pending_h", "scattered_h"]].values.tolist() == [[3.0, 2.0]]
    finally:
        w.close()


#: The free GPUs per instant and node as warehouse/placement.py queried them before issue
#: 17: every allocation of the warehouse range-joined with every instant.
_FREE_GPUS_JOIN = pl.TREE.join(["WITH", """,
ticks AS (SELECT unnest($ticks::TIMESTAMP[]) AS ts),
used AS (
    SELECT k.ts, a.node, count(*) AS used
    FROM ticks k JOIN allocations a
      ON a.start_ts <= k.ts AND (a.end_ts IS NULL OR a.end_ts > k.ts)
    GROUP BY ALL
)
SELECT k.ts, t.partition, t.zone, t.rack, t.node, t.gpus,
       greatest(t.gpus - coalesce(u.used, 0), 0) AS free
FROM ticks k CROSS JOIN tree t
LEFT JOIN used u ON u.ts = k.ts AND u.node = t.node
WHERE $partition::VARCHAR IS NULL OR t.partition = $partition
ORDER BY k.ts, t.node
"""])


def _fragmentation_pandas(free: pd.DataFrame, usual: dict) -> pd.DataFrame:
    """The pandas grouping warehouse.placement.fragmentation replaced (issue 17)."""
    cols = ["ts", "free_gpus", "whole_node_gpus", "largest_node_gpus", "largest_rack_gpus",
            "largest_zone_gpus", "stranded_gpus"]
    if len(free) == 0:
        out = pd.DataFrame(columns=cols)
        out.attrs["by_partition"] = pd.DataFrame(columns=[*cols, "partition"])
        return out
    f = free.assign(whole=np.where((free["free"] >= free["gpus"]) & (free["gpus"] > 0),
                                   free["free"], 0))
    keys = ["ts", "partition"]
    part = f.groupby(keys).agg(free_gpus=("free", "sum"), whole_node_gpus=("whole", "sum"),
                               largest_node_gpus=("free", "max"))
    rack = f.groupby([*keys, "rack"])["whole"].sum().groupby(level=keys).max()
    zone = f.groupby([*keys, "zone"])["whole"].sum()
    part["largest_rack_gpus"] = np.maximum(rack, part["largest_node_gpus"])
    part["largest_zone_gpus"] = np.maximum(zone.groupby(level=keys).max(),
                                           part["largest_node_gpus"])
    size = zone.index.get_level_values("partition").map(
        lambda p: max(1.0, float(usual.get(p, 1.0))))
    usable = (np.floor(zone.to_numpy() / size.to_numpy()) * size.to_numpy())
    part["stranded_gpus"] = part["free_gpus"] - pd.Series(usable, index=zone.index).groupby(
        level=keys).sum()
    part = part.reset_index()
    fleet = part.groupby("ts").agg(
        free_gpus=("free_gpus", "sum"), whole_node_gpus=("whole_node_gpus", "sum"),
        largest_node_gpus=("largest_node_gpus", "max"),
        largest_rack_gpus=("largest_rack_gpus", "max"),
        largest_zone_gpus=("largest_zone_gpus", "max"),
        stranded_gpus=("stranded_gpus", "sum")).reset_index()
    fleet.attrs["by_partition"] = part
    return fleet[cols]


def _seed_fleet(wh, rng) -> None:
    """A random fleet for the placement checks: 3 partitions over 12 racks (a third
    without a zone), nodes of 4 or 8 GPUs and a few without a GPU count, ~300
    allocations of whole and partial nodes, some still open, some starting or ending
    exactly on an instant."""
    racks = [f"r{i}" for i in range(12)]
    wh.ingest("racks", pd.DataFrame({"rack": racks, "zone": [
        None if i % 3 == 0 else f"z{i % 4}" for i in range(12)], "row": 1, "x": 0.0,
        "y": 0.0})).result()
    nodes = pd.DataFrame({"node": [f"n{i:02d}" for i in range(48)],
                          "rack": [racks[i % 12] for i in range(48)],
                          "partition": [["a", "b", None][i % 3] for i in range(48)],
                          "gpus": [[4, 8, 4, 8, 0][i % 5] for i in range(48)]})
    wh.ingest("nodes", nodes).result()
    rows = []
    for k in range(300):
        node = nodes.iloc[int(rng.integers(48))]
        start = T0 + timedelta(minutes=30 * int(rng.integers(0, 60)))
        end = None if rng.random() < 0.1 else start + timedelta(minutes=30 * int(
            rng.integers(1, 12)))
        for g in range(int(rng.integers(1, max(node["gpus"], 1) + 1))):
            rows.append({"job_id": f"j{k}", "run_index": 0, "node": node["node"],
                         "gpu_index": g, "start_ts": start, "end_ts": end})
    wh.ingest("allocations", pd.DataFrame(rows)).result()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fragmentation_in_sql_as_the_pandas_grouping(seed):
    """free_gpus (allocations cut to the instants, counted per node and interval) and
    fragmentation (grouped in SQL) give the frames the range join over every allocation
    and the pandas grouping gave, fleet-wide and per partition, with and without usual
    sizes, at hourly instants and one off the hour."""
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    try:
        _seed_fleet(w, np.random.default_rng(seed))
        ticks = pl.hourly_ticks(T0 - H, T0 + 29 * H) + [T0 + 29.5 * H]
        for partition in (None, "a", ""):
            params = {"ticks": ticks, "partition": partition}
            old = w.reader().execute(_FREE_GPUS_JOIN, params).df()
            new = pl.free_gpus(w.reader(), **params)
            assert old["free"].sum() > 0 and (old["free"] < old["gpus"]).any()
            pd.testing.assert_frame_equal(new, old, check_dtype=False)
            for usual in ({}, {"a": 12.0, "b": 0.5}, {"": 8.0}):
                want = _fragmentation_pandas(old, usual)
                got = pl.fragmentation(w.reader(), ticks=ticks, usual=usual,
                                       partition=partition)
                pd.testing.assert_frame_equal(got, want, check_dtype=False)
                pd.testing.assert_frame_equal(
                    got.attrs["by_partition"], want.attrs["by_partition"],
                    check_dtype=False)
    finally:
        w.close()


#: The runs' spans as warehouse/placement.py counted them before issue 17: per allocation
#: row, the partition by mode().
_JOB_SPANS_ROWS = pl._JOBS.split("per_node AS (")[0] + """runs AS (
    SELECT a.job_id, a.run_index, count(*) AS gpus, count(DISTINCT a.node) AS nodes,
           count(DISTINCT t.rack) AS racks, count(DISTINCT t.zone) AS zones,
           mode(t.partition) AS partition, list(DISTINCT t.rack ORDER BY t.rack) AS rack_list,
           min(a.start_ts) AS start_ts,
           max(least(coalesce(a.end_ts, $now), $now)) AS end_ts
    FROM allocations a JOIN tree t USING (node)
    WHERE a.start_ts < $end AND a.start_ts <= $now AND coalesce(a.end_ts, $now) > $start
    GROUP BY a.job_id, a.run_index
)
SELECT r.job_id, r.run_index, j.name, j.user_name, j.job_type, r.partition, r.gpus,
       r.nodes, r.racks, r.zones,
       CAST(ceil(r.gpus / c.rack_gpus) AS INTEGER) AS min_racks,
       CAST(ceil(r.gpus / c.zone_gpus) AS INTEGER) AS min_zones,
       array_to_string(r.rack_list, ' ') AS rack_names, r.start_ts, r.end_ts,
       r.gpus * greatest(epoch_us(least(r.end_ts, $end)) - epoch_us(greatest(r.start_ts, $start)),
                         0) / 3.6e9 AS gpu_hours
FROM runs r JOIN cap c USING (partition)
LEFT JOIN jobs j USING (job_id)
WHERE r.end_ts > r.start_ts
  AND ($partition::VARCHAR IS NULL OR r.partition = $partition)
  AND r.gpus >= $min_gpus
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_job_spans_counted_per_node_as_per_allocation(seed):
    """job_placement counts each run per node first: the same runs, spans, scores and
    GPU-hours as counting every allocation row (each run of the random fleet lies in one
    partition, where the mode and the partition holding most GPUs agree)."""
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    try:
        _seed_fleet(w, np.random.default_rng(seed))
        multi = pd.DataFrame([{"job_id": f"m{k}", "run_index": k % 2, "node": f"n{n:02d}",
                               "gpu_index": g, "start_ts": T0 + k * H,
                               "end_ts": T0 + (k + 3) * H}
                              for k in range(6) for n in (k, k + 3, k + 6) for g in range(2)])
        w.ingest("allocations", multi).result()  # runs over several racks and zones
        for partition, min_gpus in ((None, 1), ("a", 1), (None, 6)):
            params = {"start": T0 + 2 * H, "end": T0 + 20 * H, "now": T0 + 18 * H,
                      "partition": partition, "min_gpus": min_gpus}
            key = ["job_id", "run_index"]  # ties of score and GPU-hours come in any order
            want = scored(w.reader().execute(_JOB_SPANS_ROWS, params).df()).sort_values(
                key, ignore_index=True)
            got = pl.job_placement(w.reader(), **params).sort_values(key, ignore_index=True)
            assert len(want) > 10 and (want["racks"] > 1).any()
            pd.testing.assert_frame_equal(got, want, check_dtype=False)
    finally:
        w.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_reports_runs_without_names_are_the_pages_runs(seed):
    """The weekly report reads multi-node runs without their racks' names and job names
    (detail=False, issue 17): the same runs, spans, scores and GPU-hours as the Placement
    page's, and so the same summary, in each partition, with and without a size or node
    filter."""
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    try:
        _seed_fleet(w, np.random.default_rng(seed))
        multi = pd.DataFrame([{"job_id": f"m{k}", "run_index": k % 2, "node": f"n{n:02d}",
                               "gpu_index": g, "start_ts": T0 + k * H,
                               "end_ts": None if k == 5 else T0 + (k + 3) * H}
                              for k in range(6) for n in (k, k + 12, k + 1 + seed)
                              for g in range(2)])  # two nodes of each run in one rack
        w.ingest("allocations", multi).result()
        w.ingest("allocations", pd.DataFrame([  # m4's node in r0 ends before the window
            {"job_id": "m4", "run_index": 0, "node": "n24", "gpu_index": 0,
             "start_ts": T0, "end_ts": T0 + H}])).result()
        w.ingest("jobs", pd.DataFrame({"job_id": [f"m{k}" for k in range(5)],  # m5: none
                                       "name": [f"train-{k}" for k in range(5)],
                                       "user_name": "ann", "job_type": "pretrain"})).result()
        named = ["name", "user_name", "job_type", "rack_names"]
        for partition, min_gpus, min_nodes in ((None, 1, 2), ("a", 1, 2), ("b", 1, 2),
                                               ("", 1, 2), (None, 6, 2), (None, 1, 3)):
            params = {"start": T0 + 2 * H, "end": T0 + 20 * H, "now": T0 + 18 * H,
                      "partition": partition, "min_gpus": min_gpus, "min_nodes": min_nodes}
            key = ["job_id", "run_index"]
            page = pl.job_placement(w.reader(), **params)
            report = pl.job_placement(w.reader(), detail=False, **params)
            assert not set(named) & set(report.columns)
            pd.testing.assert_frame_equal(
                report.sort_values(key, ignore_index=True),
                page.drop(columns=named).sort_values(key, ignore_index=True),
                check_dtype=False)
            if min_gpus == 1 and min_nodes == 2:  # the page's chart, cards and table
                placed = placement_runs.placed_runs(w.reader(), rows=2, **_window(params))
                assert_placed(placed, page.drop(columns=named), 2)
            for frame in (page, report):  # ties by job and run: the same rows every call
                pd.testing.assert_frame_equal(frame, frame.sort_values(
                    ["score", "gpu_hours", "job_id", "run_index"],
                    ascending=[True, False, True, True], ignore_index=True))
            # the Placement page names only its table's rows: as the detailed query does,
            # in the order given
            picked = pd.concat([report.iloc[1::2], report.iloc[::2]])
            got = pl.name_runs(w.reader(), picked, start=params["start"],
                               end=params["end"], now=params["now"])
            assert list(got["job_id"]) == list(picked["job_id"])  # in their order
            want = picked[key].merge(page[key + named], on=key, how="left")
            def plain(df):  # None and NaN alike: one frame's strings may be Arrow's
                return df.astype(object).where(df.notna(), None)
            pd.testing.assert_frame_equal(plain(got[key + named]), plain(want))
            if (partition, min_gpus, min_nodes) == (None, 1, 2):
                assert got["name"].notna().any() and got["rack_names"].notna().all()
                assert "r0" not in got.set_index("job_id").loc["m4", "rack_names"]
            if (partition, min_gpus, min_nodes) == (None, 1, 2):  # runs to compare
                assert len(page) >= 5 and page["misplaced"].any()
                assert (page["racks"] < page["nodes"]).all()  # racks counted once
    finally:
        w.close()


#: The usual multi-node job size as warehouse/placement.py counted it before issue 17's
#: single-node filter: every run's nodes counted.
_USUAL_EVERY_RUN = pl.TREE.join(["WITH", """,
runs AS (
    SELECT a.job_id, a.run_index, count(*) AS gpus, count(DISTINCT a.node) AS nodes,
           mode(t.partition) AS partition
    FROM allocations a JOIN tree t USING (node)
    WHERE a.start_ts >= $start AND a.start_ts < $end
    GROUP BY a.job_id, a.run_index
)
SELECT t.partition, median(r.gpus) AS multi_node_gpus, (SELECT median(gpus) FROM tree x
       WHERE x.partition = t.partition) AS node_gpus
FROM (SELECT DISTINCT partition FROM tree) t
LEFT JOIN runs r ON r.partition = t.partition AND r.nodes > 1
GROUP BY t.partition
"""])


def _multi_node_runs(rng) -> pd.DataFrame:
    """Allocations of runs over 1-4 nodes (some GPUs of each) in one partition or two
    (most GPUs in one), a few with a node outside the tree, a few with two allocation
    rows on one node only, some open."""
    rows = []
    for k in range(int(rng.integers(20, 40))):
        first = int(rng.integers(0, 46))
        nodes = [f"n{(first + 3 * i) % 48:02d}" for i in range(int(rng.integers(1, 5)))]
        if rng.random() < 0.15:
            nodes.append("x99")  # not in the tree
        if rng.random() < 0.15 and len(nodes) > 1:
            nodes.append(f"n{(first + 1) % 48:02d}")  # another partition, one GPU
        start = T0 + timedelta(minutes=30 * int(rng.integers(0, 50)))
        end = None if rng.random() < 0.1 else start + int(rng.integers(1, 12)) * H
        for i, node in enumerate(nodes):
            for g in range(1 if i == len(nodes) - 1 and i > 0 else int(rng.integers(2, 4))):
                rows.append({"job_id": f"mm{k}", "run_index": k % 2, "node": node,
                             "gpu_index": g, "start_ts": start, "end_ts": end})
    return pd.DataFrame(rows)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_multi_node_runs_only_as_every_run_filtered(empty_wh, seed):
    """The weekly report asks job_placement for runs on 2 or more nodes only (single-node
    runs are left before grouping, issue 17): the rows of every run with nodes >= 2, and
    the same placement summary; usual_gpus counts only runs on several nodes: the sizes
    counting every run gave."""
    rng = np.random.default_rng(seed)
    w = empty_wh
    try:
        _seed_fleet(w, rng)
        w.ingest("allocations", _multi_node_runs(rng)).result()
        for partition, min_gpus in ((None, 1), ("a", 6)):
            params = {"start": T0 + 2 * H, "end": T0 + 20 * H, "now": T0 + 18 * H,
                      "partition": partition, "min_gpus": min_gpus}
            key = ["job_id", "run_index"]
            every = pl.job_placement(w.reader(), **params)
            if partition is None and min_gpus == 1:  # both kinds of run are there
                assert (every["nodes"] >= 2).any() and (every["nodes"] == 1).any()
            want = every[every["nodes"] >= 2].sort_values(key, ignore_index=True)
            got = pl.job_placement(w.reader(), min_nodes=2, **params).sort_values(
                key, ignore_index=True)
            pd.testing.assert_frame_equal(got, want, check_dtype=False)
            if min_gpus == 1:  # the page's and the report's figures: the same runs
                assert_placed(placement_runs.placed_runs(w.reader(), rows=3, **_window(params)),
                              want.sort_values(["score", "gpu_hours", "job_id", "run_index"],
                                               ascending=[True, False, True, True],
                                               ignore_index=True), 3)
        for start, end in ((T0 - 24 * H, T0 + 30 * H), (T0 + 5 * H, T0 + 9 * H)):
            rows = w.reader().execute(_USUAL_EVERY_RUN, {"start": start, "end": end}
                                      ).fetchall()
            want = {p: float(m if m is not None and not np.isnan(m) else (n or 1))
                    for p, m, n in rows}
            assert pl.usual_gpus(w.reader(), start=start, end=end) == want
    finally:
        w.write(lambda con: con.execute(
            CLEAR_ALLOCATIONS + "; DELETE FROM nodes; DELETE FROM racks")).result()


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       hours=st.lists(st.integers(min_value=-4, max_value=32), min_size=0, max_size=12,
                      unique=True),
       off_hour=st.booleans(), partition=st.sampled_from([None, "a", "", "zz"]),
       usual=st.dictionaries(st.sampled_from(["a", "b", ""]),
                             st.sampled_from([0.5, 1.0, 2.5, 4.0, 8.0, 12.0, 24.0])))
def test_fragmentation_in_numpy_as_the_pandas_grouping(empty_wh, seed, hours, off_hour,
                                                       partition, usual):
    """fragmentation counts the free GPUs on a nodes x instants matrix in numpy (issue 17):
    the frames of the pandas grouping over the range join with every allocation, on
    random fleets (zones and none, nodes without GPUs, open allocations, intervals
    starting or ending on an instant), any set of instants, every partition filter and
    usual sizes."""
    w = empty_wh
    try:
        _seed_fleet(w, np.random.default_rng(seed))
        ticks = [T0 + h * H for h in hours] + ([T0 + 7.5 * H] if off_hour else [])
        free = w.reader().execute(_FREE_GPUS_JOIN, {"ticks": ticks, "partition": partition}
                                  ).df()
        want = _fragmentation_pandas(free, usual)
        got = pl.fragmentation(w.reader(), ticks=ticks, usual=usual, partition=partition)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        pd.testing.assert_frame_equal(got.attrs["by_partition"], want.attrs["by_partition"],
                                      check_dtype=False)
    finally:
        w.write(lambda con: con.execute(
            CLEAR_ALLOCATIONS + "; DELETE FROM nodes; DELETE FROM racks")).result()


@pytest.mark.parametrize("change", [
    "UPDATE nodes SET partition = 'a' WHERE node = 'c'",
    "INSERT INTO nodes (node, rack, partition, gpus) VALUES ('a', 'r0', 'p', 8)"])
def test_fragmentation_reads_the_tree_and_the_allocations_in_one_snapshot(change):
    """The held intervals name their node by its number in the tree (issue 17): a node
    added, or moved to another partition, between reading the tree and the allocations
    must not renumber them (a second reader's case: c's 8 held GPUs were charged to b,
    or the arrays' shapes differed)."""
    from warehouse import Warehouse

    with Warehouse(":memory:") as w:
        def load(con):
            con.execute("INSERT INTO nodes (node, rack, partition, gpus) "
                        "VALUES ('b', 'r0', 'p', 4), ('c', 'r0', 'p', 8)")
            con.execute(fill("""INSERT INTO allocations BY NAME SELECT *{key} FROM (
                SELECT 'j' AS job_id, 0 AS run_index, 'c' AS node, g::SMALLINT AS gpu_index,
                       $1::TIMESTAMP AS start_ts, NULL::TIMESTAMP AS end_ts
                FROM range(8) t(g))""", key=derived_columns("allocations")), [T0])
            run_nodes.rebuild(con)  # written here, not through the ingest
        w.write(load).result()
        got = pl.fragmentation(WriteBetween(w, change), ticks=[T0 + H], usual={})
        assert got["free_gpus"].tolist() == [4]  # b free, c held, as before the change
        assert pl.fragmentation(w.reader(), ticks=[T0 + H], usual={})[
            "free_gpus"].tolist() == [4 + 8 * change.startswith("INSERT")]
