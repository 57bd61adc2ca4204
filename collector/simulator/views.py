"""Tables of the simulated cluster as an observer sees them at a given moment.

The workload knows every run's end when the run starts; these views hide the future:
at ``now`` a run that has not ended is RUNNING with no end, a job waiting for its first
(or a requeued) run is PENDING. Also the GPU events (XIDs, ECC, lost nodes) and the grid
carbon intensity. Times here are simulator seconds; ``to_us`` maps them to timestamps.
"""

from __future__ import annotations

import math

import hostlist
import numpy as np
import pyarrow as pa

from warehouse.schema import SCHEMAS

from .failures import XID_TEXT
from .jobs import Job
from .topology import PARTITIONS, Topology
from .workload import Workload


def job_state(job: Job, now: float) -> tuple[str, list, int]:
    """Slurm's state of ``job`` at ``now``, its runs started before now, and requeues."""
    runs = [r for r in job.runs if r.start_s < now]
    restarts = sum(1 for r in runs if r.end_s <= now and r.requeue)
    if not runs:
        return "PENDING", runs, restarts
    last = runs[-1]
    if last.end_s > now:
        return "RUNNING", runs, restarts
    return ("PENDING" if last.requeue else last.state), runs, restarts


def scheduler_tables(w: Workload, topo: Topology, jobs: list[Job], now: float,
                     to_us) -> dict[str, pa.Table]:
    """{"jobs", "runs", "allocations"} of ``jobs`` as Slurm shows them at ``now``."""
    gpn = topo.config.gpus_per_node
    jrows: dict[str, list] = {k: [] for k in SCHEMAS["jobs"].names}
    rrows: dict[str, list] = {k: [] for k in SCHEMAS["runs"].names}
    arows: dict[str, list] = {k: [] for k in SCHEMAS["allocations"].names}
    for job in jobs:
        state, runs, restarts = job_state(job, now)
        final = state not in ("PENDING", "RUNNING")
        for key, val in (
            ("job_id", job.job_id), ("name", job.name), ("user_name", job.user),
            ("account", job.account), ("partition", PARTITIONS[job.partition]),
            ("job_type", job.jtype.name), ("state", state), ("submit_ts", to_us(job.submit_s)),
            ("start_ts", to_us(runs[0].start_s) if runs else None),
            ("end_ts", to_us(runs[-1].end_s) if final else None), ("gpus", job.gpus),
            ("nodes", job.nodes), ("restarts", restarts),
        ):
            jrows[key].append(val)
        for r in runs:
            done = r.end_s <= now
            names = [topo.node_names[n] for n in r.nodes]
            for key, val in (
                ("job_id", job.job_id), ("run_index", r.index), ("start_ts", to_us(r.start_s)),
                ("end_ts", to_us(r.end_s) if done else None),
                ("state", r.state if done else "RUNNING"),
                ("exit_code", r.exit_code if done else None),
                ("signal", r.signal if done else None),
                ("reason", r.reason if done else None),
                ("failed_node", topo.node_names[r.failed_node]
                 if done and r.failed_node >= 0 else None),
                ("gpus", len(r.gpus)), ("nodelist", hostlist.collect_hostlist(names)),
            ):
                rrows[key].append(val)
            m = len(r.gpus)
            arows["job_id"] += [job.job_id] * m
            arows["run_index"] += [r.index] * m
            arows["node"] += [topo.node_names[int(gi) // gpn] for gi in r.gpus]
            arows["gpu_index"] += [int(gi) % gpn for gi in r.gpus]
            arows["start_ts"] += [to_us(r.start_s)] * m
            arows["end_ts"] += [to_us(r.end_s) if done else None] * m
            arows["share"] += [None] * m  # whole GPUs
            arows["gpu_i_ids"] += [None] * m
    return {
        kind: pa.table(rows, schema=SCHEMAS[kind])
        for kind, rows in (("jobs", jrows), ("runs", rrows), ("allocations", arows))
    }


def events_table(w: Workload, topo: Topology, a_s: float, b_s: float, to_us) -> pa.Table:
    """XID, ECC and lost-node events with a_s <= ts < b_s (seconds), ordered by time."""
    gpn = topo.config.gpus_per_node
    rows = []
    for ts, gpu, code, _ in w.xids:
        if a_s <= ts < b_s:
            node, idx = topo.node_names[gpu // gpn], gpu % gpn
            uid = topo.gpu_uuids[gpu]
            text = XID_TEXT.get(code, "")
            rows.append((ts, node, idx, uid, "xid", code, f"Xid {code}: {text}"))
            if code in (48, 94, 95):
                kind = "uncorrectable" if code != 94 else "contained"
                rows.append((ts, node, idx, uid, "ecc", 0, f"double-bit ECC error ({kind})"))
    for ts, node in w.lost:
        if a_s <= ts < b_s:
            rows.append((ts, topo.node_names[node], None, None, "lost", 0,
                         "node not responding: GPU fell off the bus, node set DOWN"))
    rows.sort(key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2], r[4]))
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(7)]
    names = SCHEMAS["events"].names
    data = dict(zip(names, cols, strict=True))
    data["ts"] = [to_us(t) for t in data["ts"]]
    return pa.table(data, schema=SCHEMAS["events"])


