"""Pure pieces of the dashboard's views (issue 19): incidents, windows, number columns,
partial buckets. No app, no warehouse: frames and filters in, what the page shows out."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
from dash.dash_table import DataTable

from dashboard import alerts_view
from dashboard.components import Column, num, report_href, table
from dashboard.figures.energy import energy_over_time
from dashboard.figures.utilization import utilisation_over_time
from dashboard.filters import CUSTOM, WEEK, Filters, from_query, from_search, merged_search

NOW = datetime(2026, 11, 18, 12, 30)  # a Wednesday of 2026-W47


def _alerts() -> pd.DataFrame:
    """Twelve-alert incident shape of the issue, cut down: the critical one is oldest."""
    t = NOW - timedelta(hours=1)
    rows = [
        # rule, severity, state, rack, node, gpu, value, threshold, unit, active, fired
        ("gpu_temp", "warning", "firing", "r01", "n01", 2, 86.04, 85.0, "C", 50, 45),
        ("thermal_throttle", "warning", "pending", "r02", "n03", 0, float("nan"), 1.0,
         None, 5, None),
        ("rack_cooling", "critical", "firing", "r03", None, None, 6.5, 5.0, "C", 58, 55),
        ("gpu_temp", "warning", "firing", "r03", "n05", 1, 88.2, 87.0, "C", 30, 29),
    ]
    return pd.DataFrame([{
        "alert_id": f"a{i}", "rule": r, "severity": s, "state": st, "rack": rack,
        "node": node, "gpu_index": gpu, "value": v, "threshold": th, "unit": u,
        "active_since": t + timedelta(minutes=a),
        "fired_at": None if f is None else t + timedelta(minutes=f), "acked_by": None,
    } for i, (r, s, st, rack, node, gpu, v, th, u, a, f) in enumerate(rows)])


def test_incidents_put_the_critical_rack_first_with_units_and_firing_time():
    d = alerts_view.order_alerts(_alerts())
    assert list(d["incident"]) == ["r03", "r03", "r01", "r02"]
    first = d.iloc[0]
    assert (first["rule"], first["severity"]) == ("rack_cooling", "critical")
    assert first["value_text"] == "6.5 °C" and first["threshold_text"] == "5.0 °C"
    # "firing since" is when it fired (11:55), not when it turned pending (11:58 - 3)
    assert first["since_text"] == "firing since Wed 12:25 UTC"
    assert d.iloc[1]["where"] == "r03 / n05 / GPU 1"  # the GPU index is shown
    pending = d.iloc[3]
    assert pending["since_text"] == "pending since Wed 11:35 UTC"
    assert pending["value_text"] == "—"  # never "nan"
    assert "nan" not in " ".join(str(v) for v in d.drop(columns=["value"]).to_numpy().ravel()
                                 if isinstance(v, str))


def test_actionable_list_groups_per_rack_critical_first():
    div = alerts_view.actionable_list(_alerts())
    groups = div.children
    assert [g.to_plotly_json()["props"]["data-incident"] for g in groups] == [
        "r03", "r01", "r02"]
    assert groups[0].className == "incident incident-critical"
    assert groups[0].children[0].children == "Rack r03 · 2 alerts, 2 firing (1 critical)"


def test_firing_racks_keeps_the_worst_severity():
    counts = pd.DataFrame({"rack": ["r01", "r01", "r02"],
                           "severity": ["warning", "critical", "warning"],
                           "alerts": [2, 1, 1]})
    assert alerts_view.firing_racks(counts) == {"r01": "critical", "r02": "warning"}
    assert alerts_view.firing_racks(counts.iloc[0:0]) == {}


def test_iso_week_and_custom_windows_round_trip_through_the_url():
    week = from_search("?week=2026-W46&rack=r01")
    assert week.range == WEEK and week.window(NOW) == (datetime(2026, 11, 9),
                                                       datetime(2026, 11, 16))
    assert week.label == "Week 2026-W46" and not week.is_partial(NOW)
    assert from_search(week.query_string()) == week
    this = from_query({"range": "week"})  # the Overview's "this week since Monday"
    assert this.window(NOW) == (datetime(2026, 11, 16), NOW) and this.is_partial(NOW)
    days = from_search("?from=2026-11-17&to=2026-11-16")  # swapped: put in order
    assert days.range == CUSTOM and days.window(NOW) == (datetime(2026, 11, 16),
                                                         datetime(2026, 11, 18))
    assert from_search(days.query_string()) == days and not days.is_partial(NOW)
    assert from_search("?from=2026-11-18").window(NOW) == (datetime(2026, 11, 18), NOW)
    for bad in ("?week=2026-W99", "?week=x", "?from=yesterday", "?range=custom"):
        assert from_search(bad) == Filters(), bad
    assert from_search("?range=7d&week=2026-W46").range == "7d"  # an explicit range wins


def test_changing_a_filter_keeps_the_other_parameters_of_the_url():
    f = from_search("?range=7d")
    assert merged_search(f.with_(range="24h"), "?range=7d&node=n01") == "?node=n01"
    assert merged_search(f, "?node=n%2001&x=1") == "?range=7d&node=n+01&x=1"


def test_number_columns_sort_filter_and_export_as_numbers():
    df = pd.DataFrame({"job_id": ["1", "2", "3"], "gpu_h": [1234.56, 99.04, None]})
    grid = table(df, (Column("job_id", "Job"), num("gpu_h", "GPU-hours", 1, "GPU·h")),
                 empty_message="-").children[0]
    assert isinstance(grid, DataTable)
    assert [r["gpu_h"] for r in grid.data] == [1234.6, 99.0, None]
    spec = grid.columns[1]
    assert spec["type"] == "numeric" and spec["format"]["specifier"] == "$,.1f"
    assert spec["format"]["locale"]["symbol"] == ["", " GPU·h"]
    assert spec["format"]["nully"] == "—"
    assert (grid.sort_action, grid.filter_action, grid.export_format) == (
        "native", "native", "csv")


def test_partial_buckets_are_labelled_not_drawn_as_a_collapse():
    hours = pd.date_range("2026-11-18 10:00", "2026-11-18 12:00", freq="h")
    util = pd.DataFrame({"ts": hours, "gpus_installed": 8.0, "gpus_reporting": 8.0,
                         "allocated_gpus": [8.0, 8.0, 4.0], "utilised_gpus": [6.0, 6.0, 3.0]})
    fig = utilisation_over_time(util, start=datetime(2026, 11, 18, 10), end=NOW)
    (shade,) = fig.layout.shapes  # the 12:00 hour, half over
    assert pd.Timestamp(shade.x0) == pd.Timestamp("2026-11-18 12:00")
    assert [a.text for a in fig.layout.annotations] == ["partial"]
    # the line stops at 11:00; the half-filled hour is a hollow marker, not a drop
    allocated = next(tr for tr in fig.data if tr.name == "Allocated")
    assert list(allocated.y) == [8.0, 8.0, None]
    marker = next(tr for tr in fig.data if tr.name == "Allocated (partial)")
    assert list(marker.y) == [4.0] and marker.marker.symbol == "circle-open"
    whole = utilisation_over_time(util, start=datetime(2026, 11, 18, 10),
                                  end=datetime(2026, 11, 18, 13))
    assert not whole.layout.shapes
    energy = pd.DataFrame({"day": pd.date_range("2026-11-16", "2026-11-18", freq="D"),
                           "gpu_kwh": 10.0, "other_kwh": 2.0, "carbon_kg": 1.0})
    fig = energy_over_time(energy, x="day", start=datetime(2026, 11, 16), end=NOW)
    assert [pd.Timestamp(s.x0).day for s in fig.layout.shapes] == [18]
    assert list(fig.data[0].marker.opacity) == [1.0, 1.0, 0.35]  # the partial day pale


def test_report_files_are_linked_from_the_reports_page():
    assert report_href({"path": "/srv/reports/gpulens-report-2026-W47.pdf"}) == (
        "/api/reports/files/gpulens-report-2026-W47.pdf")
    assert report_href({"path": "x/a b?.html"}) == "/api/reports/files/a%20b%3F.html"
    assert report_href({"path": None}) is None


def test_round_ticks_on_dual_axes():
    """Issue 19: PUE ticks read 0.265, 0.53, 0.795; emissions 52.7, 105.3."""
    from dashboard.figures.base import round_axis
    from dashboard.figures.energy import pue_and_intensity

    assert round_axis([1.06])["dtick"] == 0.25 and round_axis([210.6])["dtick"] == 50
    assert round_axis([7.0])["dtick"] == 2 and round_axis([0.0]) == {"rangemode": "tozero"}
    df = pd.DataFrame({"hour": pd.date_range("2026-11-18", periods=3, freq="h"),
                       "it_kwh": [100.0, 110.0, 90.0], "facility_kwh": [106.0, 116.0, 95.0],
                       "carbon_kg": [40.0, 44.0, 36.0]})
    fig = pue_and_intensity(df, x="hour")
    assert fig.layout.yaxis2.dtick == 0.25 and fig.layout.yaxis2.tick0 == 0
    assert fig.layout.yaxis.dtick == 100  # g CO2e / kWh up to ~380


def test_bar_labels_sit_inside_their_bars_and_the_toolbar_clears_the_legend():
    from dashboard.figures.utilization import utilisation_by

    df = pd.DataFrame({"group": ["alice", "bob"], "allocated_gpu_h": [100.0, 50.0],
                       "utilised_gpu_h": [80.0, 10.0], "util_pct": [80.0, 20.0]})
    fig = utilisation_by(df, "user")
    labelled = [tr for tr in fig.data if tr.text]
    assert [tr.textposition for tr in labelled] == ["inside"]
    assert fig.layout.modebar.orientation == "v" and fig.layout.legend.y > 1
