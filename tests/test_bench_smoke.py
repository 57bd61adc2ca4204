"""Tiny runs of bench/vs_prometheus.py and bench/scale.py: their correctness checks
(gpulens and Prometheus agree on every question; the scale run's pipeline holds
together) at a size that takes seconds."""

from __future__ import annotations

import shutil

import pytest


@pytest.mark.skipif(shutil.which("promtool") is None or shutil.which("prometheus") is None,
                    reason="needs Debian's prometheus package (apt-get install prometheus)")
def test_vs_prometheus_answers_agree(tmp_path, capsys):
    from bench import vs_prometheus

    rc = vs_prometheus.main(["--racks", "1", "--days", "1", "--interval", "60",
                             "--repeat", "1", "--workdir", str(tmp_path / "new" / "dir")])
    out = capsys.readouterr().out
    assert rc == 0, out  # a --workdir that did not exist is created (issue 17)
    assert out.count("agree? yes") == 5, out
    assert "Prometheus / gpulens" in out and "storage for the same data" in out
    # bytes per sample per tier, and the target printed as measured / target / met
    for tier in ("raw (gpu_samples)", "1-minute (gpu_samples_1m)", "1-hour (gpu_samples_1h)",
                 "1-minute per node (gpu_nodes_1m)", "free blocks", "Prometheus, TSDB blocks"):
        assert tier in out, out
    assert "bytes per sample, all tiers, file" in out and "(Prometheus)" in out, out
    # the question targets too: live >= 1x Prometheus, historical >= 30x
    assert out.count(": Prometheus / gpulens") == 5 and ">= 30x" in out, out


def test_collect_pull_comparison_times_live_pulls_only(tmp_path, monkeypatch, capsys):
    """Every timed pull of bench/collect.py is its mode's live pull (a /federate GET or
    an instant query per field), never range queries catching up a gap: each source
    pulls its own consecutive intervals. Only the default mode's pulls are judged
    against the target; the other is printed for the comparison."""
    from bench import collect
    from collector.prometheus import PrometheusSource
    from warehouse import Warehouse

    seen, real = [], PrometheusSource.collect

    def collect_once(self, ts):
        window = self.window(ts)
        seen.append((self.pull, window is not None and window[0] == window[1]))
        return real(self, ts)

    monkeypatch.setattr(PrometheusSource, "collect", collect_once)
    wh = Warehouse(tmp_path / "b.duckdb")
    try:
        collect.pull_comparison(2, wh, ("federate", "query"), repeat=2)
    finally:
        wh.close()
    timed = seen[2:]  # after each source's warm-up pull
    assert len(timed) == 6 and all(live for _, live in timed), timed
    rows = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()
            if line.startswith("one pull of 16 GPUs")}
    assert set(rows) == {f"one pull of 16 GPUs, {m}" for m in
                         ("federate", "federate, series new", "query")}, rows
    assert rows["one pull of 16 GPUs, query"].rstrip().endswith("not the default  n/a")
    for mode in ("federate", "federate, series new"):  # the default's: judged
        assert rows[f"one pull of 16 GPUs, {mode}"].rstrip().endswith(("yes", "NO")), rows


def test_scale_pipeline_runs(tmp_path, capfd):
    from bench import scale

    rc = scale.main(["--racks", "1", "--live-minutes", "1", "--history-days", "0.5",
                     "--minute-hours", "2", "--runs", "1", "--ranges", "24h",
                     "--workdir", str(tmp_path / "not" / "there")])
    out = capfd.readouterr().out  # the service's child process writes to the same fd
    assert rc == 0, out  # a --workdir that did not exist is created, as vs_prometheus's
    # the service's figures are printed as measured, before the table at the end
    table = out.index("collection cycle (parse -> committed)")
    for step in ("] live path: 4 cycles; cycle median", "] analytics refresh: the first",
                 "] weekly report: "):
        assert -1 < out.find(step) < table, out
    assert "collection cycle, p95" in out and "dashboard callbacks" in out
    assert " error " not in out, out  # every page callback answered
    targets = out[out.index("\ntargets"):]  # every target as measured / target / met
    for figure in ("collection cycle, p95", "dashboard callbacks, worst p95",
                   "weekly report (build + HTML)", "peak RSS of the service's process"):
        assert figure in targets, targets
    assert "measured" in targets and "met" in targets


