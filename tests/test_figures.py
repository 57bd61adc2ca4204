"""Pure figure builders and formatting: traces, axes, colour scale, empty states."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard.figures import base
from dashboard.figures import overview as figures
from dashboard.formatting import fmt_gpu_hours, fmt_kw, fmt_pct, fmt_span, headline_texts


def floor_frame(**overrides) -> pd.DataFrame:
    """Two racks with samples and one without, as rack_floor() returns them."""
    df = pd.DataFrame(
        {
            "rack": ["r01", "r02", "r03"], "zone": ["A", "A", "B"], "row": [1, 1, 2],
            "x": [0.0, 1.0, 0.0], "y": [0.0, 0.0, 1.0], "gpus": [2, 2, 0],
            "gpus_reporting": [2, 1, 0], "hottest_temp_c": [70.0, 55.0, math.nan],
            "hottest_node": ["n1", "n2", None], "hottest_gpu_index": [0, 0, math.nan],
            "mean_util_pct": [60.0, 100.0, math.nan], "power_kw": [0.6, 0.5, math.nan],
        }
    )
    for column, values in overrides.items():
        df[column] = values
    return df


def test_floor_map_one_square_per_rack_at_its_tile():
    fig = figures.floor_map(floor_frame())
    assert isinstance(fig, go.Figure)
    shapes = fig.layout.shapes
    assert len(shapes) == 3
    centres = [((s.x0 + s.x1) / 2, (s.y0 + s.y1) / 2) for s in shapes]
    assert centres == [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)]
    assert all(math.isclose(s.x1 - s.x0, s.y1 - s.y0) for s in shapes)  # squares
    (trace,) = fig.data
    assert trace.type == "scatter" and list(trace.x) == [0.0, 1.0, 0.0]
    assert "r01" in trace.text[0] and "70 °C" in trace.text[0]
    assert "no data" in trace.text[2]


def test_floor_map_colour_scale_units_and_axes():
    fig = figures.floor_map(floor_frame())
    marker = fig.data[0].marker
    assert marker.colorbar.title.text == "Hottest GPU (°C)"
    assert (marker.cmin, marker.cmax) == base.TEMP_RANGE_C
    # Inferno (colour-blind safe) with steps at the gpu_temp alert's clear level and
    # threshold, which the colour bar names
    assert marker.colorscale == tuple(tuple(s) for s in base.temp_colorscale(82.0, 87.0))
    ticks = dict(zip(marker.colorbar.tickvals, marker.colorbar.ticktext, strict=True))
    assert ticks[82.0] == "82 clear" and ticks[87.0] == "87 alert"
    assert fig.layout.xaxis.title.text == "Floor x (rack tiles)"
    assert fig.layout.yaxis.title.text == "Floor y (rack tiles)"
    assert fig.layout.yaxis.scaleanchor == "x"  # tiles stay square
    assert fig.layout.uirevision == "floor-map"  # refreshes keep the user's zoom
    assert list(fig.layout.yaxis.ticktext) == ["Row 1 · A", "Row 2 · B"]
    # hotter racks are lighter on Inferno; a rack without a fresh sample is grey
    fills = [s.fillcolor for s in fig.layout.shapes]
    assert fills[2] == base.NO_DATA and fills[0] != fills[1]


def _rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(float(v)) for v in colour[colour.index("(") + 1:-1].split(","))


def test_floor_map_tells_85_from_88_degrees():
    """Issue 19: 85 °C and 88 °C (either side of the 87 °C alert) looked alike."""
    fills = [s.fillcolor for s in figures.floor_map(
        floor_frame(hottest_temp_c=[85.0, 88.0, math.nan])).layout.shapes]
    distance = sum(abs(a - b) for a, b in zip(_rgb(fills[0]), _rgb(fills[1]), strict=True))
    assert distance > 120  # a step, not a shade: 53 on the plain Inferno 30-90 °C scale
    # and inside a band the scale still grades: 84 and 86 °C share the orange band
    fills = [s.fillcolor for s in figures.floor_map(
        floor_frame(hottest_temp_c=[84.0, 86.0, math.nan])).layout.shapes]
    assert sum(abs(a - b) for a, b in zip(_rgb(fills[0]), _rgb(fills[1]), strict=True)) < 60


def test_floor_map_marks_racks_with_firing_alerts():
    fig = figures.floor_map(floor_frame(), alerting={"r02": "critical"})
    lines = [s.line for s in fig.layout.shapes]
    assert lines[1].color == figures.ALERT_LINE and lines[1].width == 4
    assert lines[0].color != figures.ALERT_LINE
    assert fig.data[0].text[1].startswith("<b>▲ r02")
    assert "Firing alert: critical" in fig.data[0].customdata[1][6]
    # a selected rack stays visibly selected when it alerts too
    chosen = figures.floor_map(floor_frame(), alerting={"r02": "critical"}, selected="r02")
    assert (chosen.layout.shapes[1].line.color, chosen.layout.shapes[1].line.width) == (
        base.INK, 5)


def test_floor_map_rows_leave_no_empty_band():
    """Rows at y 0, 2 and 6 (aisles, a zone gap) are drawn as rows 0, 1, 2."""
    fig = figures.floor_map(floor_frame(y=[0.0, 2.0, 6.0], row=[1, 2, 3]))
    assert sorted({(s.y0 + s.y1) / 2 for s in fig.layout.shapes}) == [0.0, 1.0, 2.0]
    assert list(fig.layout.yaxis.tickvals) == [0.0, 1.0, 2.0]


def test_floor_map_hover_carries_rack_zone_hottest_gpu_util_power():
    fig = figures.floor_map(floor_frame())
    hover = fig.data[0].customdata
    assert list(hover[0]) == ["r01", "A", "n1/0 at 70 °C", "60.0 %", "0.60 kW",
                              "2 of 2 GPUs reporting", ""]
    assert hover[2][2] == "no fresh sample"
    template = fig.data[0].hovertemplate
    for words in ("Rack", "zone", "Hottest GPU", "Mean utilisation", "Power"):
        assert words in template


def test_floor_map_escapes_names():
    fig = figures.floor_map(floor_frame(rack=["<img src=x onerror=alert(1)>", "r02", "r03"]))
    assert "<img" not in fig.data[0].text[0] and "&lt;img" in fig.data[0].text[0]
    assert fig.data[0].customdata[0][0].startswith("&lt;img")


def test_floor_map_places_racks_without_a_position_below():
    fig = figures.floor_map(floor_frame(x=[0.0, 1.0, math.nan], y=[0.0, 0.0, math.nan]))
    assert len(fig.layout.shapes) == 3
    assert fig.data[0].y[2] > 0.0


def test_floor_map_without_fresh_samples_says_why():
    df = floor_frame(hottest_temp_c=[math.nan] * 3, gpus_reporting=[0, 0, 0])
    fig = figures.floor_map(df, stale_after_s=120)
    assert len(fig.layout.shapes) == 3  # the floor is still drawn, all grey
    assert {s.fillcolor for s in fig.layout.shapes} == {base.NO_DATA}
    (note,) = fig.layout.annotations
    assert note.text == (
        "No telemetry yet: the collector has not delivered a sample in the last 2 minutes"
    )


def test_floor_map_without_racks_is_an_empty_state():
    fig = figures.floor_map(floor_frame().iloc[0:0])
    assert fig.layout.meta == {"empty": True}
    assert len(fig.data) == 0
    assert "no racks" in fig.layout.annotations[0].text


def test_empty_figure_shows_the_message_without_axes():
    fig = base.empty_figure("Nothing here: because <reasons>")
    assert fig.layout.annotations[0].text == "Nothing here: because &lt;reasons&gt;"
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False


def test_formatting_units():
    assert fmt_pct(72.44) == "72.4 %" and fmt_pct(None) == "—" and fmt_pct(math.nan) == "—"
    assert fmt_kw(1.1) == "1.10 kW" and fmt_kw(156.25) == "156.2 kW"
    assert fmt_gpu_hours(39.25) in ("39.2 GPU·h", "39.3 GPU·h")
    assert fmt_gpu_hours(1234.4) == "1,234 GPU·h"
    assert fmt_span(120) == "2 minutes" and fmt_span(45) == "45 s"


def test_headline_texts_explain_missing_values():
    empty = {
        "gpus": 0, "gpus_reporting": 0, "allocated_gpus": 0, "allocated_share_pct": None,
        "mean_util_allocated_pct": None, "power_kw": None, "latest_sample_ts": None,
        "gpu_hours_lost_week": 0.0, "failed_runs_week": 0,
        "week_start": datetime(2026, 11, 16), "stale_after_s": 120,
    }
    texts = headline_texts(empty)
    assert texts["gpus"] == ("0", "No topology yet: load an inventory or Slurm's topology.conf")
    assert texts["power"] == ("—", "No telemetry yet: no GPU has reported in the last 2 minutes")
    assert texts["util"][0] == "—" and texts["allocated"][0] == "—"
    assert texts["lost"] == ("0.0 GPU·h", "Across 0 failed runs since Mon 16 Nov 00:00 UTC")
    assert texts["alerts"][0] == "—"


def test_failure_heatmap_labels_periods_on_a_category_axis():
    import pandas as pd

    from dashboard.figures.failures import failures_heatmap

    df = pd.DataFrame({"row": ["script", "script", "framework"], "failures": [1, 1, 1],
                       "day": pd.to_datetime(["2026-11-17", "2026-11-18", "2026-11-24"])})
    fig = failures_heatmap(df, rows="category", period="W")
    assert list(fig.data[0].x) == ["2026-W47", "2026-W48"]  # one column per ISO week
    assert fig.layout.xaxis.type == "category"
    z = dict(zip(fig.data[0].y, map(list, fig.data[0].z), strict=True))
    assert z == {"framework": [0, 1], "script": [2, 0]}


def test_floor_map_built_unvalidated_is_what_validation_gives():
    """The floor map skips plotly's validation for speed (issue 17): validating its dict
    again gives the very same figure, for each metric, a selection and an alert."""
    df = floor_frame(x=[0.0, 1.0, math.nan], y=[0.0, 0.0, math.nan])
    for kw in ({}, {"metric": "util", "selected": "r01", "alerting": {"r02": "critical"}},
               {"metric": "power"}):
        fig = figures.floor_map(df, **kw)
        assert go.Figure(fig.to_dict()).to_plotly_json() == fig.to_plotly_json()


def _job_telemetry_with_plotly_updates(df):
    """The job telemetry figure as it was built before issue 17 (make_subplots and
    plotly's updates, ~100 ms of CPU a figure), the reference for the cached layout."""
    from plotly.subplots import make_subplots

    from dashboard.figures.base import GRID, PALETTE, chart_layout

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09,
                        subplot_titles=("Utilisation (%)", "Temperature (°C)", "Power (kW)"))
    for row, col, name, colour, tmpl in [
        (1, "util_mean_pct", "Mean utilisation", PALETTE[0], "%{y:.0f} %"),
        (1, "util_min_pct", "Least-busy GPU", PALETTE[4], "%{y:.0f} %"),
        (2, "temp_mean_c", "Mean temperature", PALETTE[1], "%{y:.0f} °C"),
        (2, "temp_max_c", "Hottest GPU", PALETTE[5], "%{y:.0f} °C"),
        (3, "power_kw", "Power of its GPUs", PALETTE[2], "%{y:.1f} kW")]:
        fig.add_trace(go.Scatter(x=df["ts"], y=df[col], name=name, mode="lines",
                                 line={"color": colour, "width": 2}, hovertemplate=tmpl),
                      row=row, col=1)
    fig.update_layout(**chart_layout(520, uirevision="job-telemetry",
                                     margin={"l": 64, "r": 24, "t": 64, "b": 48}))
    fig.update_annotations(font={"size": 12}, x=0, xanchor="left")
    for row, unit in ((1, "%"), (2, "°C"), (3, "kW")):
        fig.update_yaxes(title_text=unit, row=row, col=1, **GRID)
    fig.update_yaxes(range=[0, 105], dtick=25, row=1, col=1)
    fig.update_xaxes(title_text="Time (UTC)", row=3, col=1, showgrid=False)
    return fig


