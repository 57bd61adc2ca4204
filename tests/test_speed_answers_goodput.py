"""Issue 17 (speed): the Goodput and Failures pages' faster queries give the answers the
former ones gave.

Each rewrite is checked against the SQL it replaced, kept here as the reference, on the
seeded cluster and on random jobs, runs and allocations.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS
from tests.support.figures import assert_same_figure

T0 = datetime(2026, 11, 9)
H = timedelta(hours=1)

#: warehouse/queries/failures.py's exposure before issue 17's second pass: the runs'
#: allocations probed against the runs in range first, every run joined to its job.
_EXPOSURE_BEFORE = """
WITH r AS (
    SELECT r.job_id, r.run_index,
           greatest(r.start_ts, $start) AS s, least(coalesce(r.end_ts, $end), $end) AS e,
           j.nodes, coalesce(r.gpus, j.gpus, 0) AS gpus
    FROM job_runs r LEFT JOIN jobs j USING (job_id)
    WHERE r.start_ts < $end AND coalesce(r.end_ts, $end) > $start
),
an AS (
    SELECT a.job_id, a.run_index, count(DISTINCT a.node) AS alloc_nodes
    FROM allocations a SEMI JOIN r USING (job_id, run_index)
    GROUP BY ALL
)
SELECT coalesce(sum(greatest(0, epoch_us(e) - epoch_us(s)) / 8.64e10
                    * coalesce(nullif(an.alloc_nodes, 0), r.nodes,
                               ceil(r.gpus / $gpus_per_node))), 0) AS node_days
FROM r LEFT JOIN an USING (job_id, run_index)
"""


def _exposures(cur, start: datetime, end: datetime, gpus_per_node: int) -> tuple[float, float]:
    """(the former exposure, today's), node-days."""
    from warehouse.queries import failures as fq

    p = {"start": start, "end": end, "gpus_per_node": gpus_per_node}
    return (float(cur.execute(_EXPOSURE_BEFORE, p).fetchone()[0]),
            float(cur.execute(fq._EXPOSURE_SQL, p).fetchone()[0]))


@pytest.mark.parametrize("hours", [1, 7.25, 24, 48, 24 * 30])
def test_exposure_on_the_seeded_cluster_as_before(seeded_usage, hours):
    """The seeded cluster's node-days behind r_f, over windows from an hour to the
    30-day rate window: the former query's."""
    from warehouse.queries import fleet

    wh, now = seeded_usage
    cur = wh.reader()
    before, got = _exposures(cur, now - timedelta(hours=hours), now, fleet.gpus_per_node(cur))
    assert before > 0
    assert got == pytest.approx(before, rel=1e-12)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5, max_value=30),
                        st.integers(min_value=1, max_value=40)),
       gpus_per_node=st.sampled_from([1, 4, 8]))
def test_exposure_on_random_runs_as_before(empty_wh, seed, window, gpus_per_node):
    """Random jobs (node and GPU counts named, zero or missing; some runs' jobs absent),
    runs (open, crossing the window's ends, outside it) and allocations (none, one node,
    several nodes and GPUs, allocations of runs that are not stored): the node-days of
    the former query."""
    rng = np.random.default_rng(seed)
    maybe = [None, None, 0, 1, 2, 8, 12]
    jobs, runs, allocs = [], [], []
    for k in range(int(rng.integers(1, 25))):
        t = T0 + int(rng.integers(-10, 30)) * H + timedelta(minutes=int(rng.integers(0, 60)))
        if rng.random() < 0.9:  # else the job's row is missing
            jobs.append({"job_id": f"j{k}", "submit_ts": t, "gpus": rng.choice(maybe),
                         "nodes": rng.choice(maybe)})
        for r in range(int(rng.integers(1, 4))):
            end = None if rng.random() < 0.15 else t + timedelta(
                minutes=int(rng.integers(0, 600)))
            if rng.random() < 0.9:  # else only its allocations are stored
                runs.append({"job_id": f"j{k}", "run_index": r, "start_ts": t,
                             "end_ts": end, "state": "COMPLETED", "gpus": rng.choice(maybe)})
            for n in rng.choice(4, size=int(rng.integers(0, 4)), replace=False):
                for g in range(int(rng.integers(1, 4))):
                    allocs.append({"job_id": f"j{k}", "run_index": r, "node": f"n{n}",
                                   "gpu_index": g, "start_ts": t, "end_ts": end})
            t = (end or t) + int(rng.integers(0, 3)) * H
    w = empty_wh
    try:
        if jobs:
            w.ingest("jobs", pd.DataFrame(jobs).astype({"gpus": "Int32", "nodes": "Int32"})
                     ).result()
        if runs:
            w.ingest("runs", pd.DataFrame(runs).astype({"gpus": "Int32"})).result()
        if allocs:
            w.ingest("allocations", pd.DataFrame(allocs)).result()
        start = T0 + window[0] * H
        before, got = _exposures(w.reader(), start, start + window[1] * H, gpus_per_node)
        assert got == pytest.approx(before, rel=1e-12, abs=1e-12)
    finally:
        w.write(lambda con: con.execute(
            CLEAR_ALLOCATIONS + "; DELETE FROM job_runs; DELETE FROM jobs")).result()


