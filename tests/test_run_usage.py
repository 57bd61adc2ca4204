"""``run_usage_1h`` (migration 032, issue 17): ``gpu_usage_1h`` summed per hour, run and
the node's GPU count, kept with it by the usage refresh, and the per-run energy read from
it: the figures of the usage table's path, whatever the nodes (GPU counts unknown, zero,
several in one run, nodes not in the topology), and not read while ``nodes`` differs from
what the rows were written with."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.migrations import migrated_before
from tests.support.runs import H, T, add_job, ingest, run_refresh, samples, store_usage, topology
from warehouse import run_usage
from warehouse.analytics import Options
from warehouse.migrate import available, migrate
from warehouse.queries import energy as qe
from warehouse.rollups import Retention, apply_retention

KEY = ["job_id", "run_index"]
OPTS = Options()


def _kept_rows(cur) -> list[tuple]:
    """The kept rows, and what they should be (run_usage.SELECT_SQL over every hour)."""
    sql = run_usage.SELECT_SQL
    want = cur.execute(sql, {"lo": datetime(1970, 1, 1), "hi": datetime(2100, 1, 1)})
    want = sorted(want.fetchall(), key=repr)
    got = sorted(cur.execute("SELECT * FROM run_usage_1h").fetchall(), key=repr)
    return got, want


def _telemetry(wh, node: str) -> None:
    """Three hours of the node's 8 GPUs at 300 W, every 15 s, rolled up."""
    ingest(wh, *[samples(node, g, T, 3 * 240, 300.0) for g in range(8)])


def _both(cur, monkeypatch, **window) -> tuple[pd.DataFrame, pd.DataFrame]:
    """run_energy from the kept rows (asserted served) and from gpu_usage_1h."""
    assert run_usage.serves(cur)
    kept = qe.run_energy(cur, opts=OPTS, **window)
    with monkeypatch.context() as m:
        m.setattr(run_usage, "serves", lambda cur: False)
        table = qe.run_energy(cur, opts=OPTS, **window)
    return tuple(df.sort_values(KEY, ignore_index=True) for df in (kept, table))


_USAGE = st.lists(st.tuples(
    st.integers(0, 3),                                   # hour
    st.sampled_from(["n0", "n1", "n2", "ghost"]),        # node (ghost: not in nodes)
    st.sampled_from(["a", "b:1", "c"]), st.integers(0, 1),
    st.one_of(st.none(), st.floats(0, 3600)),            # gpu_s
    st.one_of(st.none(), st.floats(0, 3e6))),            # energy_j
    min_size=1, max_size=14)