def test_job_telemetry_from_its_cached_layout_is_the_figure_plotly_updates_gave():
    """The job page's telemetry figure reuses one layout (issue 17): the same figure as
    make_subplots and plotly's updates built, twice (the cached layout is not changed)."""
    import json

    import plotly.io as pio

    from dashboard.figures.job import job_telemetry

    df = pd.DataFrame({"ts": pd.date_range("2026-11-16 06:00", periods=4, freq="5min"),
                       "gpus": [8, 8, 16, 16], "util_mean_pct": [50.0, 60.0, 70.0, None],
                       "util_min_pct": [1.0, 2.0, 3.0, 4.0], "temp_mean_c": [60.0] * 4,
                       "temp_max_c": [70.0, 71.0, 72.0, 73.0], "power_kw": [5.0, 5.5, 9.0, 9.5],
                       "throttle_thermal_s": [0.0] * 4})
    want = json.loads(pio.to_json(_job_telemetry_with_plotly_updates(df)))
    for _ in range(2):
        fig = job_telemetry(df)
        assert json.loads(pio.to_json(fig)) == want
        assert json.loads(pio.to_json(go.Figure(fig.to_dict()))) == want
        fig.update_layout(height=10)  # a caller's change stays in its own figure


def test_placement_scores_draw_one_marker_per_size_span_and_score():
    """A marker per size, span and score (issue 17: a marker per run was 560,000
    markers a 24,576-GPU week; placed_runs groups them): the marker names its costliest
    run's job and how many more runs it holds, and its size follows their GPU-hours."""
    from dashboard.figures.placement import placement_scores

    def marker(job, gpus, racks, runs, gpu_hours, misplaced):
        return {"misplaced": misplaced, "gpus": gpus, "racks": racks, "min_racks": 1,
                "zones": 1, "min_zones": 1, "score": 2 / (racks + 1), "runs": runs,
                "gpu_hours": gpu_hours, "score_gpu_hours": gpu_hours * 2 / (racks + 1),
                "job_id": job}

    df = pd.DataFrame([marker("e", 16, 1, 1, 4.0, False), marker("b", 16, 2, 3, 15.0, True),
                       marker("d", 32, 3, 1, 2.0, True)])
    fig = placement_scores(df)
    tight, spread = fig.data
    assert list(tight.text) == ["e"] and list(tight.x) == [16]
    assert list(spread.x) == [16, 32] and list(spread.y) == pytest.approx([2 / 3, 0.5])
    assert list(spread.text) == ["b and 2 more runs", "d"]
    assert spread.marker.size[0] == pytest.approx(30.0)  # 15 GPU-hours, the largest
    assert spread.marker.size[1] == pytest.approx(6 + 24 * (2 / 15) ** 0.5)
    assert list(spread.customdata[0]) == [2, 1, 1, 1]  # racks, fewest, zones, fewest
    one = placement_scores(pd.DataFrame([marker("a<1>", 16, 2, 2, 6.0, True)]))
    assert list(one.data[0].text) == ["a&lt;1&gt; and 1 more run"]  # escaped
    assert list(one.layout.xaxis.tickvals) == [8, 16, 32]  # powers of 2 around the sizes
    assert "No multi-node job" in str(placement_scores(df.head(0)).layout)


