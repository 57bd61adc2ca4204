"""Renderers that speak the real sources' wire formats, for the simulator and tests.

- :func:`render_dcgm`: samples -> dcgm-exporter ``/metrics`` text per node;
- :func:`render_squeue`: scheduler tables -> ``squeue --json`` at a given time;
- :func:`render_sacct`: scheduler tables -> ``sacct --json -D`` (one record per run).

A job's ``job_type`` travels as its comment (``gpulens:type=pretrain``), the tag
:func:`collector.slurm.infer_job_type` reads back. Slurm documents follow current Slurm
(data_parser v0.0.40-0.0.42): numbers that may be unset are ``{"set": bool, "infinite":
bool, "number": N}``, states are lists. Each renderer is the inverse of the matching
parser in :mod:`collector.dcgm` / :mod:`collector.slurm` (the round-trip tests hold them
to that).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

import hostlist
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.dcgm import FIELDS, HW_THERMAL, SW_POWER_CAP
from collector.slurm import job_type_comment
from warehouse.clock import naive_utc as _naive

__all__ = ["render_dcgm", "render_sacct", "render_squeue"]

DRIVER_VERSION = "550.54.15"
DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
_REQUEUE_STATES = ("REQUEUED", "NODE_FAIL", "PREEMPTED", "REQUEUE_HOLD")
# PCI bus numbers of the eight GPUs of an HGX board; later indices count on.
_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format(values: np.ndarray, dcgm_type: str) -> list[str]:
    """Values as dcgm-exporter prints them: int64 fields as integers, doubles as %f."""
    if dcgm_type == "d":
        return [f"{v:f}" for v in values]
    return [str(int(v)) if float(v).is_integer() else repr(float(v)) for v in values]


def render_dcgm(
    samples: pa.Table,
    *,
    models: Mapping[str, str] | None = None,
    driver_version: str = DRIVER_VERSION,
) -> dict[str, str]:
    """dcgm-exporter text per node for the rows of ``samples`` (SCHEMAS["samples"]).

    One text per node with ``# HELP``/``# TYPE`` and one line per GPU per field, labels
    ``gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION``.
    A NULL column omits that line. Units go back to the exporter's: energy in mJ
    (rounded to integer mJ), SM activity as a 0..1 ratio. The throttle booleans become
    the clocks-event mask: thermal -> HW thermal (0x40), power -> SW power cap (0x4);
    the mask line is omitted only when both are NULL. ``models`` maps gpu_uuid to the
    ``modelName`` label (default: an H100).
    """
    order = pc.sort_indices(samples, [("node", "ascending"), ("gpu_index", "ascending")])
    t = samples.take(order)
    nodes = t["node"].to_pylist()
    label_sets = _label_sets(t, models or {}, driver_version)
    columns: list[tuple[str, list[str | None]]] = []
    for f in FIELDS:
        if f.column not in t.column_names and f.column != "throttle_mask":
            continue  # read but not stored (GPU utilisation of MIG GPUs)
        name = f.names[0]
        present, raw = _field_values(t, f)
        text = _format(np.where(present, raw, 0.0), f.dcgm_type)
        lines: list[str | None] = [
            f"{name}{lab}{v}" if p else None
            for lab, v, p in zip(label_sets, text, present, strict=True)
        ]
        columns.append((f"# HELP {name} {f.help}\n# TYPE {name} {f.prom_type}", lines))
    return _texts_per_node(nodes, columns)


def _label_sets(t: pa.Table, models: Mapping[str, str], driver_version: str) -> list[str]:
    """The label set of each row of ``t`` (sorted by node and GPU), as printed."""
    label_sets = []
    for node, gpu, uuid in zip(t["node"].to_pylist(), t["gpu_index"].to_pylist(),
                               t["gpu_uuid"].to_pylist(), strict=True):
        bus = _BUSES[gpu] if gpu < len(_BUSES) else 0xE0 + gpu
        model = models.get(uuid, DEFAULT_MODEL) if uuid else DEFAULT_MODEL
        label_sets.append(
            f'{{gpu="{gpu}",UUID="{_escape(uuid or "")}",pci_bus_id="00000000:{bus:02X}:00.0",'
            f'device="nvidia{gpu}",modelName="{_escape(model)}",Hostname="{_escape(node)}",'
            f'DCGM_FI_DRIVER_VERSION="{_escape(driver_version)}"}} '
        )
    return label_sets


def _field_values(t: pa.Table, f) -> tuple[np.ndarray, np.ndarray]:
    """``(present, value)`` of the field ``f`` per row, in the exporter's unit."""
    if f.column == "throttle_mask":
        thermal = t["throttle_thermal"].to_numpy(zero_copy_only=False)
        power = t["throttle_power"].to_numpy(zero_copy_only=False)
        present = ~(pc.is_null(t["throttle_thermal"]).to_numpy(zero_copy_only=False)
                    & pc.is_null(t["throttle_power"]).to_numpy(zero_copy_only=False))
        raw = (np.where(thermal == True, HW_THERMAL, 0)  # noqa: E712 (object arrays)
               + np.where(power == True, SW_POWER_CAP, 0)).astype(float)  # noqa: E712
        return present, raw
    col = t[f.column]
    present = ~pc.is_null(col).to_numpy(zero_copy_only=False)
    raw = np.asarray(col.to_numpy(zero_copy_only=False), dtype=float) / f.scale
    return present, np.round(raw) if f.column == "energy_j" else raw


