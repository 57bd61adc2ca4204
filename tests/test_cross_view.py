"""One figure, one definition, every view (issues 14 and 19).

The weekly report's model is built for the report test warehouse (tests/support/
report.py) and each shared figure is compared with what the pages' callbacks ask for the
same window: the Overview card, Failures, Goodput, Energy (idle energy, per-job energy),
the Job page, Utilisation and /metrics. Then each goodput setting is changed and every
view of GPU-hours lost must move together.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.support.dash_seed import NOW as OVERVIEW_NOW
from tests.support.dash_seed import seed_overview
from tests.support.report import NOW
from warehouse import Warehouse, metrics
from warehouse.analytics import Options, refresh
from warehouse.queries import energy as qe
from warehouse.queries import failures as qf
from warehouse.queries import goodput as qg
from warehouse.queries import jobs as qj
from warehouse.queries import overview as qo
from warehouse.queries import utilisation as qu
from warehouse.queries import weekly


@pytest.fixture(scope="module")
def wh(report_wh):
    return report_wh


def test_every_shared_figure_agrees(wh, report):
    start, end, opts = report.start, report.end, Options(large_job_gpus=16)
    this = report.this
    # GPU-hours lost: the Overview card (week since Monday = the report week), Failures
    head = qo.headline(wh.reader(), now=NOW, week_start=start)
    by_cat = qf.failures_by(wh.reader(), start=start, end=end, by="category")
    lost = this["reliability"]["gpu_hours_lost"]
    assert lost > 0
    assert head["gpu_hours_lost_week"] == pytest.approx(lost)
    assert by_cat["gpu_hours_lost"].sum() == pytest.approx(lost)
    assert head["failed_runs_week"] == this["reliability"]["failures"]
    # failure rate: the Goodput page's cards for the same window
    rate = qf.failure_rate(wh.reader(), start=start, end=end)
    assert this["reliability"]["r_f_per_1000_node_days"] == pytest.approx(
        rate["r_f_per_1000_node_days"])
    # idle energy and allocated-but-idle: the Energy page's idle split
    idle = qe.idle_energy(wh.reader(), start=start, end=end).set_index("state")
    assert this["energy"]["idle_kwh"] == pytest.approx(
        idle.loc[["unallocated", "allocated_idle"], "gpu_kwh"].sum())
    assert this["fleet"]["idle_allocated_gpu_h"] == pytest.approx(
        idle.loc["allocated_idle", "gpu_hours"])
    # per-job energy: the Energy page's by-job table, and the Job page of a job that
    # ran inside the window
    by_job = qe.job_energy(wh.reader(), start=start, end=end, opts=opts).set_index("job_id")
    for row in this["energy"]["top_jobs"].itertuples():
        assert row.facility_kwh == pytest.approx(by_job.loc[row.job_id, "facility_kwh"])
    inside = wh.reader().execute(
        "SELECT job_id FROM job_runs GROUP BY job_id HAVING min(start_ts) >= $s "
        "AND max(coalesce(end_ts, $e)) < $e ORDER BY job_id LIMIT 3", {"s": start, "e": end}
    ).fetchall()
    assert inside and all(job_id in by_job.index for (job_id,) in inside)
    for (job_id,) in inside:
        page = qj.energy(wh.reader(), job_id=job_id, now=NOW, opts=opts)
        for col in ("gpu_kwh", "facility_kwh", "carbon_kg"):  # carbon priced per hour on
            # both (issue 17: the Job page priced a partial first hour per minute)
            assert page[col].sum() == pytest.approx(by_job.loc[job_id, col]), (job_id, col)
    # allocated GPU-hours: the Utilisation page's breakdown
    util = qu.utilisation_by(wh.reader(), by="partition", start=start, end=end)
    assert this["fleet"]["allocated_gpu_h"] == pytest.approx(
        util["allocated_gpu_h"].sum(), rel=0.01)
    # ETTR of large jobs: the Goodput page's definition
    large = qg.large_jobs(wh.reader(), start=start, end=end, now=NOW, opts=opts)
    assert this["reliability"]["large_jobs"] == len(large) > 0
    assert this["reliability"]["large_ettr"] == pytest.approx(qg.ettr_summary(large)["ettr"])


def test_energy_of_failures_prices_runs_as_the_job_page(wh, report):
    """A failed run's lost kWh and carbon per GPU-hour lost are its energy and carbon per
    GPU-hour as its Job page counts them (whole hours, priced as the Energy page prices
    them; issue 17: the first partial hour of the window's earliest run was computed and
    priced per minute). The earliest runs are those it changed."""
    start, end, opts = report.start, report.end, Options(large_job_gpus=16)
    lost = qe.failure_carbon(wh.reader(), start=start, end=end, opts=opts).set_index(
        ["job_id", "run_index"])
    earliest = wh.reader().execute(
        "SELECT job_id, run_index FROM failures WHERE end_ts >= $s AND end_ts < $e"
        " ORDER BY start_ts LIMIT 3", {"s": start, "e": end}).fetchall()
    assert len(earliest) == 3
    for job_id, run_index in earliest:
        page = qj.energy(wh.reader(), job_id=job_id, now=NOW, opts=opts).set_index(
            "run_index").loc[run_index]
        row = lost.loc[(job_id, run_index)]
        assert page["gpu_hours"] > 0
        for col, shown in (("lost_kwh", "facility_kwh"), ("lost_carbon_kg", "carbon_kg")):
            assert row[col] == pytest.approx(
                row["gpu_hours_lost"] * page[shown] / page["gpu_hours"], rel=1e-9), (
                job_id, run_index, col)


def test_energy_of_failures_is_the_reports_on_the_energy_page(wh, report):
    """The Energy page's energy and carbon of failures are the weekly report's (a run
    without energy of its own is priced at the fleet's figures per GPU-hour in both:
    tests/test_energy_answers.py, issue 17)."""
    start, end, opts = report.start, report.end, Options(large_job_gpus=16)
    page = qe.failure_carbon(wh.reader(), start=start, end=end, opts=opts, by="category")
    energy = report.this["energy"]
    assert energy["lost_kwh"] > 0
    assert page["lost_kwh"].sum() == pytest.approx(energy["lost_kwh"], rel=1e-9)
    assert page["lost_carbon_kg"].sum() == pytest.approx(energy["lost_carbon_kg"], rel=1e-9)


def _views(w: Warehouse, now: datetime, week_start: datetime) -> dict[str, float]:
    """GPU-hours lost this week as each view shows it."""
    nums = weekly.week_numbers(w.reader, start=week_start, end=now, now=now)
    return {
        "overview": qo.headline(w.reader(), now=now, week_start=week_start)[
            "gpu_hours_lost_week"],
        "failures": float(qf.failures(w.reader(), start=week_start, end=now)[
            "gpu_hours_lost"].sum()),
        "goodput": float(qg.lost_by(w.reader(), start=week_start, end=now, by="week")[
            "gpu_hours_lost"].sum()),
        "report": nums["reliability"]["gpu_hours_lost"],
    }


@pytest.mark.parametrize("setting", [{"checkpoint_interval_h": 0.5},
                                     {"restart_warmup_min": 30.0}])
def test_every_view_moves_with_each_goodput_setting(setting):
    week_start = qo.iso_week_start(OVERVIEW_NOW)
    with Warehouse(":memory:") as w:
        seed_overview(w)  # classified with the defaults
        before = _views(w, OVERVIEW_NOW, week_start)
        assert len(set(before.values())) == 1, before
        w.write(lambda con: refresh(con, OVERVIEW_NOW, Options(**setting))).result()
        after = _views(w, OVERVIEW_NOW, week_start)
        assert len({round(v, 9) for v in after.values()}) == 1, after
        assert after["overview"] != pytest.approx(before["overview"])
        snap = metrics.figures(w.reader, now=OVERVIEW_NOW)
        window = qf.failures_by(w.reader(), end=OVERVIEW_NOW,
                                start=OVERVIEW_NOW - timedelta(days=metrics.WINDOW_DAYS))
        assert sum(snap.lost_gpu_hours.values()) == pytest.approx(
            window["gpu_hours_lost"].sum())