def test_scale_keeps_its_warehouse_and_times_callbacks_on_it(tmp_path, capsys):
    """--keep FILE: the first run builds and keeps the warehouse; the next times only the
    callbacks --only names on it, with their CPU time."""
    from bench import scale

    kept = tmp_path / "kept.duckdb"
    tiny = ["--racks", "1", "--live-minutes", "1", "--history-days", "0.25",
            "--minute-hours", "1", "--runs", "1", "--ranges", "24h", "--no-report",
            "--keep", str(kept), "--only", "overview headline"]
    assert scale.main(tiny) == 0
    assert kept.exists()
    capsys.readouterr()
    assert scale.main(tiny[:-2] + ["--only", "energy over"]) == 0
    out = capsys.readouterr().out
    assert "history:" not in out and "CPU p50" in out
    assert "over time + PUE" in out and "headline" not in out
    assert "callbacks over 300 ms (p95):" in out
    assert "peak RSS of the service's process (open, callbacks): " in out, out


def test_alert_quality_prints_measured_target_met(capsys):
    from bench import alert_quality

    alert_quality.main(["--days", "0.05", "--sizes", "256"])
    out = capsys.readouterr().out
    assert "alert quality: 256 GPUs" in out, out
    for name in ("recall", "false pages / week / 1,000 GPUs", "median time to page",
                 "pages per rack incident"):
        assert name in out, out
    assert "measured" in out and "target" in out and "met" in out