def _sent(fig: go.Figure):
    """What Dash sends the browser of ``fig``: its JSON, parsed (key order aside)."""
    return json.loads(fig.to_json())


def test_line_charts_and_placement_scores_built_unvalidated_are_what_validation_gives():
    """base.lines and placement_scores skip plotly's validation for speed (issue 17:
    ~11 and ~18 ms a figure through add_trace and update_layout): validating their dicts
    again sends the browser the very same figure, with gaps, integers and markup."""
    from dashboard.figures.placement import placement_scores

    df = pd.DataFrame({"ts": pd.date_range("2026-11-01", periods=5, freq="h"),
                       "a": [1.5, math.nan, 3.0, 4.0, 5.0], "b": [1, 2, 3, 4, 5]})
    line = base.lines(df, "ts", [("a", "A"), ("b", "B")], y_title="GPUs", empty="none",
                      dashes={"a": "dot"})
    markers = pd.DataFrame({"misplaced": [False, True, True], "gpus": [16, 16, 512],
                            "racks": [1, 2, 9], "min_racks": 1, "zones": [1, 1, 2],
                            "min_zones": 1, "score": [1.0, math.nan, 0.2],
                            "runs": [1, 3, 1], "gpu_hours": [4.0, 0.0, 2.5],
                            "score_gpu_hours": 0.0, "job_id": ["e", "b<1>", "d"]})
    for fig in (line, placement_scores(markers)):
        assert _sent(go.Figure(fig.to_dict())) == _sent(fig)
    assert [t.line.dash for t in line.data] == ["dot", "solid"]