#: warehouse/goodput.py's failed runs before issue 17's second pass: every run joined to
#: its job, then filtered (ETTR's job filter came after the join).
_FAILED0_BEFORE = """failed0 AS (
    SELECT r.job_id, r.run_index, r.start_ts, r.end_ts, r.state, r.exit_code, r.signal,
           r.reason, r.failed_node, coalesce(r.gpus, j.gpus) AS known_gpus,
           greatest(0, {run_h}) AS run_h
    FROM job_runs r LEFT JOIN jobs j USING (job_id), history h
    WHERE r.end_ts IS NOT NULL AND {failed_run} AND {where}
      AND (h.start_ts IS NULL OR r.end_ts > h.start_ts)
),
counted AS ("""


def _before(sql: str, where: str) -> str:
    """``sql`` (holding loss_sql(``where``)) with the former failed runs."""
    from warehouse import goodput
    from warehouse.db import fill

    head, rest = sql.split("failed0 AS (", 1)
    tail = rest.split("\n),\ncounted AS (", 1)[1]
    return head + fill(_FAILED0_BEFORE, failed_run=goodput.FAILED_RUN, where=where,
                       run_h=goodput._h("greatest(coalesce(r.start_ts, r.end_ts), h.start_ts)",
                                        "r.end_ts")) + tail


def _assert_ettr_and_losses_as_before(cur, *, start, end, now, min_gpus):
    """ETTR per job and the failed runs' losses (by end range and as the refresh picks
    them): the former SQL's rows."""
    from warehouse import goodput

    p = goodput.loss_params(now=now, interval_h=3.0, warmup_h=0.25, start=start, end=end)
    pe = {**p, "min_gpus": min_gpus, "job_type": None}
    pr = goodput.loss_params(now=now, interval_h=3.0, warmup_h=0.25,
                             recheck_from=now - 24 * H)
    cases = [(goodput.ETTR_SQL, goodput.BY_JOBS, pe, "job_id"),
             (goodput.loss_sql(goodput.BY_END_RANGE), goodput.BY_END_RANGE, p,
              ["job_id", "run_index"]),
             (goodput.loss_sql(goodput.BY_RECHECK), goodput.BY_RECHECK, pr,
              ["job_id", "run_index"])]
    for sql, where, params, key in cases:
        want = cur.execute(_before(sql, where), params).df().sort_values(key, ignore_index=True)
        got = cur.execute(sql, params).df().sort_values(key, ignore_index=True)
        pd.testing.assert_frame_equal(got, want, rtol=1e-12)


@pytest.mark.parametrize("hours,min_gpus", [(24, 0), (24, 16), (48, 0), (7.25, 8)])
def test_ettr_on_the_seeded_cluster_as_before(seeded_usage, hours, min_gpus):
    """The seeded cluster's ETTR per job and failed runs' losses: the former SQL's."""
    from warehouse import goodput

    wh, now = seeded_usage
    cur = wh.reader()
    p = goodput.loss_params(now=now, interval_h=3.0, warmup_h=0.25,
                            start=now - timedelta(hours=hours), end=now, min_gpus=min_gpus,
                            job_type=None)
    assert (cur.execute(goodput.ETTR_SQL, p).df()["failures"] > 0).any()
    _assert_ettr_and_losses_as_before(cur, start=now - timedelta(hours=hours), end=now,
                                      now=now, min_gpus=min_gpus)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5, max_value=30),
                        st.integers(min_value=1, max_value=40)),
       min_gpus=st.sampled_from([0, 4, 16]),
       history=st.one_of(st.none(), st.integers(min_value=-5, max_value=20)))
