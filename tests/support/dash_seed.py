"""Seeded warehouses shared by the dashboard tests (unit, callback and browser).

- :func:`seed_overview`: the hand-built 4-GPU cluster whose numbers
  tests/test_overview_queries.py works out by hand (NOW = Wed 2026-11-18 12:00 UTC).
- :func:`seed_dashboard`: a 32-GPU cluster with two days of 1-minute telemetry rolled up
  as the service does, jobs with requeues and failures, GPU events, failure rows and a
  carbon-intensity series, for every page (see its docstring for what is where).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from warehouse import Warehouse

NOW = datetime(2026, 11, 18, 12, 0, 0)
XSS_NAME = "<img src=x onerror=alert(1)>"


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def seed_overview(wh: Warehouse, now: datetime = NOW) -> None:
    """Write the small cluster of tests/test_overview_queries.py's docstring into ``wh``."""
    s = timedelta(seconds=1)
    batches = {
        "racks": pd.DataFrame(
            {"rack": ["r01", "r02", "r03"], "zone": ["A", "A", "B"], "row": [1, 1, 2],
             "x": [0.0, 1.0, 0.0], "y": [0.0, 0.0, 1.0]}
        ),
        "nodes": pd.DataFrame(
            {"node": ["n1", "n2"], "rack": ["r01", "r02"], "partition": ["gpu", "gpu"],
             "gpus": [2, 2]}
        ),
        "gpus": pd.DataFrame(
            {"gpu_uuid": ["GPU-a", "GPU-b", "GPU-c", "GPU-d"],
             "node": ["n1", "n1", "n2", "n2"], "gpu_index": [0, 1, 0, 1],
             "model": ["H100"] * 4, "tdp_w": [700.0] * 4, "memory_mib": [81559.0] * 4}
        ),
        "samples": pd.DataFrame(
            {"ts": [now - 90 * s, now - 30 * s, now - 15 * s, now - 10 * s, now + 10 * s,
                    now - 300 * s],
             "node": ["n1", "n1", "n1", "n2", "n2", "n2"],
             "gpu_index": [0, 0, 1, 0, 0, 1],
             "util_pct": [50.0, 80.0, 40.0, 100.0, 0.0, 10.0],
             "power_w": [300.0, 400.0, 200.0, 500.0, 900.0, 100.0],
             "temp_c": [60.0, 70.0, 65.0, 55.0, 99.0, 90.0],
             "interval_s": [15.0] * 6}
        ),
        "jobs": pd.DataFrame(
            {"job_id": ["A", "B", "C", "D", "E", "F", "G", "H", "I", "K"],
             "user_name": ["alice"] * 10,
             "gpus": [2, 1, 1, 1, 8, 4, 2, 2, 1, 2]}
        ),
        "runs": pd.DataFrame(
            [
                ("A", 0, _t("2026-11-17 08:00"), _t("2026-11-17 11:00"), "FAILED", 2),
                ("A", 1, _t("2026-11-17 11:30"), None, "RUNNING", 2),
                ("B", 0, now - timedelta(hours=2), None, "RUNNING", 1),
                ("E", 0, _t("2026-11-18 09:00"), _t("2026-11-18 09:30"), "NODE_FAIL", 8),
                ("E", 1, _t("2026-11-18 10:30"), None, "RUNNING", 8),
                ("F", 0, _t("2026-11-17 20:00"), _t("2026-11-18 02:00"), "TIMEOUT", 4),
                ("G", 0, _t("2026-11-15 20:00"), _t("2026-11-15 23:00"), "FAILED", 2),
                ("H", 0, _t("2026-11-17 01:00"), _t("2026-11-17 05:00"), "COMPLETED", 2),
                ("I", 0, _t("2026-11-18 11:00"), _t("2026-11-18 11:15"), "OUT_OF_MEMORY",
                 None),
                ("K", 0, _t("2026-11-18 11:00"), now, "FAILED", 2),
            ],
            columns=["job_id", "run_index", "start_ts", "end_ts", "state", "gpus"],
        ),
        "allocations": pd.DataFrame(
            [
                ("A", 1, "n1", 0, _t("2026-11-17 11:30"), None),
                ("A", 1, "n1", 1, _t("2026-11-17 11:30"), None),
                ("B", 0, "n2", 1, now - timedelta(hours=2), None),
                ("C", 0, "n2", 0, now - timedelta(hours=1), now - timedelta(minutes=5)),
                ("D", 0, "n2", 0, now + timedelta(hours=1), None),
            ],
            columns=["job_id", "run_index", "node", "gpu_index", "start_ts", "end_ts"],
        ),
    }
    # the first telemetry, before every run: the observed history covers them all
    first = pd.DataFrame({"ts": [datetime(2026, 11, 15)], "node": ["n1"], "gpu_index": [0],
                          "util_pct": [0.0], "power_w": [60.0], "temp_c": [30.0],
                          "interval_s": [15.0]})
    batches["samples"] = pd.concat([first, batches["samples"]], ignore_index=True)
    for kind, frame in batches.items():
        wh.ingest(kind, frame).result()
    from warehouse.analytics import refresh  # failures classified as the service does

    wh.write(lambda con: refresh(con, now)).result()


