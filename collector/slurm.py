"""Slurm's ``squeue --json`` and ``sacct --json -D`` -> jobs, runs and allocations.

Two generations of the JSON are read, detected per field rather than per document:

- Slurm 22.05 (openapi v0.0.38): plain integers for numbers and times, ``job_state`` a
  string, squeue's ``exit_code`` a raw wait(2) status, sacct's
  ``exit_code.signal.signal_id``;
- current Slurm (data_parser v0.0.40-0.0.42, Slurm 23.11-25.05): optional numbers as
  ``{"set": bool, "infinite": bool, "number": N}``, states as lists
  (``["PENDING", "REQUEUED"]``; the first item is the base state),
  ``exit_code.{status: [..], return_code: {..}, signal: {id: {..}, name}}``.

Times are Unix seconds and become naive UTC timestamps; 0, unset or infinite -> NULL.
Output tables follow warehouse.schema.SCHEMAS["jobs"|"runs"|"allocations"].

squeue sees the *current* run of each job: its run_index is ``restart_cnt``. Its GPU
indices come from ``gres_detail`` (one entry per allocated node, e.g.
``gpu:h100:4(IDX:0-3)``) paired with the node list. For pending jobs squeue's
``start_time`` is the scheduler's estimate and for running jobs ``end_time`` is the time
limit, so neither is used. ``jobs.start_ts`` is the *first* run's start, which squeue
only knows while ``restart_cnt == 0``; otherwise it is NULL (sacct knows it).

sacct -D returns one record per run of a job (requeued runs share the job id); runs are
numbered by start time. The accounting database keeps GPU counts but no GPU indices,
so sacct yields allocations only when the caller says how many GPUs a node has
(``gpus_per_node``) and a run holds whole nodes: then its indices are 0..gpus_per_node-1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from collector.slurm_fields import (  # noqa: F401  (SlurmParseError is re-exported)
    _PER_NODE_GPU,
    NOTHING_FOUND,
    PENDING_STATES,
    RUNNING_STATES,
    SlurmParseError,
    _exit,
    _expand,
    _gpus_from_tres_list,
    _gpus_from_tres_str,
    _nodes,
    _number,
    _reason,
    _resource_nodes,
    _state,
    _text,
    _time,
    infer_job_type,
    job_type_comment,
    parse_gres_detail,
)
from warehouse.schema import SCHEMAS

__all__ = ["SchedulerBatch", "SlurmParseError", "infer_job_type", "job_ids", "job_type_comment",
           "parse_gres_detail", "parse_sacct", "parse_squeue"]

@dataclass
class SchedulerBatch:
    """Scheduler state in the warehouse's column contracts."""

    jobs: pa.Table
    runs: pa.Table
    allocations: pa.Table


# ----------------------------------------------------------------------- documents


def _load(doc: str | bytes | Mapping, command: str) -> list[Mapping]:
    if isinstance(doc, str | bytes | bytearray):
        try:
            doc = json.loads(doc)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SlurmParseError(f"{command}: not JSON: {e}") from None
    if not isinstance(doc, Mapping):
        raise SlurmParseError(f"{command}: expected a JSON object, got {type(doc).__name__}")
    errs = doc.get("errors")
    # Slurm 22.05's sacct reports an empty result as an error ("Nothing found",
    # error_number 9003, seen on a real 22.05.8); it is an empty list of jobs.
    if isinstance(errs, list):
        errs = [e for e in errs if not (isinstance(e, Mapping)
                                        and e.get("error_number") == NOTHING_FOUND)]
    if errs:
        raise SlurmParseError(f"{command} reported errors: {errs!r}")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError(f"{command}: no 'jobs' list in the document")
    for i, j in enumerate(jobs):
        if not isinstance(j, Mapping) or "job_id" not in j:
            raise SlurmParseError(f"{command}: jobs[{i}] is not a job record with a job_id")
    return jobs


def job_ids(doc: str | bytes | Mapping) -> list[str]:
    """The distinct job ids of a ``squeue``/``sacct`` JSON document, in order."""
    return list(dict.fromkeys(str(_number(j["job_id"], "job_id")) for j in _load(doc, "sacct")))


def _tables(jobs: list[dict], runs: list[dict], allocs: list[dict]) -> SchedulerBatch:
    def table(kind: str, rows: list[dict]) -> pa.Table:
        schema = SCHEMAS[kind]
        return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()

    return SchedulerBatch(table("jobs", jobs), table("runs", runs), table("allocations", allocs))