def test_rack_gpus_cells_show_each_gpus_first_row():
    """The drill-down grid looks each GPU's row up (issue 17: a filter of the frame per
    cell): a GPU with two rows shows the first, one without a row shows no sample."""
    from dashboard.figures.drilldown import rack_gpus

    df = pd.DataFrame({"node": ["n1", "n1", "n1", "n2"], "gpu_index": [0, 1, 1, 0],
                       "temp_c": [50.0, 61.0, 99.0, None],
                       "job_id": ["7", None, "8", "9"], "user_name": ["ann", None, "bo", "cy"]})
    (heat,) = rack_gpus(df, rack="r1").data
    assert heat.customdata[0][0][2:] == ["job 7 · ann", "50 °C"]
    assert heat.customdata[0][1][2] == "idle" and heat.customdata[0][1][3].startswith("61")
    assert heat.customdata[1][0][3] == "no fresh sample" and heat.customdata[1][1][2] == "idle"
    assert heat.z[1][1] is None


def test_partial_buckets_are_shaded_as_add_vrect_shades_them():
    """mark_partial gives its shades and labels as plain dicts (issue 17: plotly's
    ``add_vrect`` cost ~7 ms of CPU a bucket): the browser gets the shapes and
    annotations ``add_vrect`` made, for a window cut at both ends, on a validated and an
    unvalidated figure alike."""
    df = pd.DataFrame({"ts": pd.date_range("2026-11-01 00:00", periods=5, freq="h"),
                       "a": [1.0, 2.0, 3.0, 4.0, 5.0]})
    start, end = datetime(2026, 11, 1, 0, 30), datetime(2026, 11, 1, 4, 15)
    want = base.lines(df, "ts", [("a", "A")], y_title="GPUs", empty="none")
    for t, x1 in ((pd.Timestamp(start.replace(minute=0)), pd.Timestamp("2026-11-01 01:00")),
                  (pd.Timestamp("2026-11-01 04:00"), pd.Timestamp(end))):
        want.add_vrect(x0=t, x1=x1, fillcolor=base.GREY, opacity=0.15, line_width=0,
                       layer="below", annotation_text="partial",
                       annotation_position="top left",
                       annotation_font={"size": 11, "color": base.MUTED})
    for fig in (base.lines(df, "ts", [("a", "A")], y_title="GPUs", empty="none"),
                go.Figure(base.lines(df, "ts", [("a", "A")], y_title="GPUs",
                                     empty="none").to_dict())):
        partial = base.mark_partial(fig, df["ts"], start=start, end=end,
                                    bucket=timedelta(hours=1))
        assert [pd.Timestamp(t) for t in partial] == [pd.Timestamp("2026-11-01 00:00"),
                                                      pd.Timestamp("2026-11-01 04:00")]
        sent, shaded = _sent(fig)["layout"], _sent(want)["layout"]
        assert sent["shapes"] == shaded["shapes"] and len(sent["shapes"]) == 2
        assert sent["annotations"] == shaded["annotations"]


