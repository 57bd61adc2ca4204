"""The weekly report's numbers against the warehouse, its summary, and its HTML (#7).

A small simulated cluster (2 racks, 128 GPUs) from Sunday 2026-11-15 00:00 to Tuesday
2026-11-17 12:00: the report week 2026-W47 is in progress, 2026-W46 has its Sunday.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from dashboard.report import build, render_html
from tests.support.report import NOW, WEEK, report_config, seeded_copy
from warehouse import Warehouse, alerts_store, reliability
from warehouse.queries import energy as qe
from warehouse.queries import failures as qf
from warehouse.queries import utilisation as qu
from warehouse.queries import weekly


@pytest.fixture(scope="module")
def wh(report_wh):
    return report_wh


def test_weeks_are_iso_weeks_in_the_report_time_zone():
    assert weekly.week_range("2026-W47") == (datetime(2026, 11, 16), datetime(2026, 11, 23))
    # Monday 00:00 in Berlin (CET, UTC+1) is Sunday 23:00 UTC
    assert weekly.week_range("2026-W47", "Europe/Berlin")[0] == datetime(2026, 11, 15, 23)
    assert weekly.previous_week("2026-W01") == "2025-W52"
    assert weekly.last_complete_week(datetime(2026, 11, 23, 7)) == "2026-W47"
    with pytest.raises(ValueError, match="ISO week"):
        weekly.parse_week("2026-47")


def test_fleet_figures_match_the_warehouse(wh, report):
    f = report.this["fleet"]
    start, end = report.start, report.end
    assert f["gpus"] == 128 and end == NOW
    by_part = qu.utilisation_by(wh.reader(), by="partition", start=start, end=end)
    assert f["allocated_gpu_h"] == pytest.approx(by_part["allocated_gpu_h"].sum(), rel=0.01)
    # the report reads the 1-hour tier: a partly allocated GPU-hour counts the hour's mean
    # utilisation, idle minutes included, where the page counts the allocated minutes'
    # (warehouse/usage.py), so the report's figure is the lower one, here by 5.4 %
    exact = by_part["utilised_gpu_h"].sum()
    assert 0.9 * exact <= f["utilised_gpu_h"] <= exact * (1 + 1e-9)
    assert f["allocated_share_pct"] == pytest.approx(
        100 * f["scheduled_gpu_h"] / (128 * 36), rel=1e-9)
    assert f["util_of_allocated_pct"] == pytest.approx(
        100 * f["utilised_gpu_h"] / f["allocated_gpu_h"])
    idle = qe.idle_energy(wh.reader(), start=start, end=end).set_index("state")
    # the Energy page's function: one definition of idle (issue 19)
    assert f["idle_allocated_gpu_h"] == pytest.approx(idle.loc["allocated_idle", "gpu_hours"])
    assert f["unallocated_gpu_h"] == pytest.approx(idle.loc["unallocated", "gpu_hours"])


def test_reliability_figures_match_the_warehouse(wh, report):
    r = report.this["reliability"]
    fails = qf.failures(wh.reader(), start=report.start, end=report.end)
    assert r["failures"] == len(fails) > 0
    assert r["infra_failures"] == (fails["category"] == "infrastructure").sum() > 0
    assert r["gpu_hours_lost"] == pytest.approx(fails["gpu_hours_lost"].sum())
    assert r["by_category"]["failures"].sum() == len(fails)
    rate = r["r_f_per_1000_node_days"] / 1000
    assert r["mttf_1024_h"] == pytest.approx(reliability.mttf_hours(1024, rate, 8))
    assert r["mttf_4096_h"] == pytest.approx(r["mttf_1024_h"] / 4)
    assert r["large_jobs"] > 0 and 0 < r["large_ettr"] <= 1
    assert r["lemons"] >= 1 and r["nodes"].iloc[0]["lemon"]  # the simulator has a lemon
    assert report.prev["reliability"]["failures"] == len(
        qf.failures(wh.reader(), start=datetime(2026, 11, 9), end=datetime(2026, 11, 16)))


def test_the_failures_counted_are_the_failures_listed_and_not_kept(wh, report):
    """The report counts the week's failed runs from their categories' sums and prices
    them in SQL (issue 17: 184,000 runs at 24,576 GPUs read as a frame): the count
    ``failures()`` lists, and no frame with a row per failure is kept."""
    listed = qf.failures(wh.reader(), start=report.start, end=report.end)
    assert report.this["reliability"]["failures"] == len(listed) > 0
    for week in (report.this, report.prev):
        assert all(not isinstance(v, pd.DataFrame) or len(v) < len(listed)
                   for section in week.values() if isinstance(section, dict)
                   for v in section.values())  # small frames only, no row per failure


def test_energy_and_thermal_figures_match_the_warehouse(wh, report):
    e = report.this["energy"]
    fleet = qe.energy_by(wh.reader(), by="fleet", start=report.start, end=report.end).iloc[0]
    assert e["it_kwh"] == pytest.approx(fleet["it_kwh"])
    assert e["facility_kwh"] == pytest.approx(fleet["facility_kwh"])
    assert e["tco2e"] == pytest.approx(fleet["carbon_kg"] / 1000)
    jobs = qe.job_energy(wh.reader(), start=report.start, end=report.end)  # the Energy page
    top = e["top_jobs"].iloc[0]
    assert top["job_id"] == jobs.sort_values("facility_kwh").iloc[-1]["job_id"]
    assert top["facility_kwh"] == pytest.approx(jobs["facility_kwh"].max())
    assert len(e["top_users"]) == 5 and e["lost_kwh"] > 0 and e["lost_carbon_kg"] > 0
    t = report.this["thermal"]
    assert t["throttled_gpu_h"] > 0 and t["max_temp_c"] >= t["hottest_racks"]["p95_c"].max()


def test_alerts_fired_in_the_week_are_counted(tmp_path):
    with Warehouse(seeded_copy(tmp_path)) as w:
        fired = NOW - timedelta(hours=3)
        row = {"alert_id": "a1", "fingerprint": "rack_cooling:r01", "rule": "rack_cooling",
               "severity": "critical", "scope": "rack", "rack": "r01", "group_key": "g",
               "state": "resolved", "peak": 7.0, "unit": "C", "active_since": fired,
               "fired_at": fired, "resolved_at": NOW}
        w.write(lambda con: alerts_store.save_evaluation(
            con, alerts=[row], dropped=[], groups=[], outbox=[])).result()
        r = build(w.reader, week=WEEK, now=NOW)
        t = r.this["thermal"]
        assert (t["alerts_fired"], t["critical_alerts"]) == (1, 1)
        assert t["alert_racks"].iloc[0]["rack"] == "r01"
        assert "1 thermal alerts fired (1 critical)" in " ".join(r.summary)


def test_summary_states_the_reports_numbers(report):
    text = " ".join(report.summary)
    r, e = report.this["reliability"], report.this["energy"]
    assert report.summary[0].startswith("This week is still in progress")
    assert f"{r['failures']:,} runs failed ({r['infra_failures']:,} from infrastructure)" in text
    assert f"{e['facility_kwh']:,.0f} kWh at the facility" in text
    assert f"The fleet has 128 GPUs; {report.this['fleet']['allocated_share_pct']:.0f} %" in text
    assert "lemon candidate" in text


def external_resources(html: str) -> list[str]:
    """src/href attributes of elements that load something (script text is not parsed)."""
    from html.parser import HTMLParser

    found = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            for k, v in attrs:
                if k == "src" or (k == "href" and tag == "link"):
                    found.append(f"{tag} {k}={v}")

    P().feed(html)
    return found


def test_html_is_self_contained_with_every_section(report):
    html = render_html(report)
    for section in ("fleet", "reliability", "thermal", "energy", "summary"):
        assert f'id="{section}"' in html
    assert external_resources(html) == []
    assert html.count("Plotly.newPlot") == 5  # five charts, plotly.js inline once
    assert html.count("plotly.js v") <= 2  # the library's own banner, not a second copy
    mail = render_html(report, charts=False)
    assert "<script" not in mail and "attached PDF" in mail


def test_the_header_names_the_cluster(report):
    """Issue 18: several clusters' reports side by side say whose they are."""
    import re

    html = render_html(report, charts=False)
    assert re.search(r"<h1>gpulens weekly report \S+, cluster default</h1>", html)


