"""The Overview page's callbacks called as plain functions, and the app in-process.

The warehouse is the hand-built cluster of tests/test_overview_queries.py (numbers worked
out in its docstring); the clock is fixed at its NOW.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest

from dashboard import context, ids
from dashboard.nav import PLANNED, nav_items
from tests.support.dash_seed import NOW, seed_overview
from warehouse import Warehouse


@pytest.fixture(scope="module")
def app_and_wh():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_overview(wh)
        app = create_app(wh, refresh_s=5, now=lambda: NOW, title="gpulens")
        # Serving one request claims the pages' global callbacks for this app (Dash
        # hands them to the first app that serves), so a later app gets its own.
        deps = app.server.test_client().get("/_dash-dependencies")
        assert deps.status_code == 200
        yield app, wh, json.loads(deps.data)


@pytest.fixture
def page(app_and_wh):
    app, wh, _ = app_and_wh
    context.set_context(wh, lambda: NOW, refresh_s=5)
    return sys.modules["dashboard.pages.overview"]


def _cards(values) -> dict[str, tuple[str, str]]:
    from dashboard.pages.overview import HEADLINE_CARDS

    *flat, updated = values
    return {key: (flat[2 * i], flat[2 * i + 1]) for i, key in enumerate(HEADLINE_CARDS)}


def test_headline_callback_values(page):
    values = page.update_headline(0)
    cards = _cards(values)
    assert cards["gpus"] == ("4", "3 reporting in the last 2 minutes")
    assert cards["allocated"] == ("75.0 %", "3 of 4 GPUs in running jobs")
    assert cards["util"] == ("60.0 %", "Mean over allocated GPUs' latest samples")
    assert cards["power"] == ("1.10 kW", "Sum of 3 GPUs' latest samples")
    assert cards["lost"][0] in ("10.2 GPU·h", "10.3 GPU·h")  # 10.25 GPU-hours
    assert cards["lost"][1] == "Across 4 failed runs since Mon 16 Nov 00:00 UTC"
    assert page.update_alerts(0)[:2] == ("0", "No firing or pending alerts")
    assert values[-1] == "Updated 12:00:00 UTC · latest sample 11:59:50 UTC"


def test_floor_map_callback_figure(page):
    fig = page.update_floor_map(0)
    assert len(fig.layout.shapes) == 3  # r01, r02, r03
    hover = {row[0]: row for row in fig.data[0].customdata}
    assert list(hover["r01"][2:5]) == ["n1/0 at 70 °C", "60.0 %", "0.60 kW"]
    assert hover["r02"][2] == "n2/0 at 55 °C"  # the stale 90 °C sample is not counted
    assert hover["r03"][2] == "no fresh sample"


def test_callbacks_when_telemetry_stopped(page, app_and_wh):
    _, wh, _ = app_and_wh
    context.set_context(wh, lambda: NOW + timedelta(hours=1))
    cards = _cards(page.update_headline(1))
    assert cards["power"] == (
        "—", "No telemetry yet: no GPU has reported in the last 2 minutes"
    )
    fig = page.update_floor_map(1)
    assert "has not delivered a sample in the last 2 minutes" in fig.layout.annotations[0].text


def test_callbacks_on_an_empty_warehouse(page):
    with Warehouse(":memory:") as empty:
        context.set_context(empty, lambda: NOW)
        cards = _cards(page.update_headline(0))
        fig = page.update_floor_map(0)
    assert cards["gpus"][0] == "0" and cards["power"][0] == "—"
    assert fig.layout.meta == {"empty": True}


def test_layout_reads_no_data(page):
    class NoReads:
        def reader(self):
            raise AssertionError("the layout must not read the warehouse")

    context.set_context(NoReads(), lambda: NOW, refresh_s=7)
    tree = page.layout()
    found = {}

    def walk(node):
        if hasattr(node, "id") and isinstance(getattr(node, "id", None), str):
            found[node.id] = node
        children = getattr(node, "children", None)
        for child in children if isinstance(children, list) else [children]:
            if child is not None and not isinstance(child, str):
                walk(child)

    walk(tree)
    assert found[ids.OVERVIEW_REFRESH].interval == 7000
    assert ids.OVERVIEW_FLOOR_MAP in found
    for key in ids.OVERVIEW_CARDS:
        assert ids.card_value(key) in found and ids.card_note(key) in found


def test_app_serves_the_page_and_its_callbacks(app_and_wh):
    app, _, deps = app_and_wh
    client = app.server.test_client()
    index = client.get("/")
    assert index.status_code == 200 and b"Overview \xc2\xb7 gpulens" in index.data
    outputs = " ".join(d["output"] for d in deps)
    assert f"{ids.OVERVIEW_FLOOR_MAP}.figure" in outputs
    assert f"{ids.card_value('gpus')}.children" in outputs
    assert f"{ids.NAV}.children" in outputs
    assert client.get("/assets/gpulens.css").status_code == 200


def test_nav_shows_every_page_in_order_and_keeps_the_filters(app_and_wh):
    import dash

    items = nav_items(dash.page_registry, "/", "?range=7d&rack=r01&node=n1")
    assert [getattr(i, "children", None) for i in items] == [name for name, _ in PLANNED]
    overview, *rest = items
    assert overview.href == "/?range=7d&rack=r01" and "active" in overview.className
    assert not any("nav-soon" in i.className for i in items)  # every page is built
    assert rest[0].href == "/utilization?range=7d&rack=r01"  # the drill-down node stays


def test_a_new_app_gets_each_page_callback_once():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        create_app(wh, now=lambda: NOW)  # never serves: its callbacks stay unclaimed
        app = create_app(wh, now=lambda: NOW)
        deps = json.loads(app.server.test_client().get("/_dash-dependencies").data)
    outputs = [d["output"] for d in deps]
    assert len(outputs) == len(set(outputs))
    assert f"{ids.OVERVIEW_FLOOR_MAP}.figure" in outputs
