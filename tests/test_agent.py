"""gpulens agent: NVML readings at /metrics in dcgm-exporter's format, read back by the
dcgm collector exactly like a real exporter."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import requests
from click.testing import CliRunner

from collector.agent import Agent
from collector.nvml import NvmlSource
from collector.scrape import DcgmScrapeSource
from gpulens.cli_agent import agent as agent_command
from tests.support.fake_pynvml import FakeNvml

FIXTURE = Path(__file__).parent / "fixtures" / "nvml" / "h100_hgx.json"


def test_agent_serves_what_the_scraper_reads():
    nvml = FakeNvml.load(FIXTURE)
    agent = Agent(NvmlSource("hgx7", interval_s=60, nvml=nvml), host="127.0.0.1", port=0)
    url = agent.start()
    try:
        text = requests.get(url, timeout=5).text
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-' in text
        assert 'Hostname="hgx7"' in text and 'modelName="NVIDIA H100 80GB HBM3"' in text
        nvml.push_xid(2, 79)
        agent.read_once()
        src = DcgmScrapeSource(url.split("//")[1].split("/")[0], interval_s=15)
        ts = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        s = {r["gpu_index"]: r for r in dict(src.collect(ts))["samples"].to_pylist()}
        assert len(s) == 8 and s[3]["node"] == "hgx7"
        assert abs(s[3]["power_w"] - 689.001) < 1e-3 and s[3]["throttle_thermal"] is True
        assert s[2]["xid_last"] == 79 and s[2]["throttle_power"] is True
        assert s[0]["energy_j"] == 812345678.901
    finally:
        agent.stop()


def test_cli_says_what_to_do_without_a_driver(monkeypatch):
    import collector.nvml as nvml_module

    def broken(*a, **k):
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(nvml_module.NvmlReader, "__init__", broken)
    result = CliRunner().invoke(agent_command, ["--port", "0"])
    assert result.exit_code != 0 and "NVIDIA driver" in result.output
