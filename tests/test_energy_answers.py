"""Issue 17 (speed) in the energy queries: each rewrite gives the answers of the code it
replaced, kept here as the reference, on generated allocations (shared GPUs, shares, MIG
instances, several runs of a job, job ids holding ':' and '-') and the seeded cluster.

- The runs filter (warehouse/usage.py: ``WANTED``, ``RUNS``) unnests the list parameter
  once per statement; it unnested it twice per use, with a regular expression.
- The minute path's runs filter is evaluated per allocation (``wanted``), no longer per
  minute row joined, and the shared allocations are found among the range's allocations
  (``ua0``), not in the whole table.
"""

from __future__ import annotations

import re
from datetime import timedelta

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.allocations import rebuild_derived
from tests.support.runs import M, T, ingest, samples, topology
from warehouse import Warehouse, carbon, usage
from warehouse.analytics import Options
from warehouse.db import fill
from warehouse.queries import energy as qe

#: The runs filter before (issue 17, first round): the list unnested in each subquery.
OLD_RUNS = ("($runs::VARCHAR[] IS NULL"
            " OR {alias}job_id IN (SELECT regexp_extract(unnest($runs), '^(.*):-?[0-9]+$', 1))"
            " AND {alias}job_id || ':' || {alias}run_index IN (SELECT unnest($runs)))")


def _former(sql: str) -> str:
    """``sql`` (a statement over usage.minutes or usage.TABLE) as it was: the former runs
    filter, applied to every minute row joined, the runs' unshared allocations' minutes
    in one frame with the shared ones, and the shared allocations looked up in the whole
    allocations table."""
    new = fill(usage.RUNS, alias="")
    whole = fill(usage._WHOLE, overlap_s=usage._OVERLAP_S)
    out = re.sub(r"um_solo AS \(.*?\n\),\n", "", sql, flags=re.S)
    out = out.replace(whole + " AND a.shared", whole + f" AND (a.shared OR {new})")
    out = out.replace("FROM um_solo", "FROM um0 WHERE NOT shared")
    out = re.sub(r"FROM ua0 b\b.*?WHERE b\.node",
                 "FROM allocations b WHERE b.start_ts < $end"
                 " AND coalesce(b.end_ts, $end) > $start AND b.node", out, flags=re.S)
    assert new in out
    return out.replace(new, fill(OLD_RUNS, alias=""))


_TEXT = st.text(alphabet=st.sampled_from(list("ab7-:é\u0301 _")), max_size=6)


@given(keys=st.lists(st.tuples(_TEXT, st.integers(-3, 12)), max_size=8),
       wanted=st.one_of(st.none(), st.lists(st.tuples(_TEXT, st.integers(-3, 12)),
                                             max_size=6)),
       pick=st.lists(st.integers(0, 7), max_size=4))
def test_the_runs_filter_keeps_the_rows_the_former_kept(keys, wanted, pick):
    """Any job ids (':' and '-' inside, digits at the end, combining marks) and run
    indexes: the rows kept are the former filter's."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (job_id VARCHAR, run_index INTEGER)")
    if keys:
        con.executemany("INSERT INTO t VALUES (?, ?)", keys)
    runs = None if wanted is None else [f"{j}:{int(r)}" for j, r in
                                        wanted + [keys[i] for i in pick if i < len(keys)]]
    new = fill("WITH {wanted} SELECT * FROM t WHERE {runs} ORDER BY ALL",
               wanted=usage.WANTED, runs=fill(usage.RUNS, alias="t."))
    old = fill("SELECT * FROM t WHERE {runs} ORDER BY ALL", runs=fill(OLD_RUNS, alias="t."))
    assert con.execute(new, {"runs": runs}).fetchall() == \
        con.execute(old, {"runs": runs}).fetchall()


@pytest.mark.parametrize("text", ["J:01", "J: 1", "J:1 ", "J:1.5", "J:0x10", "J:1e0", "J:-0",
                                  "J:+1", "J:99999999999", "J:", "J", "J:1:", ":1", "J:١",
                                  None])
def test_a_run_text_matches_only_its_own_digits(text):
    """A run index written otherwise than SQL writes it (a second reader's case: a lenient
    cast matched 'J:01' to run 1, 'J:1.5' to run 2, 'J:0x10' to run 16) matches no run,
    as the texts compared before did not; 'J:1' and 'J:-3' match theirs."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (job_id VARCHAR, run_index INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)",
                    [("J", 1), ("J", 2), ("J", 16), ("J", 0), ("J", -3), ("J:1", 0), ("", 1)])
    new = fill("WITH {wanted} SELECT * FROM t WHERE {runs} ORDER BY ALL",
               wanted=usage.WANTED, runs=fill(usage.RUNS, alias="t."))
    old = fill("SELECT * FROM t WHERE {runs} ORDER BY ALL", runs=fill(OLD_RUNS, alias="t."))
    for runs in ([text], [text, "J:1", "J:-3"]):
        want = con.execute(old, {"runs": runs}).fetchall()
        assert con.execute(new, {"runs": runs}).fetchall() == want
    assert con.execute(new, {"runs": ["J:1", "J:-3"]}).fetchall() == [("J", -3), ("J", 1)]


