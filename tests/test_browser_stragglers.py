"""The straggler views in headless Chromium (issue 15) over the simulated cluster of
tests/support/stragglers.py, 40 minutes after live start: the job's heat map with the
straggler outlined and its evidence linking to the node, Goodput's GPU-hours lost to
slow members beside those lost to failures. Each ends with no console errors."""

from __future__ import annotations

import pytest

from tests.support.browser import (
    LiveServer,
    console_errors,
    graph_figure,
    save_screenshot,
    text_of,
    wait_until,
)
from tests.support.stragglers import LIVE, MIN, cluster, seed

pytestmark = [pytest.mark.browser, pytest.mark.integration]
NOW = LIVE + 40 * MIN


@pytest.fixture(scope="module")
def site(chromium_driver, tmp_path_factory):
    """(driver, base url, the live straggler) with one app over the simulated cluster."""
    from dashboard.app import create_app
    from warehouse import Warehouse, analytics

    sim = cluster()
    path = seed(tmp_path_factory.mktemp("browser-stragglers") / "w.duckdb", sim)
    truth = [s for s in sim.stragglers(NOW) if s.start >= LIVE][0]
    with Warehouse(str(path)) as wh:
        wh.write(lambda con: analytics.refresh(con, NOW, None)).result()
        app = create_app(wh, refresh_s=600, now=lambda: NOW)
        with LiveServer(app) as server:
            yield chromium_driver, server.url.rstrip("/"), truth


def test_the_job_page_marks_the_straggler_on_its_heat_map_and_links_its_node(site):
    driver, base, truth = site
    driver.get(f"{base}/jobs/{truth.job_id}")
    fig = wait_until(lambda: (f := graph_figure(driver, "job-straggler-heatmap"))
                     and f["data"] and f, what="the straggler heat map")
    heat = fig["data"][0]
    assert heat["type"] == "heatmap" and truth.node in heat["y"]
    row = heat["y"].index(truth.node)
    outlined = [s for s in fig["layout"].get("shapes", [])
                if s["y0"] == row - 0.5 and s["y1"] == row + 0.5]
    assert len(outlined) == 1
    table = wait_until(lambda: (t := text_of(driver, "job-stragglers")) and truth.node in t
                       and t, what="the stragglers table")
    assert "Peers' clock" in table and "Thermal throttling" in table
    save_screenshot(driver, "job-stragglers")
    assert [e["message"] for e in console_errors(driver)] == []
    driver.find_element("link text", truth.node).click()
    wait_until(lambda: f"/node?node={truth.node}" in driver.current_url,
               what="the node page")
    assert [e["message"] for e in console_errors(driver)] == []


def test_goodput_shows_gpu_hours_lost_to_slow_members_beside_failures(site):
    driver, base, truth = site
    driver.get(f"{base}/goodput?range=24h")
    cards = wait_until(lambda: (t := text_of(driver, "goodput-slow-cards"))
                       and "GPU·h" in t and t, what="the slow-members cards")
    assert "lost to slow members" in cards.lower() and "lost to failures" in cards.lower()
    table = wait_until(lambda: (t := text_of(driver, "goodput-slow")) and truth.job_id in t
                       and t, what="the straggler episodes")
    assert truth.node in table
    save_screenshot(driver, "goodput-stragglers")
    assert [e["message"] for e in console_errors(driver)] == []
