"""``run_nodes`` (migration 029, issue 17): the allocations counted per run, node and
span, and ``run_node_counts`` (migration 031): each run's distinct nodes, kept by the
writer in step with ``allocations``, and the answers read from them (lemon nodes here;
r_f's exposure and Placement's runs and usual size against their former allocation
queries in tests/test_speed_answers_goodput.py and tests/test_speed_answers_placement.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS
from tests.support.migrations import migrated_before
from warehouse import run_nodes
from warehouse.db import fill
from warehouse.migrate import available, migrate
from warehouse.queries import failures as fq

T0 = datetime(2026, 11, 2)
H = timedelta(hours=1)
EVERY = fill(run_nodes.SELECT_SQL, where="")
#: Each run's distinct nodes, counted from the allocations themselves (the reference).
COUNTED = ("SELECT job_id, run_index, count(DISTINCT node)::INTEGER FROM allocations "
           "GROUP BY ALL")


def _rows(cur, sql: str) -> list[tuple]:
    return sorted(cur.execute(sql).fetchall(), key=repr)


def _kept(cur) -> None:
    """run_nodes holds exactly the allocations counted per run, node and span, and
    run_node_counts each run's distinct nodes."""
    assert _rows(cur, "SELECT * FROM run_nodes") == _rows(cur, EVERY)
    assert _rows(cur, "SELECT * FROM run_node_counts") == _rows(cur, COUNTED)


def _clear(w) -> None:
    w.write(lambda con: con.execute(CLEAR_ALLOCATIONS + "; DELETE FROM failures; "
                                    "DELETE FROM nodes")).result()


_TIMES = st.sampled_from([None, T0, T0 + H, T0 + 90 * timedelta(minutes=1), T0 + 5 * H])
_ROW = st.fixed_dictionaries({
    "job_id": st.sampled_from(["j0", "j1", "j2"]), "run_index": st.integers(0, 1),
    "node": st.sampled_from(["n0", "n1", "n2"]), "gpu_index": st.integers(0, 3),
    "start_ts": _TIMES, "end_ts": _TIMES})


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(_ROW, min_size=1, max_size=12), min_size=1, max_size=5))
def test_every_delivery_keeps_it_the_allocations_counted(empty_wh, batches):
    """Any deliveries (new GPUs of a run, a start or end set later, a NULL that keeps the
    stored value, the same rows again, two jobs in one batch): after each, run_nodes is
    the allocations counted per run, node and span."""
    w = empty_wh
    try:
        for batch in batches:
            w.ingest("allocations", pd.DataFrame(batch)).result()
            _kept(w.reader())
    finally:
        _clear(w)


def test_the_same_delivery_again_rewrites_nothing(empty_wh):
    """Every Slurm poll delivers the running jobs' allocations again: their rows are kept
    as they are (same rowids), and only the job whose rows changed is rewritten."""
    w = empty_wh
    rows = pd.DataFrame({"job_id": ["a"] * 4 + ["b"] * 2, "run_index": 0,
                         "node": ["n0", "n0", "n1", "n1", "n2", "n2"],
                         "gpu_index": [0, 1, 0, 1, 0, 1], "start_ts": T0, "end_ts": None})
    ids = "SELECT job_id, node, rowid FROM run_nodes ORDER BY ALL"
    try:
        counts = "SELECT job_id, rowid FROM run_node_counts ORDER BY ALL"
        w.ingest("allocations", rows).result()
        first = w.reader().execute(ids).fetchall()
        first_counts = w.reader().execute(counts).fetchall()
        w.ingest("allocations", rows).result()
        assert w.reader().execute(ids).fetchall() == first
        assert w.reader().execute(counts).fetchall() == first_counts
        ended = rows.assign(end_ts=np.where(rows["job_id"] == "b", T0 + H, None))
        w.ingest("allocations", ended).result()
        now = w.reader().execute(ids).fetchall()
        assert [r for r in now if r[0] == "a"] == [r for r in first if r[0] == "a"]
        assert [r for r in now if r[0] == "b"] != [r for r in first if r[0] == "b"]
        _kept(w.reader())
        assert w.reader().execute("SELECT end_ts, gpus FROM run_nodes WHERE job_id = 'b'"
                                  ).fetchall() == [(T0 + H, 2)]
    finally:
        _clear(w)


