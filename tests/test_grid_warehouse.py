"""The grid source into the warehouse and in a running service (issue 21): readings land in
grid_intensity with their source and fetch time, asked again without duplicates; a
service asks the providers of grid.providers against a local server answering with the
services' documented examples, shows each provider in /healthz and keeps the
credentials out of its answers and logs."""

import json
import logging
import time
import urllib.error
import urllib.request

import pytest

from collector.grid.electricitymaps import ElectricityMaps
from collector.grid.source import GridSource
from collector.grid.watttime import WattTime
from tests.support.grid import EM_TOKEN, NOW, WT_BASIC, WT_PASSWORD, documented_api


@pytest.fixture
def api():
    server = documented_api()
    yield server
    server.close()


def em(api):
    return ElectricityMaps(url=api.url, token=EM_TOKEN, zone="DE", timeout_s=5)


def wt(api):
    return WattTime(url=api.url, username="user", password=WT_PASSWORD, zone="CAISO_NORTH",
                    signal="co2_moer", lookback_h=24, timeout_s=5)


def test_readings_land_in_the_warehouse_with_their_source(api, wh):
    source = GridSource([em(api), wt(api)], region="DE", interval_s=900)
    for kind, table in source.collect(NOW):
        wh.ingest(kind, table).result()
    for kind, table in source.collect(NOW):  # asked again: no duplicates
        wh.ingest(kind, table).result()
    rows = wh.reader().execute("SELECT source, count(*), min(fetched_at) FROM grid_intensity "
                               "GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("electricitymaps", 2, NOW), ("watttime", 2, NOW)]


def _healthz(url: str) -> dict:
    try:
        with urllib.request.urlopen(url + "healthz", timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:  # 503 while degraded: the body is the same
        return json.load(exc)


def test_a_running_service_fetches_and_reports_each_provider(api, tmp_path, caplog):
    from gpulens.config import load
    from gpulens.service import Service

    api.answer("/intensity", b"not json", status=200)
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(
        f'[service]\nport = 0\ndb = "{tmp_path / "w.duckdb"}"\n'
        '[simulator]\nracks = 1\nnodes_per_rack = 1\nhistory_days = 0\n'
        f'[carbon]\nregion = "DE"\n'
        f'[grid]\nproviders = "electricitymaps,watttime,ukgrid"\nelectricitymaps_url = '
        f'"{api.url}"\nwatttime_url = "{api.url}"\nukgrid_url = "{api.url}"\n'
        'watttime_username = "user"\nwatttime_region = "CAISO_NORTH"\n')
    env = {"GPULENS_GRID_ELECTRICITYMAPS_TOKEN": EM_TOKEN,
           "GPULENS_GRID_WATTTIME_PASSWORD": WT_PASSWORD}
    caplog.set_level(logging.DEBUG)
    svc = Service(load(cfg, env=env))
    url = svc.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            grid = _healthz(url)["sources"].get("grid", {})
            if grid.get("last_success"):
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"no grid cycle: {grid}")
        stored = svc.warehouse.reader().execute(
            "SELECT DISTINCT source, region FROM grid_intensity ORDER BY 1").fetchall()
        text = json.dumps(_healthz(url))
    finally:
        svc.shutdown()
    assert stored == [("electricitymaps", "DE"), ("watttime", "DE")]
    providers = grid["providers"]
    assert providers["electricitymaps"]["readings"] == 2
    assert providers["watttime"]["zone"] == "CAISO_NORTH"
    assert providers["ukgrid"]["last_error"].startswith("/intensity: not JSON")
    assert grid["targets"]["down"] == {"ukgrid": providers["ukgrid"]["last_error"]}
    # the credentials are in no answer and no log line
    for secret in (EM_TOKEN, WT_PASSWORD, WT_BASIC.split()[1]):
        assert secret not in text and secret not in caplog.text
