"""Hand-built job histories for the failure, goodput and energy tests.

A warehouse with ``topology`` (4 nodes of 8 GPUs in 2 racks by default), jobs added with
``add_job`` (one dict per run), XIDs, checkpoints and telemetry samples, and
``run_refresh`` to run the analytics refresh as the service does. Times are naive UTC
around ``T`` (Monday 2026-11-02 00:00).
The fixture ``wh`` of tests/conftest.py is such a warehouse, in memory. ``samples`` makes a
GPU's series every ``STEP`` seconds and ``ingest`` stores and rolls it up.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from warehouse.analytics import refresh

T = datetime(2026, 11, 2)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def topology(wh, nodes=4, gpus=8, racks=2):
    wh.ingest("nodes", pd.DataFrame({
        "node": [f"n{i}" for i in range(nodes)],
        "rack": [f"r{i % racks}" for i in range(nodes)],
        "partition": "train", "gpus": gpus})).result()


def add_job(wh, job_id, runs, *, gpus=8, user="ann", submit=T, end=None, state=None):
    """runs: dicts with start, end, state and optional exit_code, reason, node (whole
    node allocation), gpu_indices."""
    last = runs[-1]
    wh.ingest("jobs", pd.DataFrame([{
        "job_id": job_id, "user_name": user, "partition": "train", "gpus": gpus,
        "submit_ts": submit, "start_ts": runs[0]["start"], "end_ts": end or last["end"],
        "state": state or last["state"]}])).result()
    wh.ingest("runs", pd.DataFrame([{
        "job_id": job_id, "run_index": i, "start_ts": r["start"], "end_ts": r["end"],
        "state": r["state"], "exit_code": r.get("exit_code", 1 if r["state"] != "COMPLETED"
                                                 else 0),
        "reason": r.get("reason"), "gpus": gpus, "failed_node": r.get("failed_node")}
        for i, r in enumerate(runs)])).result()
    allocs = [{"job_id": job_id, "run_index": i, "node": node, "gpu_index": g,
               "start_ts": r["start"], "end_ts": r["end"]}
              for i, r in enumerate(runs) for node in r.get("nodes", [])
              for g in r.get("gpu_indices", range(8))]
    if allocs:
        wh.ingest("allocations", pd.DataFrame(allocs)).result()


def xid(wh, ts, node, gpu, code):
    wh.ingest("events", pd.DataFrame([{"ts": ts, "node": node, "gpu_index": gpu,
                                       "kind": "xid", "code": code}])).result()


def checkpoint(wh, job_id, ts):
    wh.ingest("checkpoints", pd.DataFrame([{"ts": ts, "job_id": job_id}])).result()


def sample(wh, ts, node="n0", gpu=0, util_pct=50.0, power_w=300.0):
    """One telemetry sample: the first one marks the start of the observed history."""
    wh.ingest("samples", pd.DataFrame([{"ts": ts, "node": node, "gpu_index": gpu,
                                        "util_pct": util_pct, "power_w": power_w,
                                        "interval_s": 15.0}])).result()


def store_usage(w, usage, nodes: pd.DataFrame, jobs: pd.DataFrame | None = None, *,
                hours: int = 4, idle_pct: float) -> None:
    """As the only rows of their tables: ``usage`` (tuples of hour from ``T``, node, job,
    run, gpu_s, energy_j and optionally util_s, else gpu_s) as ``gpu_usage_1h``'s, its
    ledger's hours 0 to ``hours - 1`` (computed at ``idle_pct``), ``nodes`` (node, rack,
    partition, gpus) and ``jobs`` (job_id, user_name, job_type; None: none); then the
    kept per-run rows rebuilt (warehouse/run_usage.py), as after a hand edit."""
    from warehouse import run_usage

    rows = [(T + u[0] * H, *u[1:6], u[6] if len(u) > 6 else u[4], 0.0, 0.0) for u in usage]

    def fill(con):
        for table in ("gpu_usage_1h", "gpu_usage_hours", "run_usage_1h", "nodes", "jobs"):
            con.execute(f"DELETE FROM {table}")
        con.executemany("INSERT INTO gpu_usage_1h (ts, node, job_id, run_index, gpu_s, "
                        "energy_j, util_s, idle_s, idle_j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows)
        con.executemany("INSERT INTO gpu_usage_hours (ts, idle_pct) VALUES (?, ?)",
                        [(T + h * H, float(idle_pct)) for h in range(hours)])
        for table, frame in (("nodes", nodes), ("jobs", jobs)):
            if frame is not None:
                con.register("_new_rows", frame)
                cols = ", ".join(frame.columns)
                con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _new_rows")
                con.unregister("_new_rows")
        run_usage.rebuild(con)

    w.write(fill).result()


def run_refresh(wh, now=T + 24 * H, settings=None):
    return wh.write(lambda con: refresh(con, now, settings)).result()


def rows(wh):
    df = wh.reader().execute("SELECT * FROM failures ORDER BY job_id, run_index").df()
    return {(r.job_id, r.run_index): r for r in df.itertuples()}


STEP = 15.0  # seconds between samples


def samples(node, gpu, start, n, power_w, *, counter=True, resets=(), util=50.0,
            drop=()):
    """n samples every 15 s at constant power; the counter integrates the power and
    restarts from 0 at the sample indices in ``resets``; indices in ``drop`` are missing."""
    ts = np.array([start + timedelta(seconds=STEP * k) for k in range(n)], "datetime64[us]")
    energy = np.zeros(n)
    acc = 0.0
    for k in range(n):
        acc = 0.0 if k in resets else acc + power_w * STEP
        energy[k] = acc
    df = pd.DataFrame({"ts": ts, "node": node, "gpu_index": gpu, "interval_s": STEP,
                       "power_w": float(power_w), "util_pct": util,
                       "energy_j": energy if counter else np.nan})
    return df.drop(index=list(drop))


def ingest(wh, *frames):
    """Ingest sample frames and roll them up, as the service does."""
    wh.ingest("samples", pd.concat(frames, ignore_index=True)).result()
    wh.rollup().result()