def parse_squeue(doc: str | bytes | Mapping, now: datetime,
                 job_type_regex: str | None = None) -> SchedulerBatch:
    """Jobs, current runs and GPU allocations from ``squeue --json``.

    ``now`` (the time of the query) is accepted for the caller's bookkeeping and to
    drop start times in the future; squeue's own times are used otherwise.
    ``job_type_regex``: see :func:`infer_job_type`. Raises
    :class:`SlurmParseError` naming the job and field that cannot be read.
    """
    now = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    jobs, runs, allocs = [], [], []
    for rec in _load(doc, "squeue"):
        jid = str(_number(rec["job_id"], "job_id"))
        what = f"squeue job {jid}"
        state = _state(rec.get("job_state"), f"{what}: job_state")
        restart = _number(rec.get("restart_cnt"), f"{what}: restart_cnt") or 0
        submit = _time(rec.get("submit_time"), f"{what}: submit_time")
        start = _time(rec.get("start_time"), f"{what}: start_time")
        end = _time(rec.get("end_time"), f"{what}: end_time")
        started = state not in PENDING_STATES and start is not None and start <= now
        if not started:
            start = None
        finished = started and state not in RUNNING_STATES
        if not finished:
            end = None
        nodelist = _nodes(rec.get("nodes")) if started else None
        node_count = _number(rec.get("node_count"), f"{what}: node_count")
        gpus = _gpus_from_tres_str(rec.get("tres_alloc_str")) if started else None
        if gpus is None:
            gpus = _gpus_from_tres_str(rec.get("tres_req_str"))
        if gpus is None:
            gpus = _requested_gpus(rec, node_count)
        code, signal = _exit(rec.get("exit_code"), f"{what}: exit_code") if finished else (
            None, None)
        jobs.append(
            {
                "job_id": jid,
                "name": _text(rec.get("name")),
                "user_name": _text(rec.get("user_name")),
                "account": _text(rec.get("account")),
                "partition": _text(rec.get("partition")),
                "job_type": infer_job_type(rec.get("comment"), _text(rec.get("name")),
                                           job_type_regex),
                "state": state,
                "submit_ts": submit,
                "start_ts": start if restart == 0 else None,
                "end_ts": end,
                "gpus": gpus,
                "nodes": node_count,
                "restarts": restart,
            }
        )
        if not started:
            continue
        runs.append(
            {
                "job_id": jid, "run_index": restart, "start_ts": start, "end_ts": end,
                "state": state, "exit_code": code, "signal": signal,
                "reason": _reason(rec.get("state_reason")), "failed_node": None,
                "gpus": gpus, "nodelist": nodelist,
            }
        )
        names = _resource_nodes(rec) or _expand(nodelist, f"{what}: nodes")
        detail = rec.get("gres_detail") or []
        if not isinstance(detail, list):
            raise SlurmParseError(f"{what}: gres_detail is not a list: {detail!r}")
        if detail and len(detail) != len(names):
            raise SlurmParseError(
                f"{what}: {len(detail)} gres_detail entries for {len(names)} nodes "
                f"({nodelist!r}); cannot pair GPUs with nodes"
            )
        for node, entry in zip(names, detail, strict=False):
            for idx in parse_gres_detail(str(entry)):
                allocs.append({"job_id": jid, "run_index": restart, "node": node,
                               "gpu_index": idx, "start_ts": start, "end_ts": end})
    return _tables(jobs, runs, allocs)


def _requested_gpus(rec: Mapping, node_count: int | None) -> int | None:
    per_job = rec.get("tres_per_job")
    m = _PER_NODE_GPU.search(per_job) if isinstance(per_job, str) else None
    if m:
        return int(m.group(1))
    per_node = rec.get("tres_per_node")
    m = _PER_NODE_GPU.search(per_node) if isinstance(per_node, str) else None
    if m:
        return int(m.group(1)) * (node_count or 1)
    return None