def carbon_table(seed: int, slot_s: float, a_us: int, b_us: int) -> pa.Table:
    """Grid carbon intensity (gCO2e/kWh), one row per ``slot_s`` aligned to the epoch:
    ~420 at night, a solar dip to ~220 around 12:00 UTC, an evening peak, day-to-day
    weather and noise. Rows with a_us <= ts < b_us (microseconds since the epoch)."""
    step = int(slot_s * 1e6)
    first, last = math.ceil(a_us / step), math.ceil(b_us / step)
    if last <= first:
        return SCHEMAS["carbon"].empty_table()
    slots = np.arange(first, last)
    hour = (slots * slot_s / 3600.0) % 24
    day = np.floor(slots * slot_s / 86400.0).astype(np.int64)
    solar = np.clip(np.cos(2 * np.pi * (hour - 12) / 24), 0, None) ** 1.5
    evening = np.exp(-0.5 * ((hour - 19) / 2.0) ** 2)
    weather = np.array([np.random.default_rng([seed, 11, int(d)]).uniform(0.6, 1.0)
                        for d in day])
    noise = np.array([np.random.default_rng([seed, 12, int(s)]).normal(0, 8) for s in slots])
    val = 410 - 190 * solar * weather + 35 * evening + noise
    ts = slots * step
    return pa.table({"ts": pa.array(ts, pa.timestamp("us")),
                     "g_co2_per_kwh": np.round(np.clip(val, 150, 500), 1)},
                    schema=SCHEMAS["carbon"])


CHECKPOINT_WRITE_S = 90.0  # seconds to write a checkpoint (the util dip in telemetry)
STEP_S = 2.0  # seconds of training per optimizer step


def checkpoints_table(w: Workload, ckpt_s: float, a_s: float, b_s: float, to_us) -> pa.Table:
    """Checkpoints of pre-training and SFT runs completed in [a_s, b_s): one every
    ``ckpt_s`` of a run, complete ``CHECKPOINT_WRITE_S`` after the boundary."""
    rows = []
    for r in w.runs:
        if r.job.jtype.name not in ("pretrain", "sft") or r.start_s >= b_s:
            continue
        m = max(1, math.ceil((a_s - r.start_s - CHECKPOINT_WRITE_S) / ckpt_s))
        while True:
            t = r.start_s + m * ckpt_s + CHECKPOINT_WRITE_S
            if t >= b_s or t >= r.end_s:
                break
            if t >= a_s:
                step = int((r.done_s + m * ckpt_s) / STEP_S)
                rows.append((to_us(t), r.job.job_id, r.index, step, CHECKPOINT_WRITE_S,
                             f"global_step{step}"))
            m += 1
    rows.sort()
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(6)]
    return pa.table(dict(zip(SCHEMAS["checkpoints"].names, cols, strict=True)),
                    schema=SCHEMAS["checkpoints"])