def test_ettr_on_random_jobs_as_before(empty_wh, seed, window, min_gpus, history):
    """Random jobs (GPUs named or not, some rows missing), runs (failed, requeued,
    completed with and without an exit code, running, some before the window, the
    history or after now) and checkpoints: ETTR and the losses are the former SQL's."""
    rng = np.random.default_rng(seed)
    maybe = [None, None, 0, 4, 8, 16]
    states = ["FAILED", "NODE_FAIL", "REQUEUED", "COMPLETED", "TIMEOUT", "CANCELLED", None]
    jobs, runs, ckpts = [], [], []
    for k in range(int(rng.integers(1, 25))):
        t = T0 + int(rng.integers(-10, 35)) * H + timedelta(minutes=int(rng.integers(0, 60)))
        if rng.random() < 0.9:
            jobs.append({"job_id": f"j{k}", "submit_ts": t - timedelta(
                minutes=int(rng.integers(0, 90))), "gpus": rng.choice(maybe),
                "end_ts": None if rng.random() < 0.2 else t + 20 * H})
        for r in range(int(rng.integers(1, 4))):
            end = None if rng.random() < 0.15 else t + timedelta(
                minutes=int(rng.integers(1, 600)))
            runs.append({"job_id": f"j{k}", "run_index": r, "start_ts": t, "end_ts": end,
                         "state": rng.choice(states), "exit_code": int(rng.integers(0, 2)),
                         "signal": int(rng.choice([0, 0, 9])), "gpus": rng.choice(maybe)})
            if end is not None and rng.random() < 0.4:
                ckpts.append({"ts": t + (end - t) / 2, "job_id": f"j{k}",
                              "run_index": r if rng.random() < 0.7 else None})
            t = (end or t) + int(rng.integers(0, 3)) * H
    w = empty_wh
    try:
        if jobs:
            w.ingest("jobs", pd.DataFrame(jobs).astype({"gpus": "Int32"})).result()
        w.ingest("runs", pd.DataFrame(runs).astype({"gpus": "Int32", "signal": "Int32"})
                 ).result()
        if ckpts:
            w.ingest("checkpoints", pd.DataFrame(ckpts).astype({"run_index": "Int32"})
                     ).result()
        if history is not None:  # the first telemetry: runs before it are cut
            w.write(lambda con: con.execute(
                "INSERT INTO gpu_samples_1h (ts, node, gpu_index) VALUES ($ts, 'n0', 0)",
                {"ts": T0 + history * H})).result()
        start = T0 + window[0] * H
        _assert_ettr_and_losses_as_before(w.reader(), start=start, end=start + window[1] * H,
                                          now=T0 + 30 * H, min_gpus=min_gpus)
    finally:
        w.write(lambda con: con.execute(
            "DELETE FROM checkpoints; DELETE FROM job_runs; DELETE FROM jobs; "
            "DELETE FROM gpu_samples_1h")).result()


def _breakdowns_before(df) -> dict:
    """The Failures page's breakdowns as dashboard/figures/failures.py summed them before
    issue 17's eleventh round: from every failed run's row, in pandas."""
    days = pd.to_datetime(df["end_ts"]).dt.floor("D")

    def per_day(rows):
        d = pd.DataFrame({"row": df[rows].fillna("(unknown)"), "day": days})
        return d.groupby(["row", "day"]).size().rename("failures").reset_index()

    x = df[["job_id", "xids"]].explode("xids").dropna()
    return {"rack_day": per_day("rack"), "category_day": per_day("category"),
            "reasons": (df.groupby(["category", "reason"], dropna=False)
                        .agg(failures=("job_id", "count"),
                             gpu_hours_lost=("gpu_hours_lost", "sum")).reset_index()),
            "xids": x.groupby("xids")["job_id"].count().rename("failures")
                     .rename_axis("xid").reset_index(),
            "runs": len(df)}