OPTS = Options(node_overhead_w=120.0, pue=1.3, fallback_g_per_kwh=400.0)
START, END = T + timedelta(seconds=50), T + 100 * M


@pytest.fixture(scope="module")
def gpus_wh():
    """GPUs n0/0 and n0/1 whose power changes every minute over 2 h; MIG instances on
    n0/0 for the first 80 minutes."""
    wh = Warehouse(":memory:")
    topology(wh, nodes=1, gpus=2)
    frames = [samples("n0", g, T + k * M, 4, 100 + (37 * k + 91 * g) % 500)
              for k in range(120) for g in (0, 1)]
    energy = pd.concat(frames, ignore_index=True).sort_values(["gpu_index", "ts"])
    energy["energy_j"] = (energy["power_w"] * 15.0).groupby(energy["gpu_index"]).cumsum()
    ingest(wh, energy)
    rows = [{"ts": T + k * M + timedelta(seconds=15 * s), "node": "n0", "gpu_index": 0,
             "gpu_i_id": gi, "gpu_i_profile": prof, "sm_active_pct": (k * 13 + 7 * gi) % 60,
             "mem_used_mib": 1000.0 * ((k + gi) % 4)}
            for k in range(80) for s in range(4)
            for gi, prof in ((1, "3g.40gb"), (2, "2g.20gb"), (3, "1g.10gb"))]
    wh.ingest("mig_samples", pd.DataFrame(rows)).result()
    yield wh
    wh.close()


_SECONDS = st.integers(min_value=0, max_value=2 * 3600)
_HOLDS = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0),
                   st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2))
_ALLOC = st.tuples(st.sampled_from(["1", "1:2", "7-", "é"]), st.integers(0, 1),
                   st.integers(0, 1), _SECONDS, _SECONDS, _HOLDS)


def _minute_runs(cur, source: str, runs) -> pd.DataFrame:
    """Per-run energy of [START, END) over the minute path's usage source ``source``."""
    sql = fill(fill(qe._RUN_USAGE_SQL, source=source), ctes=carbon.intensity_ctes().strip(),
               group="p.job_id, p.run_index", join="")
    params = {"node_w": OPTS.node_overhead_w, "idle_pct": float(OPTS.idle_util_pct),
              "runs": runs, "partition": None, "rack": None,
              **qe._carbon_params(OPTS, timedelta(minutes=1))}
    df = cur.execute(*usage.bind(sql, start=START, end=END, **params)).df()
    return df.sort_values(["job_id", "run_index"], ignore_index=True)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(allocs=st.lists(_ALLOC, max_size=6, unique_by=lambda a: a[:3]),
       pick=st.one_of(st.none(), st.lists(st.integers(0, 5), max_size=3)))