def _texts_per_node(nodes: list[str], columns: list[tuple[str, list[str | None]]]
                    ) -> dict[str, str]:
    """One text per node (rows sorted by node): each field's header and present lines."""
    out: dict[str, str] = {}
    bounds = np.flatnonzero(np.r_[True, np.array(nodes[1:]) != np.array(nodes[:-1])])
    ends = np.r_[bounds[1:], len(nodes)]
    for s, e in zip(bounds.tolist(), ends.tolist(), strict=True):
        parts = []
        for header, lines in columns:
            body = [ln for ln in lines[s:e] if ln is not None]
            if body:
                parts.append(header)
                parts.extend(body)
        out[nodes[s]] = "\n".join(parts) + "\n"
    return out


# --------------------------------------------------------------------------- Slurm


def _num(v) -> dict:
    """Slurm's optional number: ``{"set", "infinite", "number"}``."""
    if v is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(v)}


def _epoch(ts: datetime | None) -> int:
    """Naive-UTC (or zone-aware) datetime -> Unix seconds; None -> 0 (Slurm's unset)."""
    if ts is None:
        return 0
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return int(ts.timestamp())


def _idx(indices: list[int]) -> str:
    """GPU indices as Slurm prints them in gres_detail: ``0-3,6``."""
    out, xs = [], sorted(set(indices))
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)


def _job_id(job_id: str) -> int:
    try:
        return int(job_id)
    except ValueError:
        raise ValueError(f"Slurm job ids are integers; cannot render job_id {job_id!r}") from None


