"""The rule tuner in headless Chromium (issue 22), logged in through the form: an operator
raises rack_cooling's threshold above the seeded cooling failure, sees its firing go away,
saves, and the configuration file and the service's rules hold the new value; a viewer
backtests but cannot save and sees no acknowledge/silence buttons. No console errors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerts.runtime import AlertRuntime
from dashboard import auth, ids
from gpulens.config import load
from tests.support.browser import LiveServer, chromium, console_errors, wait_until
from tests.support.tuner import PASSWORD, seed_incident, write_config
from warehouse import Warehouse, alerts_store

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]  # ~75 s


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(base url, configuration file, service) over the seeded incident, with a login."""
    from dashboard.app import create_app
    from gpulens.service import Service

    tmp = tmp_path_factory.mktemp("tuner-browser")
    db = tmp / "w.duckdb"
    path = write_config(tmp / "gpulens.toml", db)
    config = load(path, env={})
    with Warehouse(str(db)) as wh:
        now = seed_incident(wh)
        wh.write(lambda con: alerts_store.save_evaluation(
            con, alerts=[_firing(now)], dropped=[], groups=[], outbox=[])).result()
        service = Service(config)  # its rules reload as in gpulens serve
        service.alerts = AlertRuntime(wh, config, now=lambda: now)
        app = create_app(wh, refresh_s=600, now=lambda: now,
                         auth_config=auth.AuthConfig.from_settings(config), config=config,
                         rules_saved=service._rules_saved)
        with LiveServer(app) as server:
            yield server.url.rstrip("/"), path, service


def _firing(now) -> dict:
    """One firing rack_cooling alert on r2 (for the alert list's buttons)."""
    return {"alert_id": "a1", "fingerprint": "rack_cooling:r2", "rule": "rack_cooling",
            "severity": "critical", "scope": "rack", "rack": "r2", "node": None,
            "gpu_index": None, "group_key": "rack_cooling/r2", "state": "firing",
            "value": 6.5, "peak": 6.5, "threshold": 4.0, "unit": "C",
            "active_since": now - timedelta(minutes=5),
            "fired_at": now - timedelta(minutes=4), "last_eval": now}


def _login(driver, base: str, user: str) -> None:
    driver.get(base + "/thermal")
    wait_until(lambda: driver.find_element("id", "login-form"), what="the login form")
    driver.find_element("id", "username").send_keys(user)
    driver.find_element("id", "password").send_keys(PASSWORD)
    driver.find_element("id", "login-submit").click()
    wait_until(lambda: driver.current_url.endswith("/thermal"), what="back on /thermal")
    wait_until(lambda: "rack_cooling (critical" in driver.find_element(
        "id", ids.TUNER_CURRENT).text, timeout_s=30, what="the tuner's rule")


def _type(driver, element_id: str, value: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("id", element_id)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(value, Keys.TAB)


def _backtest(driver) -> tuple[int, int]:
    """Click Backtest and wait for the totals; (firings, pages)."""
    old = driver.find_elements("id", "tuner-totals")
    driver.find_element("id", ids.TUNER_RUN).click()
    if old:
        wait_until(lambda: not driver.find_elements("id", "tuner-totals")
                   or driver.find_element("id", "tuner-totals") != old[0],
                   timeout_s=60, what="the next result")
    totals = wait_until(lambda: driver.find_element("id", "tuner-totals"), timeout_s=120,
                        what="the backtest's totals")
    return int(totals.get_attribute("data-firings")), int(totals.get_attribute("data-pages"))


def test_an_operator_tunes_backtests_and_saves(site):
    base, path, service = site
    with chromium() as driver:
        _login(driver, base, "alice")
        assert driver.find_element("id", ids.TUNER_SAVE).is_enabled()
        wait_until(lambda: driver.find_elements("css selector", ".alert-row .btn"),
                   what="the operator's acknowledge and silence buttons")
        assert _backtest(driver) == (1, 1)  # the seeded cooling failure of r2, one page
        assert "r2" in driver.find_element("id", "tuner-per-rack").text
        _type(driver, "tuner-field-threshold", "30")
        assert _backtest(driver) == (0, 0)
        driver.find_element("id", ids.TUNER_SAVE).click()
        said = wait_until(lambda: driver.find_element("id", ids.TUNER_SAVE_MSG).text,
                          timeout_s=30, what="the save message")
        assert said.startswith("Saved rack_cooling") and "reloaded its rules" in said, said
        assert console_errors(driver) == []
    assert load(path, env={})["alerts.rack_cooling.threshold"] == 30.0
    assert "# kept as it was" in path.read_text()
    [rule] = [r for r in service.alerts.rules if r.name == "rack_cooling"]
    assert rule.threshold == 30.0


def test_a_viewer_backtests_but_cannot_save(site):
    base, path, _ = site
    before = path.read_text()
    with chromium() as driver:
        _login(driver, base, "bob")
        save = driver.find_element("id", ids.TUNER_SAVE)
        assert not save.is_enabled()
        assert "bob is a viewer: you can backtest" in driver.find_element(
            "tag name", "body").text
        assert _backtest(driver) in ((1, 1), (0, 0))  # before or after the operator's save
        driver.execute_script("arguments[0].click();", save)  # a disabled button does nothing
        assert driver.find_element("id", ids.TUNER_SAVE_MSG).text == ""
        # the seeded firing alert is listed, without acknowledge and silence buttons
        wait_until(lambda: driver.find_elements("css selector", ".alert-row"),
                   what="the alert list")
        assert not driver.find_elements("css selector", ".alert-row .btn")
        assert console_errors(driver) == []
    assert path.read_text() == before