def test_the_minute_paths_run_energy_is_the_formers(gpus_wh, allocs, pick):
    """Any allocations on the two GPUs (time-sliced, shares, MIG instances, several runs
    of a job) and any runs asked for: each run's energy is the former query's."""
    def reset(con):
        for table in ("allocations", "job_runs", "jobs"):
            con.execute(f"DELETE FROM {table}")
    gpus_wh.write(reset).result()
    if allocs:
        df = pd.DataFrame([{
            "job_id": j, "run_index": r, "node": "n0", "gpu_index": g,
            "start_ts": T + timedelta(seconds=min(a, b)),
            "end_ts": T + timedelta(seconds=max(a, b) + 1),
            "share": h if isinstance(h, float) else None,
            "gpu_i_ids": sorted(set(h)) if isinstance(h, list) and g == 0 else None}
            for j, r, g, a, b, h in allocs])
        gpus_wh.ingest("allocations", df).result()
    runs = None if pick is None else [f"{allocs[i][0]}:{allocs[i][1]}" for i in pick
                                      if i < len(allocs)] + ["none:0"]
    cur = gpus_wh.reader()
    new = _minute_runs(cur, usage.minutes(free=False), runs)
    old = _minute_runs(cur, _former(usage.minutes(free=False)), runs)
    pd.testing.assert_frame_equal(new, old, check_dtype=False, rtol=1e-12)


@pytest.fixture(scope="module")
def seeded(seeded_usage):
    """The seeded cluster with its usage table complete (conftest's ``seeded_usage``)."""
    return seeded_usage


def _failure_carbon_before(cur, *, start, end, resolution):
    """energy.failure_carbon as it was: the failed runs' keys passed as a list."""
    fails = cur.execute("SELECT job_id, run_index, category, reason, gpu_hours_lost, start_ts"
                        " FROM failures WHERE end_ts >= $start AND end_ts < $end",
                        {"start": start, "end": end}).df()
    lo = min(pd.Timestamp(fails["start_ts"].min()).to_pydatetime(), start)
    keys = list(zip(fails["job_id"].tolist(), fails["run_index"].tolist(), strict=True))
    runs = qe.run_energy(cur, start=lo, end=end, resolution=resolution, runs=keys)
    return _price_lost_before(fails, runs)[["job_id", "run_index", "category", "reason",
                                            "gpu_hours_lost", "lost_kwh", "lost_carbon_kg"]]


def _price_lost_before(fails, runs, *, fleet_kwh=None, fleet_kg=None):
    """energy.price_lost as it was, in pandas (issue 17: now energy._LOST_SQL)."""
    df = fails.merge(runs, on=["job_id", "run_index"], how="left")
    per_h = df["gpu_hours"].where(df["gpu_hours"] > 0)
    lost = df["gpu_hours_lost"]
    df["lost_kwh"] = lost * df["facility_kwh"] / per_h
    df["lost_carbon_kg"] = lost * df["carbon_kg"] / per_h
    if fleet_kwh is not None:
        df["lost_kwh"] = df["lost_kwh"].fillna(lost * fleet_kwh)
    if fleet_kg is not None:
        df["lost_carbon_kg"] = df["lost_carbon_kg"].fillna(lost * fleet_kg)
    return df


@pytest.mark.parametrize("hours,resolution", [(10.25, None), (10.25, "minute"), (30, None),
                                              (30, "hour")])
def test_failure_and_run_energy_on_the_seeded_cluster_are_the_formers(seeded, hours,
                                                                     resolution,
                                                                     monkeypatch):
    """The seeded cluster's failed runs and every run, on the table, minute and hour
    paths: the figures of the former statements."""
    wh, now = seeded
    window = {"start": now - timedelta(hours=hours), "end": now - timedelta(minutes=5),
              "resolution": resolution}
    new_fail = qe.failure_carbon(wh.reader(), **window)
    new_runs = qe.run_energy(wh.reader(), **window)
    former = {path: (_former(sql) if path in ("table", "minute") else
                     sql.replace(usage.WANTED + ",", "").replace(
                         fill(usage.RUNS, alias="aw."), fill(OLD_RUNS, alias="aw.")).replace(
                         fill(usage.RUNS, alias=""), fill(OLD_RUNS, alias="")))
              for path, sql in qe._RUN.items()}
    monkeypatch.setattr(qe, "_RUN", former)
    old_fail = _failure_carbon_before(wh.reader(), **window)
    old_runs = qe.run_energy(wh.reader(), **window)
    assert len(new_fail) > 0 and new_fail["lost_kwh"].sum() > 0
    for new, old in ((new_fail, old_fail), (new_runs, old_runs)):  # rows in any order
        new, old = (df.sort_values(["job_id", "run_index"], ignore_index=True)
                    for df in (new, old))
        pd.testing.assert_frame_equal(new, old, check_dtype=False, rtol=1e-12)