def test_energy_charts_built_unvalidated_are_what_validation_gives():
    """The energy over time and PUE charts give plain traces (issue 17): validating their
    dicts again sends the browser the very same figure, with partial hours (pale bars,
    hollow markers), gaps, zero IT energy and hours of several or no intensity source."""
    from dashboard.figures.energy import energy_over_time, pue_and_intensity

    hours = pd.date_range("2026-11-01", periods=6, freq="h")
    df = pd.DataFrame({"hour": hours, "gpu_kwh": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                       "other_kwh": [math.nan, 1.0, 1.0, 2.0, 2.0, 1.0],
                       "carbon_kg": [0.0, 0.5, 1.0, 1.5, 2.0, 0.2],
                       "facility_kwh": [0.0, 4.0, 5.0, 8.0, 9.0, 9.5],
                       "it_kwh": [0.0, 3.0, 4.0, 6.0, 7.0, 7.0],
                       "intensity_sources": [["a"], ["b", "a"], None, ["a"], ["a"], ["b"]]})
    over = energy_over_time(df, x="hour", start=datetime(2026, 11, 1, 0, 30),
                            end=datetime(2026, 11, 1, 5, 10))
    pue = pue_and_intensity(df, x="hour")
    for fig in (over, pue):
        assert _sent(go.Figure(fig.to_dict())) == _sent(fig)
    assert [t.name for t in over.data][:3] == ["GPUs", "Rest of the nodes", "Emissions"]
    assert list(over.data[0].marker.opacity) == [0.35, 1.0, 1.0, 1.0, 1.0, 0.35]
    assert len(pue.data) == 5  # a, a + b, b, unknown, and the PUE
