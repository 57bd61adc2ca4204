"""Every page in headless Chromium over the seeded cluster: renders, no console errors,
one interaction each (filters in the URL, drill-down by clicking, job search, the
checkpoint advisor), markup in a job name shown as text. One server and one browser for
the module; screenshots in test-output/screenshots/<page>.png.
"""

from __future__ import annotations

import pytest

from dashboard import ids
from tests.support.browser import (
    LiveServer,
    console_errors,
    graph_figure,
    save_screenshot,
    shown,
    text_of,
    wait_until,
)
from tests.support.dash_seed import NOW, XSS_NAME, seed_dashboard
from warehouse import Warehouse

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture(scope="module")
def site(chromium_driver):
    """(driver, base url) with one app over the seeded cluster."""
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_dashboard(wh)
        app = create_app(wh, refresh_s=600, now=lambda: NOW)
        with LiveServer(app) as server:
            yield chromium_driver, server.url.rstrip("/")


def _open(site, path: str, ready_graph: str | None = None, ready_id: str | None = None):
    driver, base = site
    driver.get(base + path)
    if ready_graph:
        wait_until(lambda: (f := graph_figure(driver, ready_graph)) and f["data"],
                   what=f"the figure of {ready_graph}")
    if ready_id:
        wait_until(lambda: driver.find_element("id", ready_id).text.strip()
                   not in ("", "Loading…"), what=f"#{ready_id}")
    return driver


def _no_errors(driver):
    assert [e["message"] for e in console_errors(driver)] == []


def _url_has(driver, text: str):
    wait_until(lambda: text in driver.current_url, what=f"{text!r} in the URL")


@pytest.mark.parametrize("path, name, graph, element", [
    ("/?rack=r04", "overview", ids.DRILL_RACK, ids.OVERVIEW_ALERTS),
    ("/utilization", "utilization", ids.UTIL_OVER_TIME, ids.UTIL_IDLE),
    ("/failures?range=7d", "failures", ids.FAIL_RACK_DAY, ids.FAIL_LEMONS),
    ("/goodput?range=7d", "goodput", ids.GOODPUT_MTTF, ids.GOODPUT_ADVICE),
    ("/energy?range=7d", "energy", ids.ENERGY_OVER_TIME, None),
    ("/thermal", "thermal", ids.THERMAL_FLOOR, ids.THERMAL_EVENTS),
    ("/jobs", "jobs", None, ids.JOBS_TABLE),
    ("/jobs/1001", "job", ids.JOB_TELEMETRY, ids.JOB_FAILURES),
    ("/reports", "reports", None, ids.REPORTS_LIST),
])
def test_page_renders_without_errors(site, path, name, graph, element):
    driver = _open(site, path, graph, element)
    assert driver.find_element("css selector", ".nav-link.active").text in (
        "Overview", "Utilisation", "Failures", "Goodput", "Energy", "Thermal", "Jobs",
        "Reports") or name == "job"
    save_screenshot(driver, name)
    _no_errors(driver)


def test_time_range_filter_is_kept_in_the_url(site):
    driver = _open(site, "/utilization", ids.UTIL_OVER_TIME)
    shown(driver, f"#{ids.FILTER_RANGE}").click()
    option = wait_until(lambda: [o for o in driver.find_elements(
        "css selector", "[role=option]") if o.text == "Last 7 days"], what="range options")
    option[0].click()
    _url_has(driver, "range=7d")
    wait_until(lambda: text_of(driver, ids.updated("utilization")).startswith("Last 7 days"),
               what="the page for the new range")
    # the nav links carry the filters to the other pages
    thermal = driver.find_element("css selector", ".nav-link[href^='/thermal']")
    assert thermal.get_attribute("href").endswith("/thermal?range=7d")
    _no_errors(driver)


def _click_at(driver, graph_id: str, fx: float, fy: float):
    """A real mouse click at fraction (fx, fy) of the graph's plot area."""
    from selenium.webdriver.common.action_chains import ActionChains

    area = driver.find_element("css selector", f"#{graph_id} .nsewdrag")
    rect = area.rect
    ActionChains(driver).move_to_element_with_offset(
        area, int(rect["width"] * (fx - 0.5)), int(rect["height"] * (fy - 0.5))
    ).pause(0.3).click().perform()


def _click_label(driver, graph_id: str, text: str):
    """A real mouse click on the point whose text label contains ``text``."""
    from selenium.webdriver.common.action_chains import ActionChains

    label = wait_until(lambda: [e for e in driver.find_elements(
        "css selector", f"#{graph_id} .textpoint") if text in e.text], what=text)[0]
    ActionChains(driver).move_to_element(label).pause(0.3).click().perform()


def test_drill_down_rack_node_gpu_job(site):
    driver = _open(site, "/thermal", ids.THERMAL_FLOOR)
    _click_label(driver, ids.THERMAL_FLOOR, "r04")  # a click on rack r04's tile
    _url_has(driver, "rack=r04")
    fig = wait_until(lambda: (f := graph_figure(driver, ids.DRILL_RACK)) and f["data"]
                     and f, what="the rack's nodes x GPUs")
    assert fig["data"][0]["y"] == ["n07", "n08"]
    _click_at(driver, ids.DRILL_RACK, 0.125, 0.75)  # GPU 0 of n08 (second row)
    _url_has(driver, "node=n08")
    link = wait_until(lambda: driver.find_elements(
        "css selector", f"#{ids.DRILL_NODE}-table a[href='/jobs/1004']"), what="job link")
    assert "Node n08" in text_of(driver, ids.DRILL_CRUMBS)
    save_screenshot(driver, "thermal-drilldown")
    link[0].click()
    _url_has(driver, "/jobs/1004")
    wait_until(lambda: XSS_NAME in text_of(driver, ids.JOB_SUMMARY), what="the job's name")
    _no_errors(driver)


def test_markup_in_a_job_name_is_shown_as_text(site):
    driver = _open(site, "/jobs?range=7d", None, ids.JOBS_TABLE)
    assert XSS_NAME in text_of(driver, ids.JOBS_TABLE)
    assert driver.find_elements("css selector", f"#{ids.JOBS_TABLE} img") == []
    driver.get(site[1] + "/jobs/1004")
    wait_until(lambda: XSS_NAME in text_of(driver, ids.JOB_SUMMARY), what="job summary")
    assert driver.find_elements("css selector", "img[src=x]") == []
    assert driver.execute_script("return document.title").startswith("Job 1004")
    _no_errors(driver)


def test_job_search(site):
    driver = _open(site, "/jobs?range=7d", None, ids.JOBS_TABLE)
    box = driver.find_element("id", ids.JOBS_QUERY)
    box.send_keys("pretrain\n")
    wait_until(lambda: "llama-pretrain" in text_of(driver, ids.JOBS_TABLE)
               and "sft-chat" not in text_of(driver, ids.JOBS_TABLE), what="search results")
    _no_errors(driver)


def test_checkpoint_advisor_answers(site):
    driver = _open(site, "/goodput?range=7d", None, ids.GOODPUT_ADVICE)
    first = text_of(driver, ids.GOODPUT_ADVICE)
    box = driver.find_element("id", ids.GOODPUT_ADV_GPUS)
    box.clear()
    box.send_keys("16384\n")
    wait_until(lambda: "16,384-GPU job" in text_of(driver, ids.GOODPUT_ADVICE)
               and text_of(driver, ids.GOODPUT_ADVICE) != first, what="new advice")
    _no_errors(driver)
