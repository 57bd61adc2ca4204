"""The weekly report's schedule under a fake clock, the missed-report catch-up, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from click.testing import CliRunner

from dashboard.report.schedule import JOB_ID, ReportScheduler
from gpulens.cli_report import report as report_cmd
from tests.support.integration import ROOT
from tests.support.report import report_config, seeded_copy
from warehouse import Warehouse, reports_store

# the seeded warehouse holds 2026-11-15 00:00 .. 2026-11-17 12:00 (UTC)
MONDAY_0800_BERLIN = datetime(2026, 11, 23, 7)  # CET is UTC+1


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def scheduler_for(tmp_path, clock, **overrides):
    cfg = report_config(tmp_path, reports__pdf=False, reports__timezone="Europe/Berlin",
                        **overrides)
    wh = Warehouse(seeded_copy(tmp_path))
    return wh, ReportScheduler(wh, cfg, now=clock)


def test_cron_fires_monday_0800_in_the_configured_zone_and_reports_last_week(tmp_path):
    clock = Clock(datetime(2026, 11, 22, 12))  # Sunday noon UTC
    wh, rs = scheduler_for(tmp_path, clock)
    with wh:
        sched = BackgroundScheduler(timezone="UTC")
        rs.install(sched)
        job = sched.get_job(JOB_ID)
        fire = job.trigger.get_next_fire_time(None, clock.now.replace(tzinfo=UTC))
        assert fire.astimezone(UTC).replace(tzinfo=None) == MONDAY_0800_BERLIN
        assert str(fire.tzinfo) == "Europe/Berlin" and fire.hour == 8
        clock.now = MONDAY_0800_BERLIN  # the scheduler calls the job at that time
        out = job.func()
        assert out["week"] == "2026-W47" and reports_store.has_report(wh.reader(), "2026-W47")


def test_a_missed_report_is_made_once_when_the_service_is_back(tmp_path):
    clock = Clock(datetime(2026, 11, 23, 10, 30))  # down at 08:00 Berlin, back at 11:30
    wh, rs = scheduler_for(tmp_path, clock)
    with wh:
        assert rs.last_fire_before(clock.now) == MONDAY_0800_BERLIN
        out = rs.catch_up()
        assert out is not None and out["week"] == "2026-W47"
        assert rs.catch_up() is None  # once
        clock.now = datetime(2026, 11, 23, 6)  # before this Monday's run: W46's was due
        assert rs.last_fire_before(clock.now) == datetime(2026, 11, 16, 7)
        assert rs.catch_up()["week"] == "2026-W46"  # the data hold W46's Sunday


def test_no_catch_up_without_data_or_when_disabled(tmp_path):
    clock = Clock(datetime(2027, 3, 1, 9))  # last fire: a week with no telemetry
    wh, rs = scheduler_for(tmp_path, clock)
    with wh:
        assert rs.catch_up() is None
    wh2, off = scheduler_for(tmp_path / "b", Clock(datetime(2026, 11, 23, 10)),
                             reports__enabled=False)
    with wh2:
        sched = BackgroundScheduler(timezone="UTC")
        off.install(sched)
        assert off.catch_up() is None and sched.get_job(JOB_ID) is None


def test_cli_makes_a_report_from_the_file(tmp_path):
    db = seeded_copy(tmp_path)
    out = tmp_path / "out"
    env = {"GPULENS_REPORTS_PDF": "false"}
    result = CliRunner().invoke(report_cmd, ["--week", "2026-W47", "--db", db, "--out",
                                             str(out), "--url", "http://127.0.0.1:9"],
                                env=env)
    assert result.exit_code == 0, result.output
    assert (out / "gpulens-report-2026-W47.html").exists()
    assert "runs failed" in result.output
    bad = CliRunner().invoke(report_cmd, ["--week", "2026-47"], env=env)
    assert bad.exit_code == 2 and "ISO week like 2026-W47" in bad.output


def test_cli_says_what_to_do_when_a_service_holds_the_file(tmp_path):
    db = seeded_copy(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, duckdb, time; c = duckdb.connect(sys.argv[1]); "
         "print('ok', flush=True); time.sleep(60)", db], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from gpulens.cli_report import report; "
             "report(sys.argv[1:])", "--week", "2026-W47", "--db", db,
             "--url", "http://127.0.0.1:9"],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ})
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1
    assert "held by another process" in done.stderr and "stop the service" in done.stderr