def _live_window(cur, start, end):
    """The method card's seconds as they were computed: every allocation-hour of the
    range joined with its GPU-hours (energy_method._WINDOW_SQL), per method."""
    from warehouse.queries import energy_method as em

    df = cur.execute(em._WINDOW_SQL, {"start": start, "end": end}).df()
    df = em._by_method(cur, df, start=start, end=end, resolution=None)
    return [float(df[m].sum()) for m in em.METHODS]


@pytest.mark.parametrize("hours,cut", [(48, timedelta(0)), (7.25, timedelta(minutes=5)),
                                       (30, timedelta(minutes=41))])
def test_the_method_cards_kept_hours_give_the_live_seconds(seeded, hours, cut):
    """Whole hours from the sums the refresh keeps in fleet_hours_1h, ragged ends live:
    the seconds per method of the join over the whole range."""
    from warehouse.queries import energy_method as em

    wh, now = seeded
    start, end = now - timedelta(hours=hours) - cut, now - cut
    cur = wh.reader()
    assert em.kept_hours(cur, usage.ceil_hour(start), usage.floor_hour(end)) is not None
    want = _live_window(cur, start, end)
    assert sum(want) > 0
    assert list(em.window_seconds(cur, start=start, end=end)) == pytest.approx(
        want, rel=1e-12, abs=1e-9)


def test_a_changed_energy_row_share_or_unkept_hour_is_live_until_recomputed():
    """What the kept sums were computed from changed (a GPU-hour's counter samples, an
    allocation's share, a row kept before migration 20): that range is computed live,
    with the new answer, until the refresh recomputes the hour."""
    from tests.support.dash_seed import NOW, seed_dashboard
    from warehouse.analytics import refresh
    from warehouse.queries import energy_method as em

    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        while w.write(lambda con: refresh(con, NOW, None)).result()["usage_pending"]:
            pass
        start, end = NOW - timedelta(hours=24), NOW
        hour = NOW - timedelta(hours=6)
        changes = [
            "UPDATE gpu_energy_1h SET counter_samples = samples, method = 'counter'"
            " WHERE ts = $ts",
            "UPDATE allocations SET share = 0.25 WHERE start_ts <= $ts"
            " AND coalesce(end_ts, $ts + INTERVAL 1 HOUR) > $ts",
            "UPDATE fleet_hours_1h SET energy_sig = NULL, held_s = 0 WHERE ts = $ts",
        ]
        for sql in changes:
            before = em.window_seconds(w.reader(), start=start, end=end)
            w.write(lambda con, sql=sql: (con.execute(sql, {"ts": hour}),
                                          rebuild_derived(con))).result()
            assert em.kept_hours(w.reader(), start, end) is None, sql
            live = _live_window(w.reader(), start, end)
            got = em.window_seconds(w.reader(), start=start, end=end)
            assert list(got) == pytest.approx(live, rel=1e-12), sql
            w.write(lambda con: refresh(con, NOW, None)).result()
            assert em.kept_hours(w.reader(), start, end) is not None, sql
            assert list(em.window_seconds(w.reader(), start=start, end=end)) == \
                pytest.approx(live, rel=1e-12), sql
            if "fleet_hours_1h" not in sql:  # the change moved the answer
                assert list(got) != pytest.approx(list(before), rel=1e-9), sql
    finally:
        w.close()


_PART_ROWS = st.lists(st.tuples(st.sampled_from(["a", "b:1", "é"]), st.integers(0, 2),
                                st.one_of(st.none(), st.floats(-1e6, 1e6)),
                                st.integers(0, 9)), max_size=6)


@given(parts=st.lists(st.tuples(_PART_ROWS, st.integers(0, 9), st.integers(0, 9)),
                      max_size=4))
