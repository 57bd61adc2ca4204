"""The operator's view in headless Chromium (issue 19): the incident view with the
critical alert first, the node page, tables sorted and exported to CSV, an ISO week in
the URL. Over the seeded cluster plus twelve alerts in which the one critical alert is
the oldest (as in the issue, where it was listed 9th of 12). Every test ends with no
browser console errors.
"""

from __future__ import annotations

import csv
import time
from datetime import timedelta

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
from tests.support.dash_seed import NOW, seed_dashboard
from warehouse import Warehouse, alerts_store

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def _alert(i: int, rule: str, severity: str, rack: str, node: str | None, gpu: int | None,
           value: float, threshold: float, minutes_ago: float, state: str = "firing") -> dict:
    active = NOW - timedelta(minutes=minutes_ago)
    return {"alert_id": f"a{i:02d}", "fingerprint": f"{rule}:{rack}:{node}:{gpu}",
            "rule": rule, "severity": severity, "scope": "rack" if node is None else "gpu",
            "rack": rack, "node": node, "gpu_index": gpu, "group_key": f"{rule}/{rack}",
            "state": state, "value": value, "peak": value, "threshold": threshold,
            "unit": "C", "active_since": active,
            "fired_at": None if state == "pending" else active + timedelta(minutes=1),
            "last_eval": NOW}


def incident_alerts() -> list[dict]:
    """Eleven warnings on r01, r02, r04 (newer) and one critical rack_cooling on r03."""
    alerts = [_alert(0, "rack_cooling", "critical", "r03", None, None, 6.5, 5.0, 90)]
    for i in range(1, 12):
        rack, node = [("r01", "n01"), ("r02", "n03"), ("r04", "n07")][i % 3]
        alerts.append(_alert(i, "gpu_hot_vs_peers", "warning", rack, node, i % 4,
                             10.0 + i / 10, 10.0, 60 - 4 * i,
                             state="pending" if i == 11 else "firing"))
    return alerts


@pytest.fixture(scope="module")
def site(chromium_driver, tmp_path_factory):
    """(driver, base url, download dir) with one app over the seeded cluster + alerts."""
    from dashboard.app import create_app

    downloads = tmp_path_factory.mktemp("downloads")
    chromium_driver.execute_cdp_cmd("Browser.setDownloadBehavior", {
        "behavior": "allow", "downloadPath": str(downloads)})
    with Warehouse(":memory:") as wh:
        seed_dashboard(wh)
        wh.write(lambda con: alerts_store.save_evaluation(
            con, alerts=incident_alerts(), dropped=[], groups=[], outbox=[])).result()
        app = create_app(wh, refresh_s=600, now=lambda: NOW)
        with LiveServer(app) as server:
            yield chromium_driver, server.url.rstrip("/"), downloads


def _open(site, path: str, ready_id: str):
    driver, base, _ = site
    driver.get(base + path)
    wait_until(lambda: driver.find_element("id", ready_id).text.strip()
               not in ("", "Loading…"), what=f"#{ready_id}")
    return driver


def _no_errors(driver):
    assert [e["message"] for e in console_errors(driver)] == []


def test_incident_view_puts_the_critical_alert_first(site):
    driver = _open(site, "/thermal", ids.THERMAL_ALERTS)
    incidents = driver.find_elements("css selector", f"#{ids.THERMAL_ALERTS} .incident")
    assert len(incidents) == 4  # one per rack, not twelve loose rows
    first = incidents[0]
    assert "incident-critical" in first.get_attribute("class")
    assert first.text.startswith("Rack r03 · 1 alerts, 1 firing (1 critical)")
    row = first.find_element("css selector", ".alert-row")
    assert "CRITICAL" in row.text.upper() and "rack_cooling" in row.text
    assert "value 6.5 °C (threshold 5.0 °C)" in row.text
    fired = NOW - timedelta(minutes=89)  # firing since the firing time, not pending time
    assert f"firing since {fired:%a %H:%M} UTC" in row.text
    everything = text_of(driver, ids.THERMAL_ALERTS)
    assert "nan" not in everything and "GPU 3" in everything  # GPU indices shown
    # the floor map marks the racks with firing alerts
    fig = wait_until(lambda: (f := graph_figure(driver, ids.THERMAL_FLOOR)) and f["data"]
                     and f, what="the floor map")
    labels = " ".join(fig["data"][0]["text"])
    assert "▲ r03" in labels and "▲ r01" in labels
    save_screenshot(driver, "thermal-incidents")
    # the Overview's alert table, too: the critical alert on top
    driver = _open(site, "/", ids.OVERVIEW_ALERTS)
    cells = wait_until(lambda: driver.find_elements(
        "css selector", f"#{ids.OVERVIEW_ALERTS} td[data-dash-column='severity']"),
        what="alert rows")
    assert cells[0].text == "critical"
    _no_errors(driver)


