"""The grid-intensity providers over HTTP (issue 21), against a local server answering with
the services' documented examples (tests/fixtures/grid/): token and login flows, one
failing provider or reading costing only itself, the providers built from the settings.
The warehouse and a running service: tests/test_grid_warehouse.py."""

import time

import pytest

from collector.grid.electricitymaps import ElectricityMaps
from collector.grid.source import GridSource, build_providers
from collector.grid.ukgrid import UkGrid
from collector.grid.watttime import WattTime
from collector.http import session
from tests.support.grid import EM_TOKEN, NOW, WT_BASIC, WT_PASSWORD, documented_api, fixture


@pytest.fixture
def api():
    server = documented_api()
    yield server
    server.close()


def em(api, token=EM_TOKEN):
    return ElectricityMaps(url=api.url, token=token, zone="DE", timeout_s=5)


def wt(api, clock=time.monotonic):
    return WattTime(url=api.url, username="user", password=WT_PASSWORD, zone="CAISO_NORTH",
                    signal="co2_moer", lookback_h=24, timeout_s=5, clock=clock)


def test_electricity_maps_sends_its_token_and_zone(api):
    out = em(api).fetch(session(), NOW)
    assert [r.g_co2_per_kwh for r in out.readings] == [413.0, 338.0]
    [req] = api.requests
    assert req["query"] == {"zone": ["DE"]} and req["headers"]["auth-token"] == EM_TOKEN


def test_watttime_logs_in_once_and_again_when_the_token_expires(api):
    clock = [0.0]
    provider = wt(api, clock=lambda: clock[0])
    http = session()
    assert len(provider.fetch(http, NOW).readings) == 2
    assert len(provider.fetch(http, NOW).readings) == 2
    paths = [r["path"] for r in api.requests]
    assert paths == ["/login", "/v3/historical", "/v3/historical"]
    q = api.requests[1]["query"]
    assert q["region"] == ["CAISO_NORTH"] and q["signal_type"] == ["co2_moer"]
    assert q["start"] == ["2022-07-14T01:00:00+00:00"] and q["end"] == ["2022-07-15T01:00:00+00:00"]
    clock[0] = 26 * 60  # past the token's 25 minutes: a new login first
    provider.fetch(http, NOW)
    assert [r["path"] for r in api.requests][3:] == ["/login", "/v3/historical"]
    # a token refused early (401) costs one more login, not the cycle
    api.answer("/v3/historical", "watttime_historical.json",
               auth=("Authorization", "Bearer other"))
    api.answer("/login", {"token": "other"}, auth=("Authorization", WT_BASIC))
    assert len(provider.fetch(http, NOW).readings) == 2


def test_uk_asks_the_last_day(api):
    out = UkGrid(url=api.url, lookback_h=24, timeout_s=5).fetch(session(), NOW)
    assert [r.g_co2_per_kwh for r in out.readings] == [263.0]
    assert api.requests[0]["path"] == "/intensity/2022-07-14T01:00Z/2022-07-15T01:00Z"


def test_one_failing_provider_or_reading_costs_only_itself(api):
    doc = fixture("watttime_historical.json")
    doc["data"].append({"point_time": "2022-07-15T00:10:00", "value": 850})  # no zone
    api.answer("/v3/historical", doc, auth=("Authorization", "Bearer <TOKEN>"))
    api.answer("/intensity", b"<html>maintenance</html>", status=503)
    source = GridSource([em(api, token="wrong"), wt(api), UkGrid(url=api.url, lookback_h=1,
                                                                 timeout_s=5)],
                        region="US", interval_s=900)
    [(kind, table)] = source.collect(NOW)
    rows = table.to_pylist()
    assert kind == "grid" and {r["source"] for r in rows} == {"watttime"}
    assert all(r["region"] == "US" and r["fetched_at"] == NOW for r in rows) and len(rows) == 2
    assert source.targets_down == {"electricitymaps": "GET /v3/carbon-intensity/history: "
                                   "HTTP 401", "ukgrid": "GET /intensity: HTTP 503"}
    assert source.dropped.as_dict() == {"reading: watttime": 1}
    state = source.providers()
    assert state["watttime"]["readings"] == 2 and state["watttime"]["last_error"] is None
    assert "no time zone" in state["watttime"]["last_rejected"]
    assert state["electricitymaps"]["zone"] == "DE" and state["electricitymaps"][
        "last_success"] is None
    # the UK answered nonsense before, now it answers: it is up again
    api.answer("/intensity", "ukgrid_intensity.json")
    source.collect(NOW)
    assert set(source.targets_down) == {"electricitymaps"}
    # every provider failing fails the cycle (the service then backs it off)
    api.answer("/v3/historical", b"{}", status=500)
    api.answer("/intensity", b"{}", status=500)
    with pytest.raises(RuntimeError, match="every grid provider failed"):
        source.collect(NOW)


def test_providers_from_configuration():
    from gpulens.config import load

    cfg = load(None, env={"GPULENS_GRID_PROVIDERS": "ukgrid, electricitymaps",
                          "GPULENS_CARBON_REGION": "DE"})
    providers = build_providers(cfg.section("grid"), region="DE")
    assert [(p.name, p.zone) for p in providers] == [("ukgrid", "GB"),
                                                     ("electricitymaps", "DE")]
    cfg = load(None, env={"GPULENS_GRID_PROVIDERS": "watttime"})
    with pytest.raises(ValueError, match="watttime: no region"):
        build_providers(cfg.section("grid"), region="")