def test_a_spawned_service_process_reports_its_own_peak_rss():
    """bench/scale.py's service process judges its own peak RSS against 1 GiB, not the
    bench's: ru_maxrss starts a fork + exec child at its parent's high-water mark, even
    one the parent freed (a second reader's case: 756 MiB for a child that did nothing)."""
    import os

    from bench import scale

    ballast = bytearray(600 * 2**20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    del ballast
    _, rss = scale.in_child(os.getpid)
    assert rss < 400 * 2**20, f"child peak RSS {rss / 2**20:.0f} MiB"


def test_a_step_s_own_peak_rss_starts_from_the_rss_it_found():
    """bench/scale.py reports each step's own peak: the peak is reset from the RSS of the
    moment, so 300 MiB touched and freed before is not the next step's."""
    from bench.common import peak_rss_bytes, reset_peak_rss

    ballast = bytearray(300 * 2**20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    del ballast
    before = peak_rss_bytes()
    if not reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    assert peak_rss_bytes() <= before - 250 * 2**20


def test_scale_judges_the_largest_step_s_own_peak(monkeypatch, capsys):
    """With each step's peak its own, the process's peak is the largest of them, not the
    last step's (the service's process reports the callbacks' peak at its end)."""
    targets = _scale_targets(monkeypatch, capsys, [
        ("overview", "headline", "24h", 0.05, 0.06, 0.04)], 0.25,
        peaks={"live path": 1200 * 2**20, "callbacks": 100 * 2**20})
    row = [line for line in targets.splitlines() if "peak RSS" in line]
    assert len(row) == 1 and "1.2 GiB" in row[0] and row[0].rstrip().endswith("NO"), targets


def _scale_targets(monkeypatch, capsys, cbs, history_days, peaks=None):
    """bench/scale.py's targets table for a service part that answered ``cbs`` (the
    history and the service's process replaced by their results)."""
    import types

    import pandas as pd

    from bench import scale

    class Pool:
        def __init__(self, n):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def apply(self, fn, args):
            return {"rows": 1, "write_s": 0.0, "rollup_s": 0.0, "minute_rows": 1,
                    "hour_rows": 1}

    monkeypatch.setattr(scale.mp, "get_context", lambda kind: types.SimpleNamespace(Pool=Pool))
    sv = {"lv": {"cycles": 1, "cycle_s": [0.5], "rollup_s": [0.1], "alert_s": [0.1],
                 "render_s": [1.0], "lines": 1, "gpus": 64, "fired": []},
          "cbs": cbs, "report_s": 1.0, "report": "1.0 s", "s_sched": 0.1, "sched_rows": 1,
          "s_refresh": 0.1,
          "backfill": [0.0, 0], "tiers": pd.DataFrame({"table": ["t"], "rows": [1],
                                                       "bytes": [1]}),
          "size": 1, "rss_before_live": 1, "peaks": peaks or {}, "own_peaks": True}
    monkeypatch.setattr(scale, "in_child", lambda fn, *a: (sv, 100 * 2**20))
    assert scale.main(["--racks", "1", "--live-minutes", "1", "--history-days",
                       str(history_days), "--runs", "1", "--ranges", "24h"]) == 0
    out = capsys.readouterr().out
    return out[out.index("\ntargets"):]


def test_scale_judges_a_callback_that_raised_not_met(monkeypatch, capsys):
    """A page callback that raised was never measured: neither callback target is met
    (they were 'yes' over the callbacks that answered; a second reader's case)."""
    targets = _scale_targets(monkeypatch, capsys, [
        ("overview", "headline", "24h", 0.05, 0.06, 0.04),
        ("energy", "over time", "24h", None, "OutOfMemoryException: ...", None)], 0.25)
    rows = [line for line in targets.splitlines() if "dashboard callbacks" in line]
    assert len(rows) == 2 and all(line.rstrip().endswith("NO") for line in rows), targets
    assert "1 raised: energy over time 24h" in targets, targets


def test_scale_judges_the_report_only_over_whole_weeks(monkeypatch, capsys):
    """The report's target is judged only when the history fills its week and the week
    before (14.5 days before NOW); over a partly filled week it is printed, not judged."""
    cbs = [("overview", "headline", "24h", 0.05, 0.06, 0.04)]
    part = [line for line in _scale_targets(monkeypatch, capsys, cbs, 2).splitlines()
            if "weekly report" in line]
    whole = [line for line in _scale_targets(monkeypatch, capsys, cbs, 14.5).splitlines()
             if "weekly report" in line]
    assert "partly filled" in part[0] and not part[0].rstrip().endswith("yes"), part
    assert whole[0].rstrip().endswith("yes"), whole


def test_the_benches_time_every_data_callback_of_the_dashboard():
    """bench/dashboard.py and bench/scale.py time every callback that reads the warehouse
    (issue 17: the placement, node, drill-down, tensor, slow-GPU and goodput-carbon
    callbacks were never timed); a page added later is timed once it is in the table."""
    from bench import dashboard as bd
    from dashboard.app import create_app
    from warehouse import Warehouse

    with Warehouse(":memory:") as wh:
        app = create_app(wh)
        app.server.test_client().get("/_dash-dependencies")  # claim the page callbacks
        found = bd.registered(app)
        timed = {(fn.__module__, fn.__name__)
                 for fn, _ in bd.callbacks(app, "job-1", "node-1", "rack-1").values()}
    data = {k for k, (_, reads) in found.items() if reads}
    assert ("dashboard.pages.placement", "update_jobs") in data  # the data inputs are seen
    assert ("dashboard.app", "highlight") in set(found) - data  # a URL's, not timed
    assert data - timed == set(), sorted(data - timed)
    assert timed - data == set(), sorted(timed - data)


def test_every_bench_make_runs_starts_as_a_script():
    """`make bench` runs each bench as `python bench/NAME.py`, where bench/ comes first
    on the import path: bench/alerts.py stood in for the `alerts` package and
    bench/analytics.py failed at its imports. Each starts (its --help) from the list."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    names = re.search(r"^BENCHES\s*:=\s*(.+)$", (root / "Makefile").read_text(),
                      re.M).group(1).split()
    assert "analytics" in names and len(names) > 10
    for name in names:
        run = subprocess.run([sys.executable, str(root / "bench" / f"{name}.py"), "--help"],
                             cwd=root, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (name, run.stderr[-500:])
        assert "usage:" in run.stdout, name


def test_scale_writes_history_and_live_path_from_one_world():
    """bench/scale.py's history clusters (sampled every 900 and 60 s) and the live
    path's are one world: the same lemon nodes, hot GPU and jobs' runs. Built with the
    anchor as their live start, the history's clusters drew other lemons, so their jobs
    failed otherwise and the state at NOW overwrote jobs with other jobs' rows (issue 17:
    at 8 racks 8,029 runs against 8,031 three days in)."""
    from datetime import timedelta

    import pandas as pd

    from bench import scale

    config = scale.SimConfig(racks=8, infra_failures_per_1000_node_days=6.5)
    anchor, live = scale.NOW - timedelta(days=7), scale.NOW - timedelta(minutes=60)
    live_path = scale.world(config, anchor, live)
    at = anchor + timedelta(days=3)
    want = live_path.scheduler(at)["runs"].to_pandas()
    for step in (900.0, 60.0):
        history = scale.world(config, anchor, live, interval_s=step)
        assert history.config.interval_s == step
        assert list(history.inc.lemons) == list(live_path.inc.lemons)
        assert history.inc.hot_gpu == live_path.inc.hot_gpu
        pd.testing.assert_frame_equal(history.scheduler(at)["runs"].to_pandas(), want)



def test_scale_history_is_written_from_the_live_paths_world(monkeypatch):
    """_write_history builds each of its clusters through world() with the live path's
    start (not the anchor), and writes up to it."""
    from datetime import timedelta

    from bench import scale
    from warehouse import Warehouse

    seen = []
    real = scale.world

    def spy(config, anchor, live_start, interval_s=None):
        seen.append((live_start, interval_s))
        return real(config, anchor, live_start, interval_s=interval_s)

    monkeypatch.setattr(scale, "world", spy)
    live = scale.NOW - timedelta(minutes=30)
    with Warehouse() as wh:
        scale._write_history(wh, scale.SimConfig(racks=1), scale.NOW - timedelta(hours=2),
                             live, minute_hours=1, coarse_step=900.0)
        last = wh.reader().execute("SELECT max(ts) FROM gpu_samples").fetchone()[0]
    assert seen == [(live, 900.0), (live, 60.0)]
    assert live - timedelta(minutes=1) <= last < live