def _by_job(table: pa.Table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in table.to_pylist():
        out.setdefault(row["job_id"], []).append(row)
    return out


def _allocs_by_run(allocations: pa.Table) -> dict[tuple[str, int], dict[str, list[int]]]:
    out: dict[tuple[str, int], dict[str, list[int]]] = {}
    for a in allocations.to_pylist():
        per_node = out.setdefault((a["job_id"], a["run_index"]), {})
        per_node.setdefault(a["node"], []).append(a["gpu_index"])
    return out


def _nodelist(run: dict, per_node: Mapping[str, list[int]]) -> str | None:
    if run.get("nodelist"):
        return run["nodelist"]
    return hostlist.collect_hostlist(list(per_node)) if per_node else None


def _exit(run: dict) -> dict:
    code, sig = run.get("exit_code"), run.get("signal")
    status = ["SIGNALED"] if sig else (["SUCCESS"] if not code else ["ERROR"])
    if code is None and sig is None:
        status = ["PENDING"]
    return {
        "status": status,
        "return_code": _num(code),
        "signal": {"id": _num(sig), "name": ""},
    }


def render_squeue(
    jobs: pa.Table, runs: pa.Table, allocations: pa.Table, now: datetime
) -> str:
    """``squeue --json`` (current Slurm format) of the jobs pending or running at ``now``.

    A job is running when one of its runs has ``start_ts <= now`` and no ``end_ts`` (or
    one after ``now``); pending when submitted by ``now``, not running, and neither
    ended by ``now`` nor with a final run that ended by ``now``. ``restart_cnt`` is the
    number of runs started before the current (or next) one; ``gres_detail`` lists, for
    each node of the expanded node list, ``gpu:N(IDX:...)`` from ``allocations``.
    """
    now = _naive(now)
    runs_of = _by_job(runs)
    allocs = _allocs_by_run(allocations)
    out = []
    for job in jobs.to_pylist():
        queued = _queue_position(job, runs_of.get(job["job_id"], []), now)
        if queued is None:
            continue
        current, restart_cnt = queued
        entry = _squeue_job(job, restart_cnt)
        if current is None:
            entry.update(_pending_fields(restart_cnt))
        else:
            per_node = allocs.get((job["job_id"], current["run_index"]), {})
            entry.update(_running_fields(job, current, per_node))
        out.append(entry)
    return json.dumps({"jobs": out, "meta": _meta(), "errors": [], "warnings": []}, indent=1)


def _queue_position(job: dict, job_runs: list[dict], now: datetime
                    ) -> tuple[dict | None, int] | None:
    """``(current run or None when pending, restart_cnt)`` of ``job`` at ``now``; None
    when squeue would not list it (not yet submitted, or done)."""
    if job["submit_ts"] is None or job["submit_ts"] > now:
        return None
    if job["end_ts"] is not None and job["end_ts"] <= now:
        return None
    started = sorted((r for r in job_runs if r["start_ts"] and r["start_ts"] <= now),
                     key=lambda r: r["run_index"])
    current = next((r for r in started if r["end_ts"] is None or r["end_ts"] > now), None)
    queued_again = any(r["start_ts"] and r["start_ts"] > now for r in job_runs) or (
        started and started[-1]["state"] in _REQUEUE_STATES and job["end_ts"] is None)
    if current is None and started and not queued_again:
        return None  # the last run is over and nothing follows it: the job is done
    return current, current["run_index"] if current else len(started)


def _squeue_job(job: dict, restart_cnt: int) -> dict:
    """The fields of a squeue entry that do not depend on whether the job runs."""
    return {
        "account": job["account"] or "",
        "job_id": _job_id(job["job_id"]),
        "name": job["name"] or "",
        "comment": job_type_comment(job["job_type"]) if job.get("job_type") else "",
        "partition": job["partition"] or "",
        "user_name": job["user_name"] or "",
        "submit_time": _num(_epoch(job["submit_ts"])),
        "restart_cnt": restart_cnt,
        "node_count": _num(job["nodes"]),
        "tres_req_str": f"gres/gpu={job['gpus']}" if job["gpus"] is not None else "",
        "exit_code": {"status": ["PENDING"], "return_code": _num(None),
                      "signal": {"id": _num(None), "name": ""}},
    }


def _pending_fields(restart_cnt: int) -> dict:
    return {"job_state": ["PENDING"] + (["REQUEUED"] if restart_cnt else []),
            "state_reason": "Resources", "start_time": _num(0), "end_time": _num(0),
            "nodes": "", "gres_detail": [], "tres_alloc_str": ""}


def _running_fields(job: dict, current: dict, per_node: dict[str, list[int]]) -> dict:
    """State, nodes and GPUs (``gres_detail`` per node) of the run ``current``."""
    nodelist = _nodelist(current, per_node) or ""
    names = hostlist.expand_hostlist(nodelist) if nodelist else []
    gres = []
    for n in names:
        idx = per_node.get(n, [])
        gres.append(f"gpu:{len(idx)}(IDX:{_idx(idx)})" if idx else "")
    gpus = current["gpus"] if current["gpus"] is not None else job["gpus"]
    return {
        "job_state": ["RUNNING"],  # at `now`; the run's own state is its final one
        "state_reason": "None",
        "start_time": _num(_epoch(current["start_ts"])),
        "end_time": _num(0),
        "nodes": nodelist,
        "gres_detail": gres,
        "tres_alloc_str": (f"node={len(names)},gres/gpu={gpus}" if gpus is not None
                           else f"node={len(names)}"),
        "job_resources": {"nodes": {
            "count": len(names), "list": nodelist,
            "allocation": [{"index": i, "name": n} for i, n in enumerate(names)]}},
    }


def _meta() -> dict:
    return {
        "plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.41"},
        "slurm": {"version": {"major": "24", "micro": "4", "minor": "05"},
                  "release": "24.05.4", "cluster": "gpulens"},
    }


