"""The fleet view in Chromium (issue 18): two simulated clusters whose failure rates
differ enough, exported into one lake as A and B, side by side with intervals that do
not overlap; the window in the URL; no console errors."""

from __future__ import annotations

from datetime import datetime

import pytest

from dashboard.fleet_app import create_fleet_app
from tests.support.browser import (
    LiveServer,
    console_errors,
    graph_figure,
    save_screenshot,
    text_of,
    wait_until,
)
from tests.support.fleet import export_cluster, simulated_cluster
from warehouse.analytics import Options
from warehouse.queries.lake_fleet import Lake

pytestmark = pytest.mark.slow  # two simulated clusters and a browser: ~30-60 s

NOW = datetime(2026, 11, 20, 6, 0)
DAYS = 2.0
RATES = {"A": 3000.0, "B": 50.0}  # infrastructure failures per 1,000 node-days


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet-two")
    for seed, (name, rate) in enumerate(RATES.items(), start=11):
        db = simulated_cluster(tmp / f"{name}.duckdb", now=NOW, days=DAYS, rate=rate,
                               seed=seed, nodes_per_rack=4)
        export_cluster(db, tmp / "lake", name, now=NOW, days=DAYS)
    return tmp / "lake"


def _points(fig: dict) -> dict[str, tuple[float, float, float]]:
    """cluster -> (rate, low, high) as plotly drew the failure-rate figure."""
    t = fig["data"][0]
    err = t["error_y"]
    return {x: (y, y - lo, y + hi) for x, y, lo, hi in
            zip(t["x"], t["y"], err["arrayminus"], err["array"], strict=True)}


def test_two_clusters_side_by_side_with_non_overlapping_intervals(lake, chromium_driver):
    driver = chromium_driver
    app = create_fleet_app(Lake(lake), now=lambda: NOW, options=Options(large_job_gpus=8))
    with LiveServer(app) as server:
        driver.get(server.url)
        fig = wait_until(lambda: (f := graph_figure(driver, "fleet-rate"))
                         and f["data"] and len(f["data"][0]["x"]) == 2 and f,
                         timeout_s=60, what="the failure rates of both clusters")
        rates = _points(fig)
        assert sorted(rates) == ["A", "B"]
        (a, a_lo, _), (b, _, b_hi) = rates["A"], rates["B"]
        assert a > b and a_lo > b_hi, rates  # the intervals do not overlap
        table = text_of(driver, "fleet-table")
        assert "A" in table and "B" in table
        mttf = wait_until(lambda: (f := graph_figure(driver, "fleet-mttf")) and f["data"] and f,
                          what="the MTTF projection")
        assert "A" in [t.get("name") for t in mttf["data"]]
        for graph in ("fleet-lost", "fleet-ettr", "fleet-util", "fleet-energy"):
            drawn = wait_until(lambda g=graph: (f := graph_figure(driver, g)) and f["data"]
                               and f, what=graph)
            assert {"A", "B"} <= {x for t in drawn["data"] for x in t.get("x", [])} | {
                t.get("name") for t in drawn["data"]}, graph
        save_screenshot(driver, "fleet")
        assert "Last 30 days" in text_of(driver, "fleet-updated")
        driver.get(server.url + "?range=7d")  # the window travels in the URL
        wait_until(lambda: text_of(driver, "fleet-updated").startswith("Last 7 days"),
                   what="the 7-day window")
        assert console_errors(driver) == []