#: seed_dashboard's jobs: id -> (name, user, type, partition, state, gpus as
#: [(node, gpu_index)...] per run, runs as [(start_h, end_h or None, state)], util %).
#: Hours are relative to NOW (negative = past).
def _gpus(nodes: list[str], per_node: int = 4, first: int = 0) -> list[tuple[str, int]]:
    return [(n, g) for n in nodes for g in range(first, first + per_node)]


DASH_JOBS = {
    "1001": ("llama-pretrain", "alice", "pretrain", "train", "RUNNING",
             _gpus(["n01", "n02", "n03", "n04"]),
             [(-40, -20, "NODE_FAIL"), (-19.5, None, "RUNNING")], 88.0),
    "1002": ("sft-chat", "bob", "sft", "train", "RUNNING",
             _gpus(["n05", "n06"]), [(-6, None, "RUNNING")], 2.0),
    "1003": ("eval-mmlu", "carol", "eval", "eval", "COMPLETED",
             _gpus(["n07"]), [(-30, -28, "COMPLETED")], 55.0),
    "1004": (XSS_NAME, "mallory", "debug", "eval", "RUNNING",
             _gpus(["n08"], 2), [(-3, None, "RUNNING")], 0.0),
    "1005": ("debug-oom", "dave", "debug", "eval", "FAILED",
             _gpus(["n08"], 1, 2), [(-10, -9, "FAILED")], 70.0),
    "1006": ("queued-sweep", "carol", "eval", "eval", "PENDING", [], [], 0.0),
    "1007": ("eval-gsm8k", "carol", "eval", "eval", "COMPLETED",
             _gpus(["n07"]), [(-20, -16, "COMPLETED")], 35.0),
    "1008": ("eval-arc", "bob", "eval", "eval", "COMPLETED",
             _gpus(["n07"]), [(-12, -2, "COMPLETED")], 65.0),
}
HOT_RACK = "r03"  # ten degrees hotter: its GPUs throttle when busy
XID_GPU = ("n02", 3)  # XID 79 (fell off the bus) here ended job 1001's first run