def _figures(b) -> list:
    from dashboard.figures import failures as ff

    return [ff.failures_heatmap(b["rack_day"], rows="rack", period="D"),
            ff.failures_heatmap(b["category_day"], rows="category", period="W"),
            ff.failure_reasons(b["reasons"]), ff.xid_counts(b["xids"])]


def _assert_breakdowns_as_from_every_row(cur, *, start, end):
    """The Failures page's breakdowns summed in SQL draw the figures every failed run's
    row drew, per categories chosen, partition and rack (the page's scope)."""
    from warehouse.queries import failures as fq

    every = fq.failures(cur, start=start, end=end, evidence=False)
    racks = [r for r in every["rack"].dropna().unique()][:1]
    parts = [p for p in every["partition"].dropna().unique()][:1]
    scopes = [(None, None, None), (["infrastructure"], None, None),
              (["framework", "script"], None, None), ([], None, None),
              *((None, p, None) for p in parts), *((None, None, r) for r in racks),
              *((["infrastructure", "framework"], p, r) for p in parts for r in racks)]
    for cats, part, rack in scopes:
        rows = every
        if cats is not None:
            rows = rows[rows["category"].isin(cats)]
        if part:
            rows = rows[rows["partition"] == part]
        if rack:
            rows = rows[rows["rack"] == rack]
        b = fq.breakdowns(cur, start=start, end=end, categories=cats, partition=part,
                          rack=rack)
        before = _breakdowns_before(rows)
        assert b["runs"] == before["runs"]
        for g, want in zip(_figures(b), _figures(before), strict=True):
            assert_same_figure(g, want)
    one = fq.breakdowns(cur, start=start, end=end, categories="infrastructure")
    assert one["runs"] == int((every["category"] == "infrastructure").sum())


@pytest.mark.parametrize("hours", [24, 48, 24 * 30])
def test_failure_breakdowns_on_the_seeded_cluster_as_before(seeded_usage, hours):
    """The seeded cluster's failed runs: the brief query and the figures built on it."""
    wh, now = seeded_usage
    cur = wh.reader()
    start = now - timedelta(hours=hours)
    assert len(cur.execute("SELECT 1 FROM failures WHERE end_ts >= $s AND end_ts < $e",
                           {"s": start, "e": now}).fetchall()) > 0
    _assert_breakdowns_as_from_every_row(cur, start=start, end=now)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5, max_value=200),
                        st.integers(min_value=1, max_value=400)))
def test_failure_breakdowns_on_random_failures_as_before(empty_wh, seed, window):
    """Random classified failures (racks, XIDs and losses missing or not, equal end times
    and losses, over weeks): the breakdowns summed in SQL draw the figures the rows
    drew, in every scope."""
    rng = np.random.default_rng(seed)
    cats = ["infrastructure", "framework", "script", "unknown"]
    rows = [{"job_id": f"j{int(rng.integers(0, 40))}", "run_index": k,
             "end_ts": T0 + int(rng.integers(0, 300)) * H,
             "category": rng.choice(cats), "reason": rng.choice(["XID 79", "oom", "exit 1"]),
             "rack": rng.choice(["r0", "r1", None]), "partition": rng.choice(["a", "b"]),
             "source": "state",  # losses tied between reasons, or unknown, too
             "gpu_hours_lost": float(rng.random() * 100) if rng.random() < 0.5 else
             float(rng.integers(0, 3)) if rng.random() < 0.8 else None,
             "xids": [int(x) for x in rng.choice([13, 48, 79], size=int(rng.integers(0, 3)))]
             if rng.random() < 0.8 else None,
             "evidence": "{}"}
            for k in range(int(rng.integers(0, 40)))]
    w = empty_wh
    try:
        if rows:
            frame = pd.DataFrame(rows)

            def put(con):
                con.register("random_failures", frame)
                con.execute("INSERT INTO failures BY NAME SELECT * FROM random_failures")
                con.unregister("random_failures")
            w.write(put).result()
        start = T0 + window[0] * H
        _assert_breakdowns_as_from_every_row(w.reader(), start=start,
                                             end=start + window[1] * H)
    finally:
        w.write(lambda con: con.execute("DELETE FROM failures")).result()


