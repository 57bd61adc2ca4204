"""Two real gpulens services feed one lake, and the fleet view reads both (issue 18).

Each ``gpulens demo`` simulates its own cluster (its own cluster.name and infrastructure
failure rate) and writes the shared lake with its scheduled lake job once its history is
written; ``gpulens fleet`` then serves both clusters."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests

from dashboard.fleet_app import render
from tests.support.integration import ROOT, ServiceProcess
from warehouse.analytics import Options
from warehouse.clock import utcnow
from warehouse.queries.lake_fleet import Lake

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # two demo services: ~1-2 min

RATES = {"sim-a": 5000.0, "sim-b": 0.0}  # infrastructure failures per 1,000 node-days


def _lake_written(svc: ServiceProcess, deadline: float) -> dict:
    while (state := requests.get(svc.url + "/healthz", timeout=5).json()["lake"])[
            "last_run"] is None:
        assert time.monotonic() < deadline, f"no scheduled lake export: {state}"
        time.sleep(0.5)
    return state


def test_two_services_feed_the_lake_and_the_fleet_view_shows_both(tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    monkeypatch.setenv("GPULENS_LAKE_DIR", str(lake))
    services = []
    try:
        for name, rate in RATES.items():
            monkeypatch.setenv("GPULENS_CLUSTER_NAME", name)
            monkeypatch.setenv("GPULENS_SIMULATOR_INFRA_FAILURES_PER_1000_NODE_DAYS", str(rate))
            (tmp_path / name).mkdir()
            services.append(ServiceProcess(tmp_path / name / "demo.duckdb", "--history-days",
                                           "0.5", "--racks", "1", "--seed", str(len(services))))
        deadline = time.monotonic() + 240
        for svc in services:
            state = _lake_written(svc, deadline)
            assert not state["failing"] and state["last_run"]["days_written"] > 0, state
        assert sorted(Lake(lake).clusters()) == sorted(RATES)
        _, names, table, errors, rate_fig, *_ = render(
            Lake(lake), "?range=7d", utcnow(), Options(large_job_gpus=8))
        assert errors == [] and names == "2 clusters: sim-a, sim-b"
        assert sorted(row["cluster"] for row in table.children[0].data) == sorted(RATES)
        points = dict(zip(rate_fig.data[0].x, zip(rate_fig.data[0].y,
                                                 rate_fig.data[0].error_y.arrayminus,
                                                 rate_fig.data[0].error_y.array,
                                                 strict=True), strict=True))
        (a, a_minus, _), (b, _, b_plus) = points["sim-a"], points["sim-b"]
        assert b == 0 and a - a_minus > b + b_plus, points  # intervals apart

        # and `gpulens fleet` serves that lake while the services keep writing it
        proc = subprocess.Popen([sys.executable, "-m", "gpulens.cli", "fleet", "--lake",
                                 str(lake), "--port", "0"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            line = proc.stdout.readline()
            assert "2 clusters: sim-a, sim-b" in line, line
            url = line.split("serving ")[1].split()[0]
            assert requests.get(url + "healthz", timeout=10).status_code == 200
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    finally:
        codes = [svc.stop() for svc in services]
    assert codes == [0] * len(services), ["".join(s.output)[-2000:] for s in services]
