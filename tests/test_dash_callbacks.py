"""Every page's callbacks called as plain functions over the seeded cluster.

One app is built (and serves one request, which claims the pages' callbacks for it);
the clock is fixed at the seed's NOW.
"""

from __future__ import annotations

import json
import re
import sys

import plotly.graph_objects as go
import pytest
from dash.dash_table import DataTable

from dashboard import context, filters, ids
from dashboard.filters import Filters, from_query, from_search
from tests.support.dash_seed import NOW, XSS_NAME, seed_dashboard
from tests.support.web import same_origin_post
from warehouse import Warehouse

PAGES = ("overview", "utilization", "failures", "goodput", "energy", "thermal", "jobs",
         "job", "reports", "node")


@pytest.fixture(scope="module")
def app_and_wh():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_dashboard(wh)
        app = create_app(wh, refresh_s=5, now=lambda: NOW)
        deps = app.server.test_client().get("/_dash-dependencies")  # claims the callbacks
        assert deps.status_code == 200
        yield app, wh, json.loads(deps.data)


@pytest.fixture
def pages(app_and_wh):
    _, wh, _ = app_and_wh
    context.set_context(wh, lambda: NOW, refresh_s=5)
    return {name: sys.modules[f"dashboard.pages.{name}"] for name in PAGES}


_MD_LINK = re.compile(r"^\[(.*)\]\((.*)\)$", re.S)
_MD_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def _number_text(value, fmt: dict) -> str:
    """A number cell as DataTable's d3 format shows it (``$,.1f`` with a unit suffix)."""
    if value is None:
        return fmt["nully"]
    suffix = fmt.get("locale", {}).get("symbol", ["", ""])[1]
    return format(value, fmt["specifier"].lstrip("$")) + suffix


def _table_texts(table: DataTable) -> list[str]:
    """A DataTable's headers and cells as the browser shows them: plain cells verbatim,
    Markdown (link) cells as their link text without escapes."""
    out = [c["name"] for c in table.columns]
    for row in table.data:
        for c in table.columns:
            value = row[c["id"]]
            if c.get("presentation") == "markdown":
                link = _MD_LINK.match(value)
                value = _MD_ESCAPED.sub(r"\1", link.group(1) if link else value)
            elif c.get("type") == "numeric":
                value = _number_text(value, c["format"])
            out.append(value)
    return out


def _texts(component) -> list[str]:
    """Every string in a component tree (what the browser shows as text)."""
    out = []
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        for c in component:
            out += _texts(c)
        return out
    if isinstance(component, DataTable):
        return _table_texts(component)
    children = getattr(component, "children", None)
    return out + (_texts(children) if children is not None else [])


def test_every_page_is_served_with_its_callbacks(app_and_wh):
    app, _, deps = app_and_wh
    client = app.server.test_client()
    for path in ("/", "/utilization", "/failures", "/goodput", "/energy", "/thermal",
                 "/jobs", "/jobs/1001", "/reports", "/node?node=n02"):
        assert client.get(path).status_code == 200, path
    outputs = [d["output"] for d in deps]
    assert len(outputs) == len(set(outputs))
    joined = " ".join(outputs)
    for graph in (ids.UTIL_OVER_TIME, ids.THERMAL_FLOOR, ids.JOB_TIMELINE, ids.DRILL_RACK,
                  ids.FAIL_RACK_DAY, ids.GOODPUT_MTTF, ids.ENERGY_OVER_TIME):
        assert f"{graph}.figure" in joined


def test_filters_round_trip_through_the_url():
    f = from_search("?range=7d&partition=train&rack=r01&node=n01&evil=1")
    assert f == Filters("7d", "train", "r01", "n01")
    assert from_search(f.query_string()) == f
    assert from_query({"range": "1y", "rack": "x" * 500}).range == filters.DEFAULT_RANGE
    assert len(from_query({"rack": "x" * 500}).rack) == filters.MAX_NAME
    assert from_query({"node": "n01"}).node is None  # a node needs its rack
    assert Filters(rack="r01", node="n01").drill(rack="r02") == Filters(rack="r02")
    start, end = Filters("6h").window(NOW)
    assert (end - start).total_seconds() == 6 * 3600 and end == NOW