def _mttf_projection_before(rate):
    """dashboard/figures/goodput.py's MTTF chart before issue 17's second pass: its
    layout set by update_layout."""
    from dashboard.figures import goodput as fg
    from dashboard.figures.base import chart_layout, empty_figure, figure

    if not fg.rate_known(rate):
        return empty_figure(fg.NO_RATE)
    fig = figure(fg.mttf_bars(rate))
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="mttf"), **fg.MTTF_AXES)
    return fig


def _same_figure(got, want) -> bool:
    """The figures' JSON is the same (keys in any order: plotly.js reads no order)."""
    return json.loads(got.to_json()) == json.loads(want.to_json())


@pytest.mark.parametrize("hours", [24, 48, 24 * 30])
def test_mttf_chart_on_the_seeded_cluster_as_before(seeded_usage, hours):
    """The seeded cluster's MTTF chart: the former builder's figure."""
    from dashboard.figures import goodput as fg
    from warehouse.queries import failures as fq

    wh, now = seeded_usage
    rate = fq.failure_rate(wh.reader(), start=now - timedelta(hours=hours), end=now)
    assert _same_figure(fg.mttf_projection(rate), _mttf_projection_before(rate))


_POSITIVE = st.floats(min_value=1e-3, max_value=1e9, allow_nan=False)


@given(failures=st.integers(min_value=0, max_value=50),
       r_f=st.one_of(_POSITIVE, st.just(float("nan"))),
       sizes=st.lists(st.tuples(st.integers(min_value=1, max_value=200_000), _POSITIVE,
                                _POSITIVE, _POSITIVE), min_size=1, max_size=8))
def test_mttf_chart_on_random_rates_as_before(failures, r_f, sizes):
    """Any rate (none, NaN, any MTTFs and bounds, bounds on either side): the former
    builder's figure."""
    from dashboard.figures import goodput as fg

    mttf = pd.DataFrame(sizes, columns=["gpus", "mttf_h", "mttf_h_low", "mttf_h_high"])
    rate = {"failures": failures, "r_f_per_1000_node_days": r_f, "mttf": mttf}
    assert _same_figure(fg.mttf_projection(rate), _mttf_projection_before(rate))


def _ettr_curve_before(df):
    """dashboard/figures/goodput.py's advisor curve before issue 17's second pass: the
    time-series line chart's figure, traces added and its layout updated after."""
    import plotly.graph_objects as go

    from dashboard.figures.base import PALETTE, empty_figure, lines

    if df is None or len(df) == 0:
        return empty_figure("Enter a job size and restart overhead.")
    fig = lines(df, "checkpoint_interval_h", [("expected_ettr", "Expected ETTR")],
                y_title="Expected ETTR", empty="", uirevision="advisor")
    if {"expected_ettr_low", "expected_ettr_high"} <= set(df.columns):
        x = list(df["checkpoint_interval_h"])
        fig.add_trace(go.Scatter(
            x=x + x[::-1],
            y=list(df["expected_ettr_high"]) + list(df["expected_ettr_low"])[::-1],
            fill="toself", fillcolor="rgba(0,114,178,0.15)", line={"width": 0},
            name="r_f's 95 % interval", hoverinfo="skip"))
    best = df[df["optimal"]]
    if len(best):
        fig.add_trace(go.Scatter(x=best["checkpoint_interval_h"], y=best["expected_ettr"],
                                 mode="markers", name="Optimum",
                                 marker={"size": 12, "color": PALETTE[5]}))
    fig.update_layout(xaxis={"title": {"text": "Checkpoint interval (hours)"}, "type": "log"},
                      hovermode="closest")
    return fig


def _advice_curve(wh, rate, gpus, restart_min, write_min):
    """The advisor's curve as the Goodput page builds it (dashboard/pages/goodput.py)."""
    import sys

    from dashboard.app import create_app

    if "dashboard.pages.goodput" not in sys.modules:  # pages register with an app
        create_app(wh)
    return sys.modules["dashboard.pages.goodput"].advice(rate, gpus, restart_min, write_min)[1]