def test_node_page_links_its_jobs(site):
    driver = _open(site, "/node?node=n02&range=7d", ids.NODE_RUNS)
    assert "r01" in text_of(driver, ids.NODE_SUMMARY)
    assert "GPU has fallen off the bus" in text_of(driver, ids.NODE_EVENTS)
    save_screenshot(driver, "node")
    link = driver.find_element("css selector", f"#{ids.NODE_RUNS} a[href='/jobs/1001']")
    link.click()
    wait_until(lambda: "/jobs/1001" in driver.current_url, what="the job page")
    _no_errors(driver)


def test_a_filter_change_keeps_the_node(site):
    driver = _open(site, "/node?node=n02", ids.NODE_RUNS)
    shown(driver, f"#{ids.FILTER_RANGE}").click()
    option = wait_until(lambda: [o for o in driver.find_elements(
        "css selector", "[role=option]") if o.text == "Last 7 days"], what="range options")
    option[0].click()
    wait_until(lambda: "range=7d" in driver.current_url, what="range=7d in the URL")
    assert "node=n02" in driver.current_url
    wait_until(lambda: text_of(driver, ids.updated("node")).startswith("Last 7 days"),
               what="the node page for the new range")
    _no_errors(driver)


def _column(driver, table_id: str, column: str) -> list[str]:
    return [c.text for c in driver.find_elements(
        "css selector", f"#{table_id} td[data-dash-column='{column}']")]


def test_tables_sort_as_numbers_and_export_csv(site):
    driver = _open(site, "/jobs?range=7d", ids.JOBS_TABLE)
    table = ids.JOBS_TABLE + "-table"
    sort = driver.find_element(
        "css selector", f"#{table} th[data-dash-column='gpu_h'] .column-header--sort")
    sort.click()  # ascending
    wait_until(lambda: _column(driver, table, "gpu_h") == sorted(
        _column(driver, table, "gpu_h"), key=lambda t: float(t.split()[0].replace(",", ""))),
        what="rows in ascending GPU-hours")
    values = [float(t.split()[0].replace(",", "")) for t in _column(driver, table, "gpu_h")]
    assert values == sorted(values) and values[0] < values[-1]
    assert all(t.endswith(" GPU·h") for t in _column(driver, table, "gpu_h"))
    _, _, downloads = site
    driver.find_element("css selector", f"#{table} .export").click()
    files = wait_until(lambda: [p for p in downloads.iterdir() if p.suffix == ".csv"],
                       what="the exported CSV")
    time.sleep(0.5)  # the browser finishes writing the file
    with files[0].open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(values) and "GPU-hours" in rows[0]
    assert sorted(float(r["GPU-hours"]) for r in rows) == pytest.approx(values, abs=0.06)
    _no_errors(driver)


def test_tables_filter_in_the_browser(site):
    driver = _open(site, "/jobs?range=7d", ids.JOBS_TABLE)
    table = ids.JOBS_TABLE + "-table"
    before = len(_column(driver, table, "user_name"))
    box = driver.find_element(
        "css selector", f"#{table} th.dash-filter[data-dash-column='user_name'] input")
    box.send_keys("alice\n")
    wait_until(lambda: set(_column(driver, table, "user_name")) == {"alice"},
               what="only alice's jobs")
    assert len(_column(driver, table, "user_name")) < before
    _no_errors(driver)


def test_iso_week_in_the_url(site):
    driver = _open(site, "/utilization?week=2026-W47", ids.updated("utilization"))
    wait_until(lambda: text_of(driver, ids.updated("utilization")).startswith(
        "Week 2026-W47"), what="the week's label")
    assert shown(driver, f"#{ids.FILTER_WEEK}").is_displayed()
    thermal = driver.find_element("css selector", ".nav-link[href^='/thermal']")
    assert thermal.get_attribute("href").endswith("/thermal?week=2026-W47")
    _no_errors(driver)
