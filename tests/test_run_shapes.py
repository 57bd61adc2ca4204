"""``run_shapes`` (migration 030, issue 17): each run's place in the network tree, kept by
the writer, and Placement's runs and usual job size read from it: the figures grouping
the window's allocations gives (the former queries, kept in warehouse/placement.py as
the path for a tree the writer did not write, are the reference)."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS
from tests.support.migrations import migrated_before
from tests.support.placement import WriteBetween, assert_placed
from warehouse import placement as pl
from warehouse import placement_runs, run_shapes
from warehouse.db import fill
from warehouse.migrate import available, migrate

T0 = datetime(2026, 11, 9)
M = timedelta(minutes=1)
H = timedelta(hours=1)
RACKS = pd.DataFrame({"rack": ["r0", "r1", "r2", "r3"], "zone": ["z0", "z0", "z1", None],
                      "row": 1, "x": 0.0, "y": 0.0})
NODES = pd.DataFrame({"node": [f"n{i}" for i in range(8)],
                      "rack": ["r0", "r0", "r1", "r1", "r2", "r2", "r3", "r3"],
                      "partition": ["a", "a", "a", "b", "b", "b", None, "a"],
                      "gpus": [4, 4, 4, 4, 8, 8, 4, 4]})


def _kept(cur) -> None:
    """run_shapes is every run's shape on the tree now, and run_shapes_tree that tree."""
    def rows(sql):
        return sorted(cur.execute(sql).fetchall(), key=repr)
    assert rows("SELECT * FROM run_shapes") == rows(fill(run_shapes.SELECT_SQL, where=""))
    assert rows("SELECT * FROM run_shapes_tree") == rows(pl.TREE_ROWS)
    assert pl.kept_shapes(cur)


def _topology(w, racks: pd.DataFrame = RACKS, nodes: pd.DataFrame = NODES) -> None:
    w.ingest("racks", racks).result()
    w.ingest("nodes", nodes).result()


def _runs(rng) -> pd.DataFrame:
    """Runs over 1-4 nodes (a node outside the tree at times) of 1-3 GPUs each; most with
    one span, some with another span on one node (across a window's edge), a few with
    a NULL start on one node, some open."""
    rows = []
    for k in range(int(rng.integers(5, 30))):
        start = T0 + 10 * M * int(rng.integers(0, 60))
        end = None if rng.random() < 0.15 else start + 10 * M * int(rng.integers(1, 40))
        nodes = list(rng.choice([*NODES["node"], "x9"], int(rng.integers(1, 5)), replace=False))
        odd = int(rng.integers(len(nodes))) if rng.random() < 0.3 else -1
        for i, node in enumerate(nodes):
            s, e = start, end
            if i == odd:
                s = None if rng.random() < 0.2 else start + 10 * M * int(rng.integers(0, 20))
                e = None if rng.random() < 0.3 else (s or start) + 10 * M * int(
                    rng.integers(1, 30))
            rows += [{"job_id": f"j{k % 7}", "run_index": k // 7, "node": str(node),
                      "gpu_index": 4 * i + g, "start_ts": s, "end_ts": e}
                     for g in range(int(rng.integers(1, 4)))]
    return pd.DataFrame(rows)


def _windows(rng, n: int = 4):
    for _ in range(n):
        start = T0 + 10 * M * int(rng.integers(-6, 80))
        end = start + 10 * M * int(rng.integers(1, 60))
        now = end + 10 * M * int(rng.integers(-30, 10))
        yield start, end, now