@pytest.mark.parametrize("hours,gpus", [(24, 4096.0), (24 * 30, 16.0), (48, 1.0)])
def test_advisor_curve_on_the_seeded_cluster_as_before(seeded_usage, hours, gpus):
    """The advisor's curve (with its band and optimum) from the seeded cluster's rate:
    the former builder's figure."""
    from dashboard.figures import goodput as fg
    from warehouse.queries import failures as fq

    wh, now = seeded_usage
    rate = fq.failure_rate(wh.reader(), start=now - timedelta(hours=hours), end=now)
    curve = _advice_curve(wh, rate, gpus, 15.0, 2.0)
    assert curve is not None and curve["optimal"].any()
    assert _same_figure(fg.ettr_curve(curve), _ettr_curve_before(curve))


@given(rows=st.lists(st.tuples(_POSITIVE, st.floats(0, 1), st.floats(0, 1),
                               st.floats(0, 1), st.booleans()), max_size=40),
       band=st.booleans())
def test_advisor_curve_on_random_curves_as_before(rows, band):
    """Any curve (empty, without the band, optima anywhere or none): the former
    builder's figure."""
    from dashboard.figures import goodput as fg

    df = pd.DataFrame(rows, columns=["checkpoint_interval_h", "expected_ettr",
                                     "expected_ettr_low", "expected_ettr_high", "optimal"])
    if not band:
        df = df.drop(columns=["expected_ettr_low", "expected_ettr_high"])
    assert _same_figure(fg.ettr_curve(df), _ettr_curve_before(df))


def _lost_per_day_before(df):
    """GPU-hours lost per day and category as the Goodput chart summed them before issue
    17's eleventh round: every failed run's row, floored to its day in pandas."""
    d = df.assign(day=pd.to_datetime(df["end_ts"]).dt.floor("D"))
    return d.groupby(["day", "category"])["gpu_hours_lost"].sum().reset_index()


@pytest.mark.parametrize("hours", [24, 48, 24 * 30])
def test_lost_per_day_draws_the_chart_the_failed_runs_did(seeded_usage, hours):
    """GPU-hours lost per day and category are summed in SQL: the Goodput page's and the
    report's chart is the one every failed run's row gave, a run without its GPU-hours
    lost (NULL) and a day without failures included."""
    from dashboard.figures.goodput import lost_over_time
    from warehouse.queries import failures as fq
    from warehouse.queries import goodput as gq

    wh, now = seeded_usage
    cur = wh.reader()
    start = now - timedelta(hours=hours)
    rows = fq.failures(cur, start=start, end=now, evidence=False)
    assert len(rows) > 1
    got = gq.lost_per_day(cur, start=start, end=now)
    assert got["gpu_hours_lost"].sum() == pytest.approx(rows["gpu_hours_lost"].sum())
    assert_same_figure(lost_over_time(got), lost_over_time(_lost_per_day_before(rows)))
    # one run's loss unknown: it counts 0, its day and category stay
    one = {"j": rows["job_id"].iloc[0], "r": int(rows["run_index"].iloc[0])}
    was = float(rows["gpu_hours_lost"].iloc[0])
    wh.write(lambda con: con.execute("UPDATE failures SET gpu_hours_lost = NULL "
                                     "WHERE job_id = $j AND run_index = $r", one)).result()
    try:
        rows = fq.failures(cur, start=start, end=now, evidence=False)
        got = gq.lost_per_day(cur, start=start, end=now)
        assert_same_figure(lost_over_time(got), lost_over_time(_lost_per_day_before(rows)))
    finally:  # the fixture is shared: the value as it was
        wh.write(lambda con: con.execute(
            "UPDATE failures SET gpu_hours_lost = $v WHERE job_id = $j AND run_index = $r",
            {**one, "v": was})).result()
    empty = gq.lost_per_day(cur, start=now, end=now + H)
    assert lost_over_time(empty).to_json() == lost_over_time(_lost_per_day_before(
        fq.failures(cur, start=now, end=now + H, evidence=False))).to_json()
