"""A newcomer's first ten minutes (issue 14): `gpulens serve` without a configuration
points to `gpulens demo`; the demo without Chromium says in one line that the weekly
report is HTML only; the console says how far the history is written, in sentences."""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timedelta

import pytest
import requests

from gpulens import cli
from gpulens.cli import main
from gpulens.config import load
from gpulens.history_progress import HistoryProgress
from tests.support.integration import ServiceProcess
from tests.support.report import WEEK, seeded_copy

MISSING_CHROMIUM = "/nonexistent/gpulens-test/chromium"


def test_serve_without_a_configuration_points_to_the_demo(monkeypatch, capsys):
    monkeypatch.delenv("GPULENS_COLLECT_SOURCE", raising=False)
    started = []
    monkeypatch.setattr(cli, "_run_service", lambda config, **kw: started.append(config))
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--config" in err and "gpulens demo" in err
    assert started == []


def test_serve_configured_with_the_simulator_says_it_is_simulated(tmp_path, monkeypatch,
                                                                  capsys):
    started = []
    monkeypatch.setattr(cli, "_run_service", lambda config, **kw: started.append(config))
    cfg = tmp_path / "g.toml"
    cfg.write_text('[collect]\nsource = "simulator"\n')
    assert main(["serve", "--config", str(cfg)]) == 0
    assert "serves a simulated cluster, not real GPUs" in capsys.readouterr().out
    cfg.write_text('[collect]\nsource = "dcgm"\n[dcgm]\ntargets = "127.0.0.1:9400"\n')
    assert main(["serve", "--config", str(cfg)]) == 0
    assert "simulated" not in capsys.readouterr().out
    assert len(started) == 2


def test_demo_without_chromium_turns_the_pdf_off_in_one_line(capsys):
    config = load(None, env={}).with_overrides(reports__chromium=MISSING_CHROMIUM)
    assert config["reports.pdf"]
    out = cli._pdf_or_html_only(config)
    assert out["reports.pdf"] is False
    said = capsys.readouterr().out.strip()
    assert said.count("\n") == 0 and MISSING_CHROMIUM in said and "HTML only" in said
    assert cli._pdf_or_html_only(out)["reports.pdf"] is False and capsys.readouterr().out == ""



def test_serve_without_chromium_makes_html_reports_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPULENS_REPORTS_CHROMIUM", MISSING_CHROMIUM)
    started = []
    monkeypatch.setattr(cli, "_run_service", lambda config, **kw: started.append(config))
    cfg = tmp_path / "g.toml"
    cfg.write_text('[collect]\nsource = "dcgm"\n[dcgm]\ntargets = "127.0.0.1:9400"\n')
    assert main(["serve", "--config", str(cfg)]) == 0
    assert "HTML only" in capsys.readouterr().out
    assert started[0]["reports.pdf"] is False


def test_report_without_chromium_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPULENS_REPORTS_CHROMIUM", MISSING_CHROMIUM)
    db = seeded_copy(tmp_path)
    assert main(["report", "--week", WEEK, "--db", db, "--out", str(tmp_path / "out"),
                 "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("gpulens: error:"), err
    assert MISSING_CHROMIUM in err and "reports.pdf" in err


def test_history_progress_says_each_day_and_the_end(caplog):
    t0 = datetime(2026, 11, 1)
    clock = iter([100.0, 142.0])
    ranges = [(t0, t0 + timedelta(days=2)), (t0 + timedelta(days=3), t0 + timedelta(days=4))]
    with caplog.at_level(logging.INFO, logger="gpulens.history"):
        p = HistoryProgress(ranges, clock=lambda: next(clock))
        for h in range(6, 49, 6):  # the simulator's 6-h chunks
            p.written_until(0, t0 + timedelta(hours=h))
        p.written_until(1, t0 + timedelta(days=3, hours=12))
        p.written_until(1, t0 + timedelta(days=4))
        p.done()
    assert caplog.messages == [
        "writing 3 days of history (2026-11-01 00:00 to 2026-11-05 00:00 UTC) in the "
        "background; the dashboard fills in as it goes",
        "history: 1 of 3 days written (up to 2026-11-02 00:00 UTC)",
        "history: 2 of 3 days written (up to 2026-11-03 00:00 UTC)",
        "history: 3 of 3 days written (up to 2026-11-05 00:00 UTC)",
        "history done: 3 days written in 42 s; its failures are classified and every "
        "page shows it",
    ]


@pytest.mark.integration
def test_demo_console_without_chromium(tmp_path, monkeypatch):
    """The demo as a newcomer runs it, on a machine without Chromium."""
    monkeypatch.setenv("GPULENS_REPORTS_CHROMIUM", MISSING_CHROMIUM)
    svc = ServiceProcess(tmp_path / "demo.duckdb", "--history-days", "1", "--racks", "1")
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end:
            health = requests.get(svc.url + "/healthz", timeout=5).json()
            if health["backfill"].get("state") in ("done", "failed"):
                break
            time.sleep(0.5)
    finally:
        code = svc.stop()
    log = "".join(svc.output)
    assert code == 0, log
    assert health["backfill"]["state"] == "done", log
    assert "Traceback" not in log, log
    pdf_lines = [line for line in log.splitlines() if "Chromium not found" in line]
    assert len(pdf_lines) == 1 and "HTML only" in pdf_lines[0], log
    assert "writing 1 day of history" in log and "history: 1 of 1 day written" in log, log
    assert "history done: 1 day written" in log, log
    info = [line for line in log.splitlines() if " INFO " in line]
    assert info and not [line for line in info if re.search(r"[{\[]'", line)], info