def test_rebuild_counts_allocations_written_otherwise(empty_wh):
    """A writer that inserts allocations itself (bench/analytics.py) rebuilds the table."""
    w = empty_wh
    try:
        w.write(lambda con: con.execute(
            "INSERT INTO allocations (job_id, run_index, node, gpu_index, start_ts, end_ts, "
            "alloc_key) SELECT 'x', 0, 'n' || (g // 4), g, $t, NULL, g FROM range(8) t(g)",
            {"t": T0})).result()
        assert w.reader().execute("SELECT count(*) FROM run_nodes").fetchone()[0] == 0
        w.write(run_nodes.rebuild).result()
        _kept(w.reader())
        assert w.reader().execute("SELECT count(*) FROM run_nodes").fetchone()[0] == 2
    finally:
        _clear(w)


def test_migration_counts_the_allocations_already_stored(tmp_path):
    """A warehouse written before the table: the migration fills it from its
    allocations, NULL starts and ends and a run over two spans on one node included."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    mine = migrated_before(con, "run_nodes")
    con.execute("""INSERT INTO allocations (job_id, run_index, node, gpu_index, start_ts,
                   end_ts, alloc_key) VALUES
        ('a', 0, 'n0', 0, $t, NULL, 1), ('a', 0, 'n0', 1, $t, NULL, 2),
        ('a', 0, 'n1', 0, $t, $u, 3), ('a', 1, 'n1', 1, NULL, NULL, 4),
        ('b', 0, 'n0', 2, $t, $u, 5), ('b', 0, 'n0', 3, $u, $u, 6)""",
                {"t": T0, "u": T0 + H})
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    _kept(con)
    assert con.execute("SELECT count(*), sum(gpus) FROM run_nodes").fetchone() == (5, 6)
    assert _rows(con, "SELECT * FROM run_node_counts") == [("a", 0, 2), ("a", 1, 1),
                                                           ("b", 0, 1)]
    con.close()


def test_migration_counts_the_runs_nodes_already_stored(tmp_path):
    """A warehouse written with run_nodes and before migration 031: the migration adds
    each row's sums of GPU index, key and share, and counts each run's distinct nodes
    (a node held over two spans once)."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    mine = migrated_before(con, "run_node_sums")
    con.execute("""INSERT INTO allocations (job_id, run_index, node, gpu_index, start_ts,
                   end_ts, alloc_key) VALUES
        ('a', 0, 'n0', 0, $t, NULL, 1), ('a', 0, 'n0', 1, $u, NULL, 2),
        ('a', 0, 'n1', 0, $t, $u, 3), ('b', 2, 'n1', 1, NULL, NULL, 4)""",
                {"t": T0, "u": T0 + H})
    con.execute("INSERT INTO run_nodes SELECT job_id, run_index, node, start_ts, end_ts, "
                "gpus FROM (" + EVERY + ")")  # as migration 029 filled it
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    _kept(con)
    assert _rows(con, "SELECT * FROM run_node_counts") == [("a", 0, 2), ("b", 2, 1)]
    con.close()


#: Lemon nodes' exposure and failed runs as they were read from the allocations before
#: run_nodes (the reference).
_NODE_BEFORE = """
WITH exposure AS (
    SELECT a.node, sum(greatest(0, epoch_us(least(coalesce(a.end_ts, $end), $end))
                               - epoch_us(greatest(a.start_ts, $start))) / 8.64e10)
               / any_value(coalesce(n.gpus, $gpus_per_node)) AS node_days
    FROM allocations a LEFT JOIN nodes n USING (node)
    WHERE a.start_ts < $end AND coalesce(a.end_ts, $end) > $start
    GROUP BY a.node
),
involved AS (
    SELECT a.node, count(DISTINCT (f.job_id, f.run_index)) AS failed_runs_on_node
    FROM failures f JOIN allocations a USING (job_id, run_index)
    WHERE f.end_ts >= $start AND f.end_ts < $end GROUP BY a.node
)
SELECT n.node, coalesce(e.node_days, 0) AS node_days,
       coalesce(v.failed_runs_on_node, 0) AS failed_runs_on_node
FROM (SELECT node FROM nodes) n LEFT JOIN exposure e USING (node)
LEFT JOIN involved v USING (node) ORDER BY n.node
"""


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hours=st.sampled_from([1, 3, 24]))
def test_lemon_nodes_count_what_the_allocations_gave(empty_wh, seed, hours):
    """Per node, the node-days of allocated work and the failed runs that held it, from
    run_nodes: those read from the allocations before (random runs over 1-3 nodes, some
    GPUs each, open ones, a node of 4 GPUs and one outside ``nodes``)."""
    rng = np.random.default_rng(seed)
    w = empty_wh
    nodes = pd.DataFrame({"node": ["n0", "n1", "n2", "n3"], "rack": "r0",
                          "gpus": [8, 8, 4, 8]})
    rows, failed = [], []
    for k in range(int(rng.integers(1, 25))):
        start = T0 + timedelta(minutes=int(rng.integers(0, 48 * 60)))
        end = None if rng.random() < 0.2 else start + timedelta(minutes=int(rng.integers(1, 900)))
        for node in rng.choice(["n0", "n1", "n2", "n3", "x9"], int(rng.integers(1, 4)),
                               replace=False):
            rows += [{"job_id": f"j{k}", "run_index": 0, "node": str(node), "gpu_index": g,
                      "start_ts": start, "end_ts": end} for g in range(int(rng.integers(1, 5)))]
        if end is not None and rng.random() < 0.5:
            failed.append((f"j{k}", end))
    try:
        w.ingest("nodes", nodes).result()
        w.ingest("allocations", pd.DataFrame(rows)).result()
        w.write(lambda con: con.executemany(
            "INSERT INTO failures (job_id, run_index, end_ts, category, reason, source) "
            "VALUES (?, 0, ?, 'infrastructure', 'x', 'none')", failed) if failed else None
        ).result()
        p = {"start": T0 + timedelta(hours=24 - hours), "end": T0 + 24 * H, "gpus_per_node": 8}
        want = w.reader().execute(_NODE_BEFORE, p).df()
        got = fq.lemon_nodes(w.reader(), start=p["start"], end=p["end"], gpus_per_node=8)
        got = got[got["node"].isin(want["node"])].sort_values("node", ignore_index=True)
        assert got["node"].tolist() == want["node"].tolist()
        assert got["failed_runs_on_node"].tolist() == want["failed_runs_on_node"].tolist()
        np.testing.assert_allclose(got["node_days"], want["node_days"], rtol=1e-12)
    finally:
        _clear(w)