def parse_sacct(doc: str | bytes | Mapping, gpus_per_node: int | None = None,
                job_type_regex: str | None = None) -> SchedulerBatch:
    """Jobs, runs (one per sacct record that started) and allocations from ``sacct -D``.

    Records of one job id are ordered by start time to number the runs. The job's
    state and end are those of its last record; its submit time the earliest; its start
    the first run's; ``restarts`` the number of runs before the last. Allocations: see
    the module docstring (``gpus_per_node``). Job types: see :func:`infer_job_type`.
    """
    by_job: dict[str, list[dict]] = {}
    for pos, rec in enumerate(_load(doc, "sacct")):
        jid = str(_number(rec["job_id"], "job_id"))
        what = f"sacct job {jid}"
        state_v = rec.get("state")
        reason = None
        if isinstance(state_v, dict):  # sacct: {"current": .., "reason": ..}
            reason = state_v.get("reason")
            state_v = state_v.get("current")
        t = rec.get("time") or {}
        if not isinstance(t, Mapping):
            raise SlurmParseError(f"{what}: 'time' is not an object")
        tres = rec.get("tres") or {}
        start = _time(t.get("start"), f"{what}: time.start")
        end = _time(t.get("end"), f"{what}: time.end")
        code, signal = _exit(rec.get("exit_code"), f"{what}: exit_code")
        state = _state(state_v, f"{what}: state")
        if state == "FAILED" and code == 0 and not signal:
            # Slurm 22.05's sacct --json prints {"status": "SUCCESS", "return_code": 0}
            # for a job that exited 3 (plain sacct says 3:0; seen on 22.05.8): a FAILED
            # run cannot have exited 0, so the code is unknown rather than 0.
            code = None
        by_job.setdefault(jid, []).append(
            {
                "pos": pos,
                "name": _text(rec.get("name")),
                "job_type": infer_job_type(rec.get("comment"), _text(rec.get("name")),
                                           job_type_regex),
                "user_name": _text(rec.get("user")) or _text(rec.get("user_name")),
                "account": _text(rec.get("account")),
                "partition": _text(rec.get("partition")),
                "state": state,
                "reason": _reason(reason),
                "submit": _time(t.get("submission"), f"{what}: time.submission"),
                "start": start,
                "end": end if start else None,
                "end_raw": end,
                "code": code if end else None,
                "signal": signal if end else None,
                "nodelist": _nodes(rec.get("nodes")) if start else None,
                "nnodes": _number(rec.get("allocation_nodes"), f"{what}: allocation_nodes"),
                "gpus": _gpus_from_tres_list(tres.get("allocated") if start else None)
                if isinstance(tres, Mapping) else None,
                "gpus_req": _gpus_from_tres_list(tres.get("requested"))
                if isinstance(tres, Mapping) else None,
                "restart_cnt": _number(rec.get("restart_cnt"), f"{what}: restart_cnt"),
            }
        )

    jobs, runs, allocs = [], [], []
    for jid, recs in by_job.items():
        recs.sort(key=lambda r: (r["start"] is None, r["start"] or datetime.min, r["pos"]))
        started = [r for r in recs if r["start"] is not None]
        last = recs[-1]
        for i, r in enumerate(started):
            gpus = r["gpus"] if r["gpus"] is not None else r["gpus_req"]
            runs.append(
                {
                    "job_id": jid, "run_index": i, "start_ts": r["start"], "end_ts": r["end"],
                    "state": r["state"], "exit_code": r["code"], "signal": r["signal"],
                    "reason": r["reason"], "failed_node": None, "gpus": gpus,
                    "nodelist": r["nodelist"],
                }
            )
            names = _expand(r["nodelist"], f"sacct job {jid}: nodes")
            if gpus_per_node and names and gpus == gpus_per_node * len(names):
                for node in names:
                    for g in range(gpus_per_node):
                        allocs.append({"job_id": jid, "run_index": i, "node": node,
                                       "gpu_index": g, "start_ts": r["start"],
                                       "end_ts": r["end"]})
        terminal = last["state"] not in RUNNING_STATES | PENDING_STATES
        submits = [r["submit"] for r in recs if r["submit"] is not None]
        restarts = max([len(started) - 1, 0] + [r["restart_cnt"] or 0 for r in recs])
        if last["start"] is None and started:  # queued again after a requeue
            restarts = max(restarts, len(started))
        jobs.append(
            {
                "job_id": jid,
                "name": last["name"],
                "user_name": last["user_name"],
                "account": last["account"],
                "partition": last["partition"],
                "job_type": next((r["job_type"] for r in reversed(recs) if r["job_type"]),
                                 None),
                "state": last["state"],
                "submit_ts": min(submits) if submits else None,
                "start_ts": started[0]["start"] if started else None,
                "end_ts": last["end_raw"] if terminal else None,
                "gpus": last["gpus"] if last["gpus"] is not None else last["gpus_req"],
                "nodes": last["nnodes"] or None,
                "restarts": restarts,
            }
        )
    return _tables(jobs, runs, allocs)