def seed_dashboard(wh: Warehouse, now: datetime = NOW, *, hours: int = 48) -> None:
    """A 32-GPU cluster with ``hours`` of 1-minute telemetry, rolled up.

    Racks r01-r03 (partition ``train``, zone A, one floor row) and r04 (``eval``,
    zone B); two nodes a rack (n01..n08), four H100s a node. Jobs: ``DASH_JOBS`` (1001
    a requeued pre-training job after a NODE_FAIL with XID 79 on n02/3; 1002 allocated
    but idle; 1004 with markup as its name, idle; 1005 a script failure). Telemetry
    follows the jobs' utilisation; rack r03 runs 10 °C hotter. The last raw sample is
    20 s before ``now``.
    """
    racks = pd.DataFrame({"rack": ["r01", "r02", "r03", "r04"],
                          "zone": ["A", "A", "A", "B"], "row": [1, 1, 1, 2],
                          "x": [0.0, 1.0, 2.0, 0.0], "y": [0.0, 0.0, 0.0, 1.0]})
    node_rack = {f"n{i:02d}": f"r{(i + 1) // 2:02d}" for i in range(1, 9)}
    nodes = pd.DataFrame({"node": list(node_rack), "rack": list(node_rack.values()),
                          "partition": ["train"] * 6 + ["eval"] * 2, "gpus": [4] * 8})
    gpu_keys = [(n, g) for n in node_rack for g in range(4)]
    gpus = pd.DataFrame({"gpu_uuid": [f"GPU-{n}-{g}" for n, g in gpu_keys],
                         "node": [n for n, _ in gpu_keys], "gpu_index": [g for _, g in gpu_keys],
                         "model": "H100", "tdp_w": 700.0, "memory_mib": 81559.0})
    h = timedelta(hours=1)
    times = pd.date_range(now - hours * h, now - timedelta(seconds=20), freq="60s")
    rng = np.random.default_rng(5)
    util = {k: np.zeros(len(times)) for k in gpu_keys}
    jobs, runs, allocs = [], [], []
    for job_id, (name, user, jtype, part, state, job_gpus, job_runs, level) in DASH_JOBS.items():
        first = job_runs[0][0] if job_runs else None
        last = job_runs[-1][1] if job_runs else None
        jobs.append((job_id, name, user, "acct-" + user, part, jtype, state,
                     now + (first or 0) * h - 0.2 * h, now + first * h if first else None,
                     now + last * h if last is not None else None, len(job_gpus),
                     len({n for n, _ in job_gpus}), len(job_runs) - 1 if job_runs else 0))
        for i, (lo, hi, rstate) in enumerate(job_runs):
            start, end = now + lo * h, (now + hi * h) if hi is not None else None
            runs.append((job_id, i, start, end, rstate, len(job_gpus),
                         "n02" if rstate == "NODE_FAIL" else None,
                         {"NODE_FAIL": "node failure", "FAILED": "CUDA out of memory"}.get(rstate)))
            mask = (times >= start) & (times < (end or now + h))
            for node, g in job_gpus:
                allocs.append((job_id, i, node, g, start, end))
                noise = rng.normal(0, 4 if level > 10 else 0.3, mask.sum())
                util[(node, g)][mask] = np.clip(level + noise, 0, 100)
    frames = []
    for node, g in gpu_keys:
        u = util[(node, g)]
        hot = 10.0 if node_rack[node] == HOT_RACK else 0.0
        temp = 34 + 0.45 * u + hot + 2 * g
        frames.append(pd.DataFrame({
            "ts": times, "node": node, "gpu_index": g, "gpu_uuid": f"GPU-{node}-{g}",
            "interval_s": 60.0, "util_pct": u, "power_w": 70 + 5.5 * u, "temp_c": temp,
            "mem_used_mib": 800 + 700 * u, "sm_clock_mhz": 1980.0 - 3 * np.maximum(temp - 70, 0),
            "throttle_thermal": temp > 80, "throttle_power": False,
        }))
    samples = pd.concat(frames, ignore_index=True)
    t = lambda hours_: now + hours_ * h  # noqa: E731
    events = pd.DataFrame(
        [(t(-20.02), "n02", 3, "GPU-n02-3", "xid", 79, "GPU has fallen off the bus"),
         (t(-9.05), "n08", 2, "GPU-n08-2", "xid", 31, "MMU fault"),
         (t(-5), "n05", 0, "GPU-n05-0", "throttle", 0, "thermal slowdown"),
         (t(-1), "n06", 1, "GPU-n06-1", "ecc", 0, "single-bit ECC error")],
        columns=["ts", "node", "gpu_index", "gpu_uuid", "kind", "code", "detail"])
    carbon = pd.DataFrame({"ts": pd.date_range(now - (hours + 1) * h, now, freq="1h")})
    carbon["g_co2_per_kwh"] = 300 + 100 * np.sin(np.arange(len(carbon)) / 24 * 2 * np.pi)
    batches = {
        "racks": racks, "nodes": nodes, "gpus": gpus, "samples": samples, "events": events,
        "carbon": carbon,
        "jobs": pd.DataFrame(jobs, columns=["job_id", "name", "user_name", "account",
                                            "partition", "job_type", "state", "submit_ts",
                                            "start_ts", "end_ts", "gpus", "nodes", "restarts"]),
        "runs": pd.DataFrame(runs, columns=["job_id", "run_index", "start_ts", "end_ts",
                                            "state", "gpus", "failed_node", "reason"]),
        "allocations": pd.DataFrame(allocs, columns=["job_id", "run_index", "node",
                                                     "gpu_index", "start_ts", "end_ts"]),
    }
    for kind, frame in batches.items():
        wh.ingest(kind, frame).result()
    wh.rollup().result()
    wh.write(lambda con: _failures(con, now)).result()
    from warehouse.energy import refresh_energy  # hourly GPU energy (analytics)

    wh.write(lambda con: refresh_energy(con, now, max_gap_s=300)).result()


def _failures(con, now: datetime) -> None:
    """Two classified failures, as warehouse/failures.py would derive them."""
    h = timedelta(hours=1)
    rows = [
        ("1001", 0, now - 40 * h, now - 20 * h, "NODE_FAIL", "alice", "train", "pretrain",
         16, 4, "n02", "r01", "infrastructure", "GPU fell off the bus (XID 79)", "xid", [79],
         '{"state": "NODE_FAIL", "xids": [79], "log": "<b>NCCL</b> watchdog timeout"}',
         True, 1.0, 0.5, 24.0, True),
        ("1005", 0, now - 10 * h, now - 9 * h, "FAILED", "dave", "eval", "debug", 1, 1,
         "n08", "r04", "script", "CUDA out of memory", "log", [],
         '{"state": "FAILED", "exit_code": 1, "log": "torch.OutOfMemoryError"}',
         False, None, None, 1.0, False),
    ]
    con.executemany(
        "INSERT INTO failures (job_id, run_index, start_ts, end_ts, state, user_name, "
        "partition, job_type, gpus, nodes, node, rack, category, reason, source, xids, "
        "evidence, restarted, since_checkpoint_h, restart_overhead_h, gpu_hours_lost, "
        "checkpoint_known) VALUES (" + ", ".join(["?"] * 22) + ")", rows)