def test_utilisation_callbacks(pages):
    page = pages["utilization"]
    data = Filters("6h").to_store()
    fig, updated = page.update_over_time(data)
    assert isinstance(fig, go.Figure) and [t.name for t in fig.data][:2] == [
        "Installed", "Allocated"]
    assert fig.layout.yaxis.title.text == "GPUs" and updated.startswith("Last 6 hours")
    by = page.update_by(data, "user")
    assert "alice" in by.data[0].y and by.layout.xaxis.title.text == "GPU-hours"
    dist = page.update_job_distribution(data)
    assert dist.layout.xaxis.title.text == "Job's mean GPU utilisation (%)"
    idle = page.update_idle(data)
    texts = _texts(idle)
    assert "1002" in texts and XSS_NAME in texts  # the markup is a plain string child


def test_filters_scope_the_charts(pages):
    page = pages["utilization"]
    fig, _ = page.update_over_time(Filters("6h", rack="r04").to_store())
    assert max(fig.data[0].y) == 8  # installed GPUs of rack r04


def test_thermal_callbacks_and_drill_down(pages, app_and_wh):
    page = pages["thermal"]
    data = Filters("24h", rack="r04").to_store()
    fig, _ = page.update_floor_map(0, "util", data)
    assert fig.data[0].marker.colorbar.title.text == "Mean utilisation (%)"
    selected = [s for s in fig.layout.shapes if s.line.width == 3]
    assert [s.name for s in selected] == ["r04"]
    click = {"points": [{"customdata": ["r02", "A"]}]}
    assert page.select_rack(click, Filters("7d").to_store()) == "?range=7d&rack=r02"
    assert page.update_rack_temperatures(data).data[0].type == "box"
    assert "Kind" in _texts(page.update_events(Filters("24h").to_store()))
    # the drill-down panel (registered on the app): rack r04's nodes, node n08's GPUs
    app, _, _ = app_and_wh
    drill = sys.modules["dashboard.drilldown"]
    assert callable(drill.register)
    client = app.server.test_client()
    body = {"output": "..drill-crumbs.children...drill-rack.figure...drill-rack-wrap.style..."
                      "drill-node.children..",
            "outputs": [{"id": ids.DRILL_CRUMBS, "property": "children"},
                        {"id": ids.DRILL_RACK, "property": "figure"},
                        {"id": ids.DRILL_RACK + "-wrap", "property": "style"},
                        {"id": ids.DRILL_NODE, "property": "children"}],
            "inputs": [{"id": ids.FILTERS, "property": "data",
                        "value": Filters(rack="r04", node="n08").to_store()},
                       {"id": ids.FLOOR_METRIC, "property": "value", "value": "temp"},
                       {"id": ids.DRILL_RACK + "-refresh", "property": "n_intervals",
                        "value": 0}],
            "changedPropIds": [f"{ids.FILTERS}.data"], "state": []}
    resp = same_origin_post(client, "/_dash-update-component", json=body)
    assert resp.status_code == 200
    payload = json.loads(resp.data)["response"]
    assert payload[ids.DRILL_RACK]["figure"]["data"][0]["y"] == ["n07", "n08"]
    node_table = json.dumps(payload[ids.DRILL_NODE]["children"])
    assert "/jobs/1004" in node_table
    assert json.dumps(XSS_NAME)[1:-1] in node_table  # a string child: rendered as text


def test_jobs_list_says_the_real_count_not_the_cap(pages, monkeypatch):
    jobs_page = pages["jobs"]
    _, note = jobs_page.update_jobs(Filters("7d").to_store(), None, None, None)
    total = int(note.split(" · ")[1].split()[0])
    monkeypatch.setattr(jobs_page, "LIMIT", 2)
    table, note = jobs_page.update_jobs(Filters("7d").to_store(), None, None, None)
    assert total > 2 and f"{total} jobs (the newest 2 shown)" in note
    assert len(table.children[0].data) == 2


def test_jobs_and_job_page(pages):
    jobs_page, job_page = pages["jobs"], pages["job"]
    table, note = jobs_page.update_jobs(Filters("24h").to_store(), "sft", None, None)
    assert "1002" in _texts(table) and "1 jobs" in note
    empty, _ = jobs_page.update_jobs(Filters("1h").to_store(), "no-such-job", None, None)
    assert "No job matches" in _texts(empty)[0]
    summary, _ = job_page.update_summary("1004")
    assert XSS_NAME in _texts(summary)
    timeline = job_page.update_timeline("1001")
    assert {t.name for t in timeline.data} == {"NODE_FAIL", "RUNNING"}
    tel = job_page.update_telemetry("1001")
    assert [a.text for a in tel.layout.annotations] == [
        "Utilisation (%)", "Temperature (°C)", "Power (kW)"]  # panel titles, no overlap
    assert "kg CO₂e" in " ".join(_texts(job_page.update_energy("1001")))
    failures = " ".join(_texts(job_page.update_failures("1001")))
    assert "infrastructure" in failures and "<b>NCCL</b>" in failures  # evidence as text
    assert "Run 0: why it was classified infrastructure" in failures  # a readable block
    assert "No job 'nope'" in _texts(job_page.update_summary("nope")[0])[0]