def test_the_parts_as_one_statement_are_the_parts_frames_combined(parts):
    """usage.union: the parts' statements, each giving the same parameters ($min and
    $min_top, one a prefix of the other) their own values, as one statement summed per
    key, are usage.combine of the parts' frames (a sum of NULLs stays NULL), under a
    caller's own $min; none is the empty statement."""
    con = duckdb.connect()
    part_sql = ("SELECT k AS job_id, r AS run_index, sum(v) AS kwh FROM (VALUES {rows}) "
                "t(k, r, v, w) WHERE w >= $min AND w <= $min_top "
                "GROUP BY ALL")  # a row per key, as a run's
    empty = "SELECT NULL::VARCHAR AS job_id, NULL::INTEGER AS run_index, " \
            "NULL::DOUBLE AS kwh WHERE FALSE"
    statements = []
    for rows, low, top in parts:
        values = ", ".join(f"('{k}', {r}, {'NULL' if v is None else repr(v)}::DOUBLE, {w})"
                           for k, r, v, w in rows) or "(NULL, NULL, NULL::DOUBLE, -1)"
        statements.append((fill(part_sql, rows=values), {"min": low, "min_top": top}))
    sql, params = usage.union(statements, ["job_id", "run_index"], ["kwh"], empty=empty)
    # the caller's own $min (a wrapper's): never one of the parts'
    got = con.execute(f"SELECT * FROM ({sql}) WHERE $min < 1", {**params, "min": 0}).df()
    frames = [con.execute(s, p).df() for s, p in statements]
    want = usage.combine(frames, ["job_id", "run_index"], ["kwh"]) if frames else \
        pd.DataFrame(columns=["job_id", "run_index", "kwh"])
    if statements:  # every part's parameters renamed, one part's too
        assert "$min_p0" in sql and "$min_top_p0" in sql
        assert not re.search(r"\$min(_top)?\b", sql), sql
    key = ["job_id", "run_index"]
    got, want = (df.dropna(subset=key).sort_values(key, ignore_index=True) for df in (got, want))
    assert got[key].values.tolist() == want[key].values.tolist()
    assert got["kwh"].astype(float).tolist() == pytest.approx(
        want["kwh"].astype(float).tolist(), rel=1e-12, abs=1e-9, nan_ok=True)


#: energy._BY_JOB_SQL as it was: each part's per-run sums, summed per job keys.
_BY_JOB_BEFORE = """
SELECT {keys}, sum(r.gpu_hours) AS gpu_hours, sum(r.gpu_kwh) AS gpu_kwh,
       sum(r.it_kwh) AS it_kwh, sum(r.facility_kwh) AS facility_kwh,
       sum(r.carbon_kg) AS carbon_kg
FROM ({runs}) r LEFT JOIN jobs j USING (job_id)
GROUP BY ALL
"""


def test_a_window_of_several_parts_is_summed_per_run_once(seeded):
    """A window of several parts (the usage table's hours, live minutes and the 1-hour
    tier): run energy and energy per user (summed per user, not per run first) are the
    former per-part frames of per-run sums combined in pandas."""
    wh, now = seeded
    start, end = now - timedelta(hours=30, minutes=20), now - timedelta(minutes=5)
    cur, opts = wh.reader(), Options()
    parts = qe._parts(cur, start, end, None, opts.idle_util_pct)
    assert len(parts) >= 2 and len({p.path for p in parts}) >= 2, parts

    def frames(wrap=None):  # the former _run_frames: one statement per part
        out = []
        for p in parts:
            sql = qe._run_sql(p.path)
            if wrap is not None:
                sql = fill(wrap, runs=sql)
            out.append(cur.execute(*usage.bind(
                sql, start=p.start, end=p.end, node_w=opts.node_overhead_w,
                idle_pct=float(opts.idle_util_pct), runs=None, **qe._NO_SCOPE,
                **qe._carbon_params(opts, qe._WIDTH[p.path]))).df())
        return out

    cols = qe._RUN_COLS
    runs = qe.run_energy(cur, start=start, end=end)
    per_part = frames()
    before = usage.combine(per_part, ["job_id", "run_index"], cols)
    key = ["job_id", "run_index"]
    seen = pd.concat(per_part)[key].value_counts()
    assert len(runs) >= 5 and (seen > 1).any(), seen  # runs summed across parts
    pd.testing.assert_frame_equal(
        runs[key + cols].sort_values(key, ignore_index=True),
        before.sort_values(key, ignore_index=True), check_dtype=False, rtol=1e-12)
    users = qe.job_energy(cur, start=start, end=end, by="user_name")
    former = usage.combine(frames(fill(_BY_JOB_BEFORE, keys="j.user_name")), ["user_name"],
                           cols).fillna({c: 0.0 for c in cols})
    pd.testing.assert_frame_equal(
        users[["user_name"] + cols].sort_values("user_name", ignore_index=True),
        former.sort_values("user_name", ignore_index=True), check_dtype=False, rtol=1e-12)