def test_the_tables_have_the_columns_of_their_selects(empty_wh):
    """The tables' columns are their SELECTs', in order (both are inserted whole)."""
    cur = empty_wh.reader()
    cols = [r[0] for r in cur.execute("DESCRIBE run_nodes").fetchall()]
    assert cols == list(run_nodes.COLUMNS) == [r[0] for r in cur.execute("DESCRIBE " + EVERY).fetchall()]
    counts = fill(run_nodes.COUNTS_SQL, rows="run_nodes", where="")
    assert ([r[0] for r in cur.execute("DESCRIBE run_node_counts").fetchall()]
            == ["job_id", "run_index", "nodes"]
            == [r[0] for r in cur.execute("DESCRIBE " + counts).fetchall()])


#: A run's GPUs on one node over one span: (job, run, node, start, end, GPUs and shares).
_GROUP = st.tuples(st.sampled_from(["j0", "j1"]), st.integers(0, 1), st.sampled_from(["n0", "n1"]),
                   _TIMES, _TIMES,
                   st.dictionaries(st.integers(0, 7), st.one_of(
                       st.none(), st.sampled_from([0.0, 0.25, 1 / 3, 1.0, 1.5, -0.5])),
                       min_size=1, max_size=8))


def _group_rows(groups) -> list[dict]:
    return [{"job_id": j, "run_index": r, "node": n, "gpu_index": g, "start_ts": s,
             "end_ts": e, "share": share}
            for j, r, n, s, e, gpus in groups for g, share in gpus.items()]


@settings(max_examples=60, deadline=None)
@given(groups=st.lists(_GROUP, min_size=1, max_size=4),
       window=st.sampled_from([(0, 1), (0, 5), (1, 2), (2, 6)]))
def test_the_read_checks_moments_from_it_are_the_allocations(empty_wh, groups, window):
    """The kept hours' read check sums the allocations' exact moments (microseconds, time
    moment, x GPU index, x key, x share) from run_nodes' rows: the same integers as from
    the allocations themselves, for any window, NULL starts and ends, and shares out of
    range or NULL."""
    from warehouse import fleet_hours as fh

    start, end = T0 + window[0] * H, T0 + window[1] * H
    clip = {"s": "greatest(start_ts, $start::TIMESTAMP)",
            "e": "least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP)"}
    where = " WHERE start_ts < $end AND coalesce(end_ts, $end) > $start"
    w = empty_wh
    try:
        w.ingest("allocations", pd.DataFrame(_group_rows(groups))).result()
        cur = w.reader()
        p = {"start": start, "end": end}
        want = cur.execute("SELECT " + fill(fh.MOMENTS, share_ppm=fh.SHARE_PPM, **clip)
                           + " FROM allocations" + where, p).fetchall()
        got = cur.execute("SELECT " + fill(fh.RUN_NODE_MOMENTS, **clip) + " FROM run_nodes"
                          + where, p).fetchall()
        assert got == want
    finally:
        _clear(w)