def test_node_page(pages):
    """Issue 19, no dead ends: a node's GPUs, the runs on them, its events and alerts."""
    page = pages["node"]
    summary, gpus, alerts, runs, events, updated = page.update_node(
        "n02", Filters("7d").to_store())
    assert "r01" in _texts(summary) and updated.startswith("Last 7 days")
    assert [int(r["gpu_index"]) for r in gpus.children[0].data] == [0, 1, 2, 3]
    run_rows = runs.children[0].data
    assert any(r["job_id"].startswith("[1001]") for r in run_rows)  # a link to the job
    assert "0,1,2,3" in {r["gpu_indices"] for r in run_rows}
    assert "GPU has fallen off the bus" in _texts(events)  # XID 79 on n02/3
    assert "No alert on this node" in _texts(alerts)[0]
    unknown = page.update_node("n99", Filters().to_store())
    assert "No node 'n99'" in _texts(unknown[0])[0]
    assert page.layout(node="n02").children[0].children[0].children[0].children == (
        "Node n02")


def test_analytics_pages(pages):
    data = Filters("7d").to_store()
    rack_day, cat_week, reasons, xids, _ = pages["failures"].update_failures(data)
    assert rack_day.data[0].type == "heatmap" and "r01" in rack_day.data[0].y
    assert xids.data[0].y == ("XID 79",) or list(xids.data[0].y) == ["XID 79"]
    assert pages["failures"].update_temperatures(data).data[0].type == "box"
    cards, mttf, stored = pages["goodput"].update_rate(data)
    assert mttf.layout.yaxis.type == "log"
    text, curve = pages["goodput"].update_advice(stored, 1024, 15, 2)
    # the advisor reads the rate the cards show, stored once (issue 17), as JSON
    rate = pages["goodput"]._rate(data)[0]
    assert json.loads(json.dumps(stored)) == stored
    assert (text, curve.to_json()) == (lambda t, c: (t, pages["goodput"].fig.ettr_curve(
        c).to_json()))(*pages["goodput"].advice(rate, 1024.0, 15.0, 2.0))
    assert "Loading" in pages["goodput"].update_advice(None, 1024, 15, 2)[0]
    none = pages["goodput"].rate_for_advice({**rate, "failures": 0, "r_f_low": 0.0,
                                              "r_f_per_1000_node_days": float("nan")})
    assert none["r_f_per_1000_node_days"] is None and json.dumps(none, allow_nan=False)
    assert "No infrastructure failure" in pages["goodput"].update_advice(none, 8, 15, 2)[0]
    assert "Checkpoint every" in text and curve.layout.xaxis.type == "log"
    # the advisor shows what r_f's interval does, not only the point estimate
    assert "across r_f's 95 % interval" in text
    band = [tr for tr in curve.data if tr.name == "r_f's 95 % interval"]
    assert band and band[0].fill == "toself"
    # a rolling range's rate reaches back to the rate window (30 days at least)
    start, end = pages["goodput"].rate_span(Filters("24h"), NOW)
    assert end == NOW and (end - start).days >= 30
    week = filters.from_query({"week": "2026-W46"})
    assert pages["goodput"].rate_span(week, NOW) == week.window(NOW)  # taken as is
    assert "Rate window" in _texts(cards)
    over, pue, totals, _ = pages["energy"].update_over_time(data)
    assert over.layout.yaxis.title.text == "IT energy (kWh)"
    cards = _texts(totals)  # Energy shows totals, not only charts (issue 19)
    assert cards[0] == "IT energy" and cards[1].endswith(" kWh") and "t CO₂e" in cards[7]
    it_kwh = float(cards[1].split()[0].replace(",", ""))
    assert it_kwh > 0 and abs(it_kwh - sum(over.data[0].y) - sum(over.data[1].y)) < 1
    assert pages["energy"].update_by(data, "user_name").data[0].type == "bar"
    assert pages["energy"].update_idle(data).layout.xaxis.title.text == "GPU energy (kWh)"