def test_the_failures_energy_per_category_is_the_sum_of_the_runs(seeded):
    """failure_carbon(by="category"): the per-failure figures summed per category (a
    category whose runs have no energy sums to 0), on the table and the live paths."""
    wh, now = seeded
    for hours, resolution in ((30, None), (30.25, "minute"), (30, "hour")):
        window = {"start": now - timedelta(hours=hours), "end": now - timedelta(minutes=5),
                  "resolution": resolution}
        per_run = qe.failure_carbon(wh.reader(), **window)
        by_cat = qe.failure_carbon(wh.reader(), by="category", **window)
        assert per_run["category"].nunique() >= 2
        want = per_run.groupby("category", dropna=False)[
            ["gpu_hours_lost", "lost_kwh", "lost_carbon_kg"]].sum().reset_index()
        pd.testing.assert_frame_equal(by_cat.sort_values("category", ignore_index=True),
                                      want.sort_values("category", ignore_index=True),
                                      check_dtype=False, rtol=1e-12)
    with pytest.raises(ValueError, match="by must be one of"):
        qe.failure_carbon(wh.reader(), start=now, end=now, by="rack")
    empty = qe.failure_carbon(wh.reader(), start=now + timedelta(days=1),
                              end=now + timedelta(days=2), by="category")
    assert empty.empty and list(empty.columns) == ["category", "gpu_hours_lost", "lost_kwh",
                                                   "lost_carbon_kg"]


def test_a_failure_without_energy_is_priced_at_the_fleets_figure_as_in_the_report(wh):
    """A failure whose run left no GPU usage (no telemetry on its node) is priced at the
    fleet's facility kWh and kg CO2e per reporting GPU-hour, on the Energy page as in the
    weekly report (issue 17: the page counted it as 0); without the fleet's figures
    (``fleet=(None, None)``) its own are NaN and its category sums to 0, not NaN; with
    no telemetry anywhere the fleet's figure is 0."""
    from tests.support.runs import H as HOUR
    from tests.support.runs import T as T0
    from tests.support.runs import add_job, ingest, run_refresh, samples
    from warehouse.queries import weekly

    add_job(wh, "F", [{"start": T0, "end": T0 + 2 * HOUR, "state": "FAILED",
                       "nodes": ["n0"], "reason": "KeyError: 'x'"}])
    run_refresh(wh, T0 + 3 * HOUR)
    window = {"start": T0, "end": T0 + 3 * HOUR}
    assert qe.failure_carbon(wh.reader(), **window)["lost_kwh"].tolist() == [0.0]
    ingest(wh, samples("n1", 0, T0, 3 * 240, 300.0))  # telemetry elsewhere in the fleet
    run_refresh(wh, T0 + 3 * HOUR)
    unpriced = qe.failure_carbon(wh.reader(), fleet=(None, None), **window)
    assert len(unpriced) == 1 and unpriced["lost_kwh"].isna().all()
    none = qe.failure_carbon(wh.reader(), by="category", fleet=(None, None), **window)
    assert none["lost_kwh"].tolist() == [0.0] and none["lost_carbon_kg"].tolist() == [0.0]
    kwh, kg = qe.fleet_per_gpu_hour(wh.reader(), **window)
    assert kwh > 0.3 * qe.Options().pue  # the 300-W GPU's kWh an hour, and its node's rest
    per_run = qe.failure_carbon(wh.reader(), **window)
    lost = per_run["gpu_hours_lost"].iloc[0]
    assert per_run["lost_kwh"].iloc[0] == pytest.approx(lost * kwh) and lost > 0
    assert per_run["lost_carbon_kg"].iloc[0] == pytest.approx(lost * kg) and kg > 0
    by_cat = qe.failure_carbon(wh.reader(), by="category", **window)
    report = weekly.week_numbers(wh.reader, now=T0 + 3 * HOUR, **window)["energy"]
    assert by_cat["lost_kwh"].sum() == pytest.approx(report["lost_kwh"], rel=1e-9)
    assert by_cat["lost_carbon_kg"].sum() == pytest.approx(report["lost_carbon_kg"],
                                                           rel=1e-9)


