"""Issue #13 in headless Chromium against `gpulens demo` in a subprocess, with a login:
the pages run under the Content-Security-Policy without a violation, Dash's callbacks
pass the CSRF check (the renderer copies the token cookie into X-CSRFToken), and the
log-out button ends the session."""

from __future__ import annotations

import pytest

from dashboard import auth, ids
from tests.support.browser import chromium, console_errors, graph_figure, wait_until
from tests.support.integration import ServiceProcess

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-security")
    config = tmp / "gpulens.toml"
    config.write_text(f"""
[dashboard]
users = "alice:{auth.hash_password('alice-pw', method='pbkdf2')}"
operators = "alice"
""")
    svc = ServiceProcess(tmp / "demo.duckdb", "--config", str(config), "--history-days",
                         "0.1", "--racks", "1")
    yield svc.url
    svc.stop()


def _all_console(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser")]


def test_pages_run_under_the_csp_with_login_and_logout(service):
    with chromium() as driver:
        driver.get(service + "/thermal")
        wait_until(lambda: driver.find_element("id", "login-form"), what="the login form")
        driver.find_element("id", "username").send_keys("alice")
        driver.find_element("id", "password").send_keys("alice-pw")
        driver.find_element("id", "login-submit").click()
        wait_until(lambda: driver.current_url.endswith("/thermal"), what="back on /thermal")
        # a figure drawn from a callback: POST /_dash-update-component passed the CSRF check
        wait_until(lambda: (f := graph_figure(driver, ids.THERMAL_FLOOR)) and f["data"],
                   timeout_s=60, what="the floor map")
        messages = _all_console(driver)
        for path, graph in (("/", ids.OVERVIEW_FLOOR_MAP), ("/utilization", ids.UTIL_OVER_TIME)):
            driver.get(service + path)
            wait_until(lambda g=graph: (f := graph_figure(driver, g)) and f["data"],
                       timeout_s=60, what=f"a figure on {path}")
            messages += _all_console(driver)
        assert [m for m in messages if "Content Security Policy" in m] == []
        assert [m for m in messages if "CSRF" in m or " 403 " in m or " 400 " in m] == []
        assert console_errors(driver) == []
        badge = driver.find_element("id", ids.USER).text
        assert "alice" in badge and "operator" in badge
        driver.find_element("css selector", ".user-logout").click()
        wait_until(lambda: "/login" in driver.current_url, what="the login page")
        driver.get(service + "/thermal")
        wait_until(lambda: driver.find_element("id", "login-form"), what="logged out")