@settings(max_examples=40, deadline=None,  # monkeypatch: only its context, per example
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(usage=_USAGE, gpus=st.tuples(*[st.one_of(st.none(), st.integers(0, 8))] * 3))
def test_the_kept_rows_give_the_usage_tables_energy(empty_wh, monkeypatch, usage, gpus):
    """Any usage rows (several nodes of a run in one hour, nodes of other GPU counts, an
    unknown count, zero GPUs, a node missing from the topology, NULL seconds or joules):
    rebuilt, the kept rows are the usage rows summed per hour, run and GPU count, and
    every run's energy read from them is the usage table's."""
    w = empty_wh
    _store(w, usage, gpus)
    cur = w.reader()
    got, want = _kept_rows(cur)
    assert got == want
    kept, table = _both(cur, monkeypatch, start=T, end=T + 4 * H)
    assert len(kept) == len({(job, run) for _, _, job, run, *_ in usage})
    pd.testing.assert_frame_equal(kept, table, check_dtype=False, rtol=1e-9, atol=1e-12)


def test_a_node_listed_without_gpus_shares_its_power_as_a_typical_one(empty_wh,
                                                                      monkeypatch):
    """A node the topology lists with 0 GPUs (or fewer) that has GPU usage: its runs'
    non-GPU share is a typical node's, as for a node the topology does not know; the
    share was divided by 0, and the run's kWh and carbon were infinite (and every sum
    over them)."""
    usage = [(0, "n0", "a", 0, 1800.0, 4e5), (0, "n1", "b", 0, 1800.0, 4e5),
             (1, "ghost", "c", 0, 1800.0, 4e5)]
    for bad in (0, -2):
        _store(empty_wh, usage, (bad, 8, 8))
        kept, table = _both(empty_wh.reader(), monkeypatch, start=T, end=T + 4 * H)
        for df in (kept, table):
            it = df.set_index("job_id")["it_kwh"]
            assert np.isfinite(it).all() and it["a"] == pytest.approx(it["b"]) == \
                pytest.approx(it["c"]), df


def _store(w, usage, gpus) -> None:
    """``usage`` rows (hour, node, job, run, gpu_s, energy_j) in hours 0-3, nodes n0-n2
    with ``gpus`` (tests/support/runs.py:store_usage)."""
    store_usage(w, usage, pd.DataFrame({
        "node": ["n0", "n1", "n2"], "rack": "r0", "partition": "p",
        "gpus": pd.array(list(gpus), dtype="Int64")}), idle_pct=OPTS.idle_util_pct)


def test_a_nodes_change_is_read_live_until_the_refresh(wh, monkeypatch):
    """The refresh keeps the rows with the usage table; a node's GPU count changed
    afterwards (or a node added) is not read from the kept rows until the next refresh
    writes them again, and the figures follow the new count either way."""
    topology(wh, nodes=2)
    for node in ("n0", "n1"):
        add_job(wh, f"j-{node}", [{"start": T, "end": T + 3 * H, "state": "COMPLETED",
                                   "nodes": [node]}])
        _telemetry(wh, node)
    run_refresh(wh, T + 2 * H)  # the first two hours; the kept rows made from them
    assert run_usage.serves(wh.reader()) and len(_kept_rows(wh.reader())[0]) == 4
    run_refresh(wh, T + 4 * H)  # the third: written with its usage rows, nodes unchanged
    cur = wh.reader()
    assert run_usage.serves(cur)
    got, want = _kept_rows(cur)
    assert got == want and len(got) == 6  # 2 runs x 3 hours
    window = {"start": T, "end": T + 3 * H}
    kept, table = _both(cur, monkeypatch, **window)
    pd.testing.assert_frame_equal(kept, table, check_dtype=False, rtol=1e-12)
    before = float(kept["it_kwh"].sum())

    topology(wh, nodes=5)  # n4 added, without GPU usage: no hour to write again
    assert not run_usage.serves(wh.reader())
    assert wh.write(run_usage.refresh).result() == 0 and run_usage.serves(wh.reader())

    topology(wh, nodes=1, gpus=4)  # n0 now holds 4 GPUs: twice the node share
    cur = wh.reader()
    assert not run_usage.serves(cur)
    live = qe.run_energy(cur, opts=OPTS, **window)
    assert float(live["it_kwh"].sum()) > before  # the new count, read from gpu_usage_1h
    run_refresh(wh, T + 4 * H)  # writes again the 3 hours n0 held usage in
    cur = wh.reader()
    assert run_usage.serves(cur)
    got, want = _kept_rows(cur)
    assert got == want and {(r[1], r[3]) for r in got} == {("j-n0", 4), ("j-n1", 8)}
    kept, table = _both(cur, monkeypatch, **window)
    pd.testing.assert_frame_equal(kept, table, check_dtype=False, rtol=1e-12)
    assert float(kept["it_kwh"].sum()) == pytest.approx(float(live["it_kwh"].sum()))


def test_the_rows_are_read_in_the_snapshot_the_check_saw(wh, monkeypatch):
    """The kept rows rewritten (a rebuild's first transaction deletes them) between the
    check that they may be read and the read: every per-run answer is the one of the
    snapshot the check saw, not an empty or partial table."""
    for node in ("n0", "n1"):
        add_job(wh, f"j-{node}", [{"start": T, "end": T + 3 * H, "state": "FAILED",
                                   "nodes": [node], "reason": "NODE_FAIL"}])
        _telemetry(wh, node)
    run_refresh(wh, T + 4 * H)
    window = {"start": T, "end": T + 4 * H, "opts": OPTS}
    reads = {"runs": lambda cur: qe.run_energy(cur, **window).sort_values(
                 KEY, ignore_index=True),  # rows in any order
             "users": lambda cur: qe.job_energy(cur, by="user_name", **window),
             "failures": lambda cur: qe.failure_carbon(cur, by="category", **window)}
    want = {name: read(wh.reader()) for name, read in reads.items()}
    assert len(want["runs"]) == 2 and want["failures"]["lost_kwh"].sum() > 0
    real = run_usage.serves

    def serves_then_deleted(cur):
        ok = real(cur)
        wh.write(lambda con: con.execute("DELETE FROM run_usage_1h")).result()
        return ok

    monkeypatch.setattr(run_usage, "serves", serves_then_deleted)
    for name, read in reads.items():
        wh.write(run_usage.rebuild).result()
        pd.testing.assert_frame_equal(read(wh.reader()), want[name], check_dtype=False)


def test_retention_deletes_the_kept_rows_with_the_usage_rows(wh):
    """The hours retention takes from gpu_usage_1h go from run_usage_1h too."""
    topology(wh, nodes=1)
    add_job(wh, "j", [{"start": T, "end": T + 3 * H, "state": "COMPLETED", "nodes": ["n0"]}])
    _telemetry(wh, "n0")
    run_refresh(wh, T + 4 * H)
    keep = Retention(raw_days=1, mig_days=1, minute_days=1, hour_days=1)
    deleted = wh.write(lambda con: apply_retention(con, T + 2 * H + timedelta(days=1),
                                                   keep)).result()
    assert deleted["run_usage_1h"] == 2 and deleted["gpu_usage_1h"] > 0
    cur = wh.reader()
    got, want = _kept_rows(cur)
    assert got == want and [r[0] for r in got] == [T + 2 * H]


def _old_usage(con) -> None:
    """A node and usage rows as a warehouse before migration 32 or 33 held them."""
    con.execute("INSERT INTO nodes (node, rack, partition, gpus) VALUES ('n0', 'r', 'p', 8)")
    con.execute("""INSERT INTO gpu_usage_1h (ts, node, job_id, run_index, gpu_s, energy_j,
                                             util_s)
                   VALUES ($t, 'n0', 'a', 0, 3600, 1e6, 1800), ($t, 'n0', 'a', 0, 1800, 5e5, 900),
                          ($t, 'n0', NULL, NULL, 900, 1e5, 0), ($u, 'n0', 'b', 1, 60, 1e4, 6),
                          ($u, 'ghost', 'b', 1, 60, 1e4, 60)""",
                {"t": T, "u": T + H})


#: The kept rows of :func:`_old_usage` once built.
_OLD_KEPT = [(T, "a", 0, 8, 5400.0, 1.5e6, 5400.0, 1.5e6, 2700.0, True),
             (T + H, "b", 1, None, 60.0, 1e4, 60.0, 1e4, 60.0, False),
             (T + H, "b", 1, 8, 60.0, 1e4, 60.0, 1e4, 6.0, True)]


def test_migration_leaves_it_to_the_first_refresh(tmp_path):
    """A warehouse written before the table: the migration creates it empty and unserved
    (the per-run energy reads gpu_usage_1h); the first refresh fills it from the usage
    rows already stored."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    mine = migrated_before(con, "run_usage")
    _old_usage(con)
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    assert con.execute("SELECT count(*) FROM run_usage_1h").fetchone() == (0,)
    assert not run_usage.serves(con)
    assert run_usage.refresh(con) == -1 and run_usage.serves(con)  # built
    assert run_usage.refresh(con) == 0  # nothing changed: nothing written again
    assert sorted(con.execute("SELECT * FROM run_usage_1h").fetchall(), key=repr) == sorted(
        _OLD_KEPT, key=repr)
    con.close()


def test_migration_33_writes_the_kept_rows_again_with_the_utilised_seconds(tmp_path):
    """A warehouse whose kept rows were built before migration 33 (without utilised
    seconds or the node's presence): the migration deletes them and unbuilds the table,
    so nothing reads rows without them; the first refresh writes them again."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    mine = migrated_before(con, "run_usage_util")
    _old_usage(con)
    con.execute("INSERT INTO run_usage_1h VALUES ($t, 'a', 0, 8, 5400, 1.5e6, 5400, 1.5e6)",
                {"t": T})
    con.execute("INSERT INTO run_usage_nodes VALUES ('n0', 8)")
    con.execute("INSERT INTO meta VALUES ('run_usage_built', '1')")
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    assert con.execute("SELECT count(*) FROM run_usage_1h").fetchone() == (0,)
    assert not run_usage.serves(con)
    assert run_usage.refresh(con) == -1 and run_usage.serves(con)
    assert sorted(con.execute("SELECT * FROM run_usage_1h").fetchall(), key=repr) == sorted(
        _OLD_KEPT, key=repr)
    con.close()


def test_a_node_added_or_removed_without_a_count_is_read_live_until_the_refresh(empty_wh):
    """Utilisation counts only nodes the topology lists, so a node added or removed
    changes what the kept rows say (``known``) even with no GPU count either side: the
    kept rows are not read until the refresh writes that node's hours again, and the
    figures follow the topology throughout."""
    from warehouse.queries import utilisation as qu

    w = empty_wh
    usage = [(0, "n0", "a", 0, 3600.0, 1e6, 1800.0), (1, "ghost", "a", 0, 3600.0, 1e6, 900.0),
             (2, "n0", "b", 0, 1800.0, 1e6, 1800.0)]
    nodes = pd.DataFrame({"node": ["n0"], "rack": "r0", "partition": "p",
                          "gpus": pd.array([None], dtype="Int64")})
    store_usage(w, usage, nodes, idle_pct=OPTS.idle_util_pct)
    window = {"start": T, "end": T + 4 * H}

    def utilised_s() -> float:
        df = qu.utilisation_by(w.reader(), by="job_type", **window)
        return float(df["utilised_gpu_h"].sum() * 3600)

    assert run_usage.serves(w.reader()) and utilised_s() == 3600.0  # the ghost left out
    w.write(lambda con: con.execute(
        "INSERT INTO nodes (node, rack, partition) VALUES ('ghost', 'r0', 'p')")).result()
    assert not run_usage.serves(w.reader()) and utilised_s() == 4500.0  # read live
    assert w.write(run_usage.refresh).result() == 1  # the ghost's one hour
    assert run_usage.serves(w.reader()) and utilised_s() == 4500.0
    w.write(lambda con: con.execute("DELETE FROM nodes WHERE node = 'n0'")).result()
    assert not run_usage.serves(w.reader()) and utilised_s() == 900.0
    assert w.write(run_usage.refresh).result() == 2
    assert run_usage.serves(w.reader()) and utilised_s() == 900.0