def _summed_before(runs: pd.DataFrame, jobs: pd.DataFrame, by: str, limit) -> pd.DataFrame:
    """The weekly report's tops and carbon of goodput before issue 17's twenty-first
    round: the runs grouped per job in pandas, named from ``jobs``, grouped per user."""
    cols = ["gpu_hours", "facility_kwh", "carbon_kg"]
    per_job = runs.groupby("job_id")[cols].sum().reset_index()
    per_job = per_job.merge(jobs, on="job_id", how="left")
    if by == "user_name":
        per_job = per_job.groupby("user_name", dropna=False)[cols].sum().reset_index()
    out = per_job.sort_values(["facility_kwh", by], ascending=[False, True], kind="stable",
                              na_position="last")
    return out.head(limit) if limit is not None else out


_ENERGY = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.0, 0.1, 0.2, 1e4]))  # ties


@given(runs=st.lists(st.tuples(st.sampled_from(["j1", "j2", "j3", "j10", "gone"]),
                               _ENERGY, _ENERGY, _ENERGY), max_size=12),
       users=st.lists(st.sampled_from(["ana", "bo", None]), min_size=4, max_size=4),
       by=st.sampled_from(["job_id", "user_name"]),
       limit=st.sampled_from([None, 1, 2, 10]))
def test_runs_summed_per_job_or_user_as_pandas_summed_them(runs, users, by, limit):
    """qe.sum_runs (issue 17: summed and named in DuckDB, not in pandas) gives the jobs'
    and users' sums, names and order the pandas version gave: unknown energy adds 0, a
    run whose job is not in ``jobs`` keeps its id with no name or user, users without a
    name come last among equals, and ``limit`` keeps the first rows."""
    con = duckdb.connect()
    jobs = pd.DataFrame({"job_id": ["j1", "j2", "j3", "j10"], "name": ["a", "b", "c", "d"],
                         "user_name": users, "partition": "p", "job_type": "t", "gpus": 8})
    con.execute("CREATE TABLE jobs AS SELECT * FROM jobs")
    frame = pd.DataFrame(runs, columns=["job_id", "gpu_hours", "facility_kwh", "carbon_kg"],
                         dtype=object)
    frame = frame.astype({c: float for c in frame.columns[1:]}).astype({"job_id": str})
    got = qe.sum_runs(con, frame, by=by, limit=limit)
    every = _summed_before(frame, jobs, by, None)

    def ranked(df):  # equal totals summed in another order differ in their last bits:
        # most kWh to 1e-6 first, then the key, users without a name last
        return sorted(((-round(float(v), 6), pd.isna(k), "" if pd.isna(k) else k)
                       for k, v in zip(df[by], df["facility_kwh"], strict=True)))

    assert [r[1:] for r in ranked(got)] == [r[1:] for r in ranked(every)][:limit]
    assert ranked(got) == [(-round(float(v), 6), pd.isna(k), "" if pd.isna(k) else k)
                           for k, v in zip(got[by], got["facility_kwh"], strict=True)]
    want = every.set_index(every[by].fillna("\0none"))
    for row in got.itertuples():
        key = getattr(row, by)
        expected = want.loc["\0none" if pd.isna(key) else key]
        for col in ("gpu_hours", "facility_kwh", "carbon_kg"):
            assert getattr(row, col) == pytest.approx(expected[col], rel=1e-12)
    if by == "job_id" and len(got):
        named = got.set_index("job_id")
        assert named["name"].isna().tolist() == [j == "gone" for j in named.index]


def test_runs_summed_by_an_unknown_key_is_an_error():
    with pytest.raises(ValueError, match="by must be one of"):
        qe.sum_runs(duckdb.connect(), pd.DataFrame(), by="rack")
