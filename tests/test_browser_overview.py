"""The Overview page in a real browser: headline cards, floor map, live refresh, no errors.

A 24-rack cluster (3 rows of 8, two zones, 16 GPUs a rack) is seeded into an in-memory
warehouse; the app runs under waitress and headless Chromium drives it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pandas as pd
import pytest

from dashboard import ids
from dashboard.formatting import headline_texts
from tests.support.browser import (
    LiveServer,
    chromium,
    console_errors,
    graph_figure,
    save_screenshot,
    text_of,
    wait_until,
)
from warehouse import Warehouse
from warehouse.queries import overview

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NOW = datetime(2026, 11, 18, 12, 0, 0)
ROWS = {0: "A", 1: "A", 3: "B"}  # floor row y -> zone (row 2 is an aisle)
COLS = 8
NODES_PER_RACK, GPUS_PER_NODE = 2, 8
SILENT_RACK = "r3-07"  # its collector stopped 10 minutes ago


def seed_cluster(wh: Warehouse, now: datetime = NOW) -> int:
    """Seed 24 racks of 16 GPUs with deterministic telemetry and jobs; return rack count."""
    racks, nodes, gpus, samples, allocs = [], [], [], [], []
    for y, zone in ROWS.items():
        for x in range(COLS):
            rack = f"r{y}-{x:02d}"
            racks.append((rack, zone, y + 1, float(x), float(y)))
            for n in range(NODES_PER_RACK):
                node = f"{rack}-n{n}"
                nodes.append((node, rack, "gpu", GPUS_PER_NODE))
                for g in range(GPUS_PER_NODE):
                    gpus.append((f"GPU-{node}-{g}", node, g, "H100", 700.0))
                    k = (x * 7 + y * 13 + n * 5 + g * 3) % 17
                    util = 0.0 if k < 4 else 55.0 + 2.5 * k
                    temp = 38.0 + 2.2 * x + 1.5 * y + 0.6 * g + (18 if rack == "r1-05" else 0)
                    age = 600 if rack == SILENT_RACK else 20
                    samples.append((now - timedelta(seconds=age), node, g, util,
                                    90.0 + 5.5 * util, temp))
                    if k >= 4:
                        allocs.append((f"j{x}{y}", 0, node, g, now - timedelta(hours=3), None))
    frames = {
        "racks": pd.DataFrame(racks, columns=["rack", "zone", "row", "x", "y"]),
        "nodes": pd.DataFrame(nodes, columns=["node", "rack", "partition", "gpus"]),
        "gpus": pd.DataFrame(gpus, columns=["gpu_uuid", "node", "gpu_index", "model", "tdp_w"]),
        "samples": pd.DataFrame(
            samples, columns=["ts", "node", "gpu_index", "util_pct", "power_w", "temp_c"]
        ),
        "allocations": pd.DataFrame(
            allocs, columns=["job_id", "run_index", "node", "gpu_index", "start_ts", "end_ts"]
        ),
        "runs": pd.DataFrame(
            [("f1", 0, now - timedelta(hours=30), now - timedelta(hours=20), "NODE_FAIL", 64),
             ("f1", 1, now - timedelta(hours=19), None, "RUNNING", 64),
             ("f2", 0, now - timedelta(hours=8), now - timedelta(hours=5), "FAILED", 16)],
            columns=["job_id", "run_index", "start_ts", "end_ts", "state", "gpus"],
        ),
    }
    for kind, frame in frames.items():
        wh.ingest(kind, frame).result()
    return len(racks)


@pytest.fixture
def live_overview():
    """(server, warehouse, rack count) with a clock that starts at NOW and runs."""
    from dashboard.app import create_app

    started = time.monotonic()
    with Warehouse(":memory:") as wh:
        n_racks = seed_cluster(wh)
        app = create_app(
            wh, refresh_s=1, now=lambda: NOW + timedelta(seconds=time.monotonic() - started)
        )
        with LiveServer(app) as server:
            yield server, wh, n_racks


def test_overview_renders_in_chromium(live_overview):
    server, wh, n_racks = live_overview
    expected = headline_texts(
        overview.headline(wh.reader(), now=NOW, week_start=overview.iso_week_start(NOW),
                          stale_after_s=120)
    )
    with chromium() as driver:
        driver.get(server.url)
        wait_until(lambda: text_of(driver, ids.card_value("gpus")) == "384",
                   what="the GPU count card")
        from dashboard.pages.overview import HEADLINE_CARDS

        for key in HEADLINE_CARDS:
            assert text_of(driver, ids.card_value(key)) == expected[key][0], key
            assert text_of(driver, ids.card_note(key)) == expected[key][1], key
        assert text_of(driver, ids.card_value("alerts")) == "0"
        assert expected["allocated"][0].endswith("%") and expected["power"][0].endswith("kW")

        # the floor map: one square (a layout shape) per rack, drawn as one SVG path each
        fig = wait_until(
            lambda: (f := graph_figure(driver, ids.OVERVIEW_FLOOR_MAP))
            and len(f["layout"].get("shapes", [])) == n_racks and f,
            what="the floor map's rack squares",
        )
        squares = driver.find_elements("css selector", f"#{ids.OVERVIEW_FLOOR_MAP} .shapelayer path")
        assert len(squares) == n_racks
        labels = driver.find_elements("css selector", f"#{ids.OVERVIEW_FLOOR_MAP} .textpoint")
        assert len(labels) == n_racks
        assert fig["data"][0]["marker"]["colorbar"]["title"]["text"] == "Hottest GPU (°C)"
        assert fig["layout"]["uirevision"] == "floor-map"

        # navigation: Overview is the active link, every page is a link
        active = driver.find_element("css selector", ".nav-link.active")
        assert active.text == "Overview"
        assert driver.find_elements("css selector", ".nav-soon") == []
        links = [e.text for e in driver.find_elements("css selector", ".nav-link")]
        assert "Utilisation" in links and "Reports" in links

        # live refresh updates values in place: the same elements, a newer "Updated" time
        card = driver.find_element("id", ids.card_value("gpus"))
        graph = driver.find_element("id", ids.OVERVIEW_FLOOR_MAP)
        first = text_of(driver, ids.OVERVIEW_UPDATED)
        wait_until(lambda: text_of(driver, ids.OVERVIEW_UPDATED) != first, timeout_s=10,
                   what="a refresh of the 'Updated' line")
        assert card.text == "384" and graph.is_displayed()  # no stale element: no rebuild

        save_screenshot(driver, "overview")
        assert console_errors(driver) == []