def render_sacct(jobs: pa.Table, runs: pa.Table, allocations: pa.Table) -> str:
    """``sacct --json -D`` (current Slurm format): one record per run, requeues included.

    A job without runs (pending, or cancelled before it started) gets one record with
    start 0. The first run's record carries the job's submit time, later runs the end
    of the run before them (when the requeued job entered the queue again). sacct keeps
    no GPU indices: ``allocations`` only supplies node names when a run has no
    ``nodelist``.
    """
    runs_of = _by_job(runs)
    allocs = _allocs_by_run(allocations)
    out = []
    for job in jobs.to_pylist():
        job_runs = sorted(runs_of.get(job["job_id"], []), key=lambda r: r["run_index"])
        records = job_runs or [None]
        prev_end = None
        for run in records:
            per_node = allocs.get((job["job_id"], run["run_index"]), {}) if run else {}
            nodelist = _nodelist(run, per_node) if run else None
            submit = job["submit_ts"] if run is None or run["run_index"] == 0 else prev_end
            gpus = job["gpus"] if run is None or run["gpus"] is None else run["gpus"]
            nnodes = len(hostlist.expand_hostlist(nodelist)) if nodelist else job["nodes"]
            start = run["start_ts"] if run else None
            end = run["end_ts"] if run else job["end_ts"]
            state = run["state"] if run else job["state"]
            tres = []
            if nnodes:
                tres.append({"type": "node", "name": "", "id": 4, "count": nnodes})
            if gpus is not None:
                tres.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
            out.append(
                {
                    "account": job["account"] or "",
                    "job_id": _job_id(job["job_id"]),
                    "name": job["name"] or "",
                    "comment": {"administrator": "", "system": "",
                                "job": (job_type_comment(job["job_type"])
                                        if job.get("job_type") else "")},
                    "partition": job["partition"] or "",
                    "user": job["user_name"] or "",
                    "allocation_nodes": nnodes or 0,
                    "nodes": nodelist or "None assigned",
                    "restart_cnt": run["run_index"] if run else 0,
                    "state": {"current": [state or "PENDING"],
                              "reason": (run["reason"] if run else None) or "None"},
                    "exit_code": _exit(run or {}),
                    "time": {
                        "submission": _epoch(submit),
                        "start": _epoch(start),
                        "end": _epoch(end),
                        "elapsed": (_epoch(end) - _epoch(start)) if start and end else 0,
                        "limit": _num(None),
                    },
                    "tres": {"allocated": tres if start else [],
                             "requested": tres},
                }
            )
            prev_end = run["end_ts"] if run else None
    return json.dumps({"jobs": out, "meta": _meta(), "errors": [], "warnings": []}, indent=1)