def test_names_from_jobs_are_text_not_markup(report):
    original = report.this["energy"]["top_jobs"]
    jobs = original.copy()
    jobs.loc[0, "name"] = "<img src=x onerror=alert(1)>"
    report.this["energy"]["top_jobs"] = jobs
    try:
        html = render_html(report, charts=False)
    finally:
        report.this["energy"]["top_jobs"] = original
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_report_config_section_is_read(tmp_path):
    from dashboard.report.generate import options, sinks

    cfg = report_config(tmp_path, reports__timezone="Europe/Berlin",
                        reports__webhook_url="http://127.0.0.1:9/", cluster__name="rsc-1")
    assert options(cfg).timezone == "Europe/Berlin"
    assert options(cfg).cluster == "rsc-1"
    assert set(sinks(cfg)) == {"report_webhook"}  # no SMTP host: no e-mail sink


def test_a_thinly_covered_previous_week_is_not_compared(report):
    """W46 holds only its Sunday of telemetry (1/7 of its GPU-hours): no change against
    it, and the summary says why; the coverage of both weeks is stated (issue 19)."""
    prev_cov = report.prev["fleet"]["coverage_pct"]
    assert prev_cov < weekly.MIN_COMPARABLE_COVERAGE_PCT and not report.comparable
    changes = {row["change"] for rows in report.rows.values() for row in rows}
    assert changes == {"not compared"}
    text = " ".join(report.summary)
    assert f"covered {report.this['fleet']['coverage_pct']:.1f} %" in text
    assert f"The week before was covered {prev_cov:.1f} %, too little to compare" in text
    assert "up from" not in text and "down from" not in text and "as last week" not in text


def test_the_summarys_hottest_rack_heads_its_table(report):
    t = report.this["thermal"]
    first = t["hottest_racks"].iloc[0]
    assert first["p95_c"] == t["rack_temps"]["p95_c"].max()
    assert f"the hottest rack was {first['rack']}" in " ".join(report.summary)