def _same_answers(cur, rng) -> None:
    """The kept queries give the former ones' rows, for windows anywhere (``now`` before,
    inside or after the window's end) and each partition."""
    for start, end, now in _windows(rng):
        for partition, min_gpus, min_nodes in ((None, 1, 2), ("a", 3, 2), ("b", 1, 2),
                                               ("", 1, 2), (None, 1, 3)):
            p = {"start": start, "end": end, "now": now, "partition": partition,
                 "min_gpus": min_gpus, "min_nodes": min_nodes}
            want = cur.execute(pl._FIGURES_MULTI, p).df()
            got = cur.execute(pl._FIGURES_KEPT, p).df()
            pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
            if (partition, min_gpus, min_nodes) == (None, 1, 2):  # the page's chart and table
                assert_placed(placement_runs.placed_runs(cur, start=start, end=end, now=now,
                                                         rows=3), want, 3)
        u = {"start": start, "end": end}
        assert (sorted(cur.execute(pl._USUAL_KEPT, u).fetchall())
                == sorted(cur.execute(pl._USUAL, u).fetchall()))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_kept_shapes_give_the_grouped_figures(empty_wh, seed):
    """Random runs, then the tree changed by deliveries (a node moved to another rack
    and partition, a rack to another zone), then the runs' later deliveries (ends set, a
    GPU added): after each,
    the table is the runs' shapes on the tree, and the kept queries answer as grouping
    the allocations does."""
    rng = np.random.default_rng(seed)
    w = empty_wh
    try:
        _topology(w)
        runs = _runs(rng)
        w.ingest("allocations", runs).result()
        _kept(w.reader())
        _same_answers(w.reader(), rng)
        moved = NODES.sample(1, random_state=int(rng.integers(1000)))
        w.ingest("nodes", moved.assign(rack="r3", partition="b")).result()
        _kept(w.reader())
        _same_answers(w.reader(), rng)
        w.ingest("racks", RACKS.iloc[[int(rng.integers(4))]].assign(zone="z9")).result()
        _kept(w.reader())
        _same_answers(w.reader(), rng)
        later = runs[runs["end_ts"].isna()].head(int(rng.integers(0, 6)))
        later = later.assign(end_ts=T0 + 10 * M * int(rng.integers(60, 100)))
        extra = runs.head(1).assign(gpu_index=40)
        w.ingest("allocations", pd.concat([later, extra], ignore_index=True)).result()
        _kept(w.reader())
        _same_answers(w.reader(), rng)
    finally:
        _clear(w)


def test_a_tree_written_otherwise_is_not_trusted(empty_wh):
    """A node moved by SQL, not by the writer's ingest: the kept rows are not the tree's,
    so job_placement and usual_gpus group the allocations (the moved node's run spans
    two racks now); rebuild follows the tree again."""
    w = empty_wh
    rows = pd.DataFrame({"job_id": "j", "run_index": 0, "node": ["n0", "n0", "n1", "n1"],
                         "gpu_index": [0, 1, 0, 1], "start_ts": T0, "end_ts": T0 + H})
    p = {"start": T0, "end": T0 + 2 * H, "now": T0 + 2 * H}
    try:
        _topology(w)
        w.ingest("allocations", rows).result()
        assert pl.job_placement(w.reader(), min_nodes=2, detail=False, **p)["racks"].tolist() == [1]
        w.write(lambda con: con.execute("UPDATE nodes SET rack = 'r1' WHERE node = 'n1'")
                ).result()
        assert not pl.kept_shapes(w.reader())
        assert pl.job_placement(w.reader(), min_nodes=2, detail=False, **p)["racks"].tolist() == [2]
        w.write(run_shapes.rebuild).result()
        _kept(w.reader())
        assert w.reader().execute("SELECT racks FROM run_shapes").fetchall() == [(2,)]
    finally:
        _clear(w)