def test_overview_alerts_and_reports(pages):
    value, note, table = pages["overview"].update_alerts(0)
    assert value == "0" and "No active alerts" in _texts(table)[0]
    energy = pages["overview"].update_energy(0)
    assert energy[0].endswith("kWh")
    listing, _ = pages["reports"].update_reports(None)
    assert "No weekly reports yet" in _texts(listing)[0]


def test_empty_warehouse_says_why(pages):
    with Warehouse(":memory:") as empty:
        context.set_context(empty, lambda: NOW)
        fig, _ = pages["utilization"].update_over_time(Filters().to_store())
        assert fig.layout.meta == {"empty": True}
        assert "No telemetry" in fig.layout.annotations[0].text
        assert pages["thermal"].update_throttling(Filters().to_store()).layout.meta == {
            "empty": True}
        assert pages["job"].update_timeline("1").layout.meta == {"empty": True}


def test_pages_compute_with_the_configured_analytics_settings(app_and_wh, pages):
    """The service hands its analytics settings to the pages (create_app(options=...)):
    with PUE 2.4 instead of 1.2 every facility figure doubles; with a lemon test of one
    failure at p < 0.5, node n02 (one failure, p = 0.18) becomes a lemon."""
    from warehouse.analytics import Options

    _, wh, _ = app_and_wh
    data = Filters("24h").to_store()

    def facility(key):
        return sum(pages["energy"].update_by(data, key).data[0].x)

    def lemons():
        return " ".join(_texts(pages["failures"].update_lemons(data)))

    def n02_is_a_lemon():
        return lemons().split("n02 ")[1].split(" n08")[0].endswith("yes")

    base = {k: facility(k) for k in ("rack", "user_name")}
    assert not n02_is_a_lemon()
    try:
        context.set_context(wh, lambda: NOW, refresh_s=5, options=Options(
            pue=2.4, lemon_min_failures=1, lemon_p_value=0.5))
        for key, value in base.items():
            assert facility(key) == pytest.approx(2 * value, rel=1e-9) and value > 0
        assert n02_is_a_lemon()
    finally:
        context.set_context(wh, lambda: NOW, refresh_s=5)


def _figures(out) -> list[go.Figure]:
    items = out if isinstance(out, tuple | list) else [out]
    return [f for f in items if isinstance(f, go.Figure)]


@pytest.mark.parametrize("rng", ["24h", "7d"])
def test_every_callback_figure_is_what_plotly_validation_gives(app_and_wh, pages, rng):
    """Figures skip plotly's validation for speed (dashboard/figures/base.figure, issue
    17): validating each data callback's figure again (every one the benchmarks time)
    gives the very same figure, so nothing invalid reaches the browser unchecked."""
    from bench.dashboard import callbacks, subjects

    app, wh, _ = app_and_wh
    job = context.reader().execute(
        "SELECT job_id FROM jobs ORDER BY gpus DESC, job_id LIMIT 1").fetchone()[0]
    data = Filters(rng).to_store()
    seen = 0
    for (page, name), (fn, args) in callbacks(app, *subjects(wh.reader, job)).items():
        for fig in _figures(fn(*args(data))):
            again = go.Figure(fig.to_dict())  # raises on anything plotly would refuse
            assert json.loads(again.to_json()) == json.loads(fig.to_json()), (page, name)
            seen += 1
    assert seen >= 20


def test_the_objects_alive_at_startup_are_frozen_out_of_the_collectors_walks():
    """dashboard.app.freeze_startup_objects (issue 17): what is alive then (here, a
    cycle the collector would otherwise walk at every full collection) is in no
    generation afterwards; garbage made before it is collected, not frozen."""
    import gc
    import weakref

    from dashboard.app import freeze_startup_objects

    class Node:
        pass

    gc.disable()  # no automatic collection between the cycle's last reference and the call
    try:
        alive, dead = Node(), Node()
        alive.me, dead.me = alive, dead  # cycles: only the collector frees the dead one
        gone = weakref.ref(dead)
        del dead
        assert gone() is not None
        n = freeze_startup_objects()
        assert gone() is None
        # not == gc.get_freeze_count(): a service another test left running in this
        # process may freeze or free objects meanwhile (CI: 273,901 against 273,900)
        assert n > 0
        assert not any(o is alive for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.enable()
    assert any(o is alive for o in gc.get_objects())
