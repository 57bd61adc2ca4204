"""The Placement page in headless Chromium over the hand-built cluster of
tests/support/placement.py (numbers worked out in tests/test_placement.py): cards,
fragmentation chart, the misplaced job linked to its page and rack, the scattered wait;
no console errors. Screenshot in test-output/screenshots/placement.png."""

from __future__ import annotations

import pytest

from dashboard import ids
from tests.support.browser import (
    LiveServer,
    console_errors,
    graph_figure,
    save_screenshot,
    text_of,
    wait_until,
)
from tests.support.placement import NOW, seed_placement
from warehouse import Warehouse
from warehouse.analytics import Options

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture(scope="module")
def site(chromium_driver):
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_placement(wh)
        app = create_app(wh, refresh_s=600, now=lambda: NOW,
                         options=Options(large_job_gpus=10))  # P, 14 GPUs, is large
        with LiveServer(app) as server:
            yield chromium_driver, server.url.rstrip("/")


def test_placement_page_renders_its_views(site):
    driver, base = site
    driver.get(base + "/placement?range=24h")
    wait_until(lambda: (f := graph_figure(driver, ids.PLACEMENT_FRAG)) and f["data"],
               what="the fragmentation figure")
    wait_until(lambda: "J2" in text_of(driver, ids.PLACEMENT_JOBS), what="the misplaced job")
    assert driver.find_element("css selector", ".nav-link.active").text == "Placement"
    frag = graph_figure(driver, ids.PLACEMENT_FRAG)
    names = [t["name"] for t in frag["data"]]
    assert names == ["Free", "Largest job in a zone", "Largest job in a rack", "Stranded"]
    # now (T + 4 h): J1 and J2 ended, J3 holds 2 GPUs of n4: 30 free; whole free nodes
    # 12 GPUs in zone A, 16 in zone B: one 8-GPU job in A, two in B, 30 - 24 stranded
    now = text_of(driver, ids.PLACEMENT_NOW_CARDS)
    assert "STRANDED GPUS\n6\nfree of 30; usual job 8 GPUs" in now  # titles upper-cased by CSS
    assert "RACK\n8\n" in now  # r4 free
    assert "16 GPU·h" in text_of(driver, ids.PLACEMENT_CARDS)  # J2: 8 GPUs x 2 h
    # one row: the window's cards beside now's (flex-wrap keeps them apart only when narrow)
    tops = {driver.find_element("id", i).location["y"]
            for i in (ids.PLACEMENT_NOW_CARDS, ids.PLACEMENT_CARDS)}
    assert len(tops) == 1, tops
    jobs = driver.find_element("id", ids.PLACEMENT_JOBS)
    hrefs = [a.get_attribute("href") for a in jobs.find_elements("tag name", "a")]
    assert any(h.endswith("/jobs/J2") for h in hrefs)
    assert any(h.endswith("/?rack=r2") for h in hrefs)
    wait_until(lambda: "P" in text_of(driver, ids.PLACEMENT_WAITS)
               and "1 of 1 large jobs" in text_of(driver, ids.PLACEMENT_WAITS),
               what="the scattered wait")
    save_screenshot(driver, "placement")
    assert [e["message"] for e in console_errors(driver)] == []