def test_migration_keeps_the_shapes_of_the_runs_stored(tmp_path):
    """A warehouse written before the table: the migration fills it and its tree from the
    runs' allocations (through migration 029's run_nodes) and the tree."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    mine = migrated_before(con, "run_nodes")
    con.execute("INSERT INTO racks (rack, zone) VALUES ('r0', 'z0'), ('r1', 'z1')")
    con.execute("INSERT INTO nodes (node, rack, partition, gpus) VALUES "
                "('n0', 'r0', 'a', 4), ('n1', 'r1', 'a', 4), ('n2', 'r1', NULL, 4)")
    con.execute("""INSERT INTO allocations (job_id, run_index, node, gpu_index, start_ts,
                   end_ts, alloc_key) VALUES
        ('a', 0, 'n0', 0, $t, NULL, 1), ('a', 0, 'n1', 0, $t, NULL, 2),
        ('a', 0, 'n2', 0, $t, NULL, 3), ('b', 0, 'n2', 1, $t, $u, 4),
        ('b', 0, 'x9', 1, $t, $u, 5)""", {"t": T0, "u": T0 + H})
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    _kept(con)
    assert con.execute("SELECT job_id, partition, gpus, nodes, racks, zones, end_ts "
                       "FROM run_shapes ORDER BY job_id").fetchall() == [
        ("a", "a", 3, 3, 2, 2, None), ("b", "", 1, 1, 1, 1, T0 + H)]
    con.close()


def _clear(w) -> None:
    w.write(lambda con: con.execute(CLEAR_ALLOCATIONS + "; DELETE FROM nodes; "
                                    "DELETE FROM racks; DELETE FROM run_shapes_tree")).result()


def test_a_tree_changed_by_hand_and_back_is_followed(empty_wh):
    """A node moved by SQL, a run then delivered on it, the node moved back by SQL: the
    run's kept row was computed on the tree run_shapes_tree then held, so the readers see
    a tree they do not hold and group the runs (racks 1 again, as live); the next
    delivery follows the tree (a second reader's case: the row was kept on the moved
    tree and trusted once the tree was back)."""
    w = empty_wh
    run = pd.DataFrame({"job_id": "j", "run_index": 0, "node": ["n0", "n0", "n1", "n1"],
                        "gpu_index": [0, 1, 0, 1], "start_ts": T0, "end_ts": T0 + H})
    p = {"start": T0, "end": T0 + 2 * H, "now": T0 + 2 * H}
    try:
        _topology(w)
        w.write(lambda con: con.execute("UPDATE nodes SET rack = 'r2' WHERE node = 'n1'")
                ).result()
        w.ingest("allocations", run).result()
        _kept(w.reader())
        assert w.reader().execute("SELECT racks, zones FROM run_shapes").fetchall() == [(2, 2)]
        w.write(lambda con: con.execute("UPDATE nodes SET rack = 'r0' WHERE node = 'n1'")
                ).result()
        assert not pl.kept_shapes(w.reader())
        got = pl.job_placement(w.reader(), min_nodes=2, detail=False, **p)
        assert got[["racks", "zones"]].values.tolist() == [[1, 1]]
        assert_placed(placement_runs.placed_runs(w.reader(), **p), got, 500)  # grouped as well
        w.ingest("nodes", NODES.head(1)).result()  # any topology delivery follows it
        _kept(w.reader())
        assert w.reader().execute("SELECT racks, zones FROM run_shapes").fetchall() == [(1, 1)]
    finally:
        _clear(w)


def test_the_tree_check_and_the_runs_are_read_in_one_snapshot(empty_wh):
    """A node moved by hand between the tree check and the runs' read: the answer is the
    tree's before the move throughout (1 rack, fewest 1), never the kept row beside the
    moved tree's capacities (1 rack where 2 are the fewest possible); the next read
    groups the runs on the moved tree (2 racks)."""
    w = empty_wh
    racks = pd.DataFrame({"rack": ["r0", "r1", "r2"], "zone": "z0", "row": 1, "x": 0.0,
                          "y": 0.0})
    nodes = pd.DataFrame({"node": ["n0", "n1", "n2"], "rack": ["r0", "r0", "r1"],
                          "partition": "a", "gpus": 4})
    run = pd.DataFrame({"job_id": "j", "run_index": 0, "node": ["n0"] * 4 + ["n1"] * 4,
                        "gpu_index": [0, 1, 2, 3] * 2, "start_ts": T0, "end_ts": T0 + H})
    p = {"start": T0, "end": T0 + 2 * H, "now": T0 + 2 * H, "min_nodes": 2, "detail": False}
    move = "UPDATE nodes SET rack = 'r2' WHERE node = 'n1'"
    try:
        _topology(w, racks, nodes)
        w.ingest("allocations", run).result()
        got = pl.job_placement(WriteBetween(w, move), **p)
        assert got[["racks", "min_racks"]].values.tolist() == [[1, 1]]
        w.write(lambda con: con.execute("UPDATE nodes SET rack = 'r0' WHERE node = 'n1'")
                ).result()
        placed = placement_runs.placed_runs(WriteBetween(w, move), start=T0, end=T0 + 2 * H,
                                            now=T0 + 2 * H)  # the page's chart and cards
        assert placed.markers[["racks", "min_racks"]].values.tolist() == [[1, 1]]
        after = pl.job_placement(w.reader(), **p)
        assert after[["racks", "min_racks"]].values.tolist() == [[2, 2]]
        w.write(lambda con: con.execute("UPDATE nodes SET rack = 'r0' WHERE node = 'n1'")
                ).result()
        usual = pl.usual_gpus(WriteBetween(w, move), start=T0, end=T0 + H)
        assert usual == {"a": 8.0}
    finally:
        _clear(w)
