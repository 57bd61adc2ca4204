"""Slurm's ``squeue --json`` and ``sacct --json -D`` -> jobs, runs and allocations.

Every generation of the JSON is read, detected per field rather than per document
(real captures of each are in tests/fixtures/slurm/):

- Slurm 22.05 (openapi v0.0.38): plain integers for numbers and times, ``job_state`` a
  string, squeue's ``exit_code`` a raw wait(2) status, sacct's
  ``exit_code.signal.signal_id``;
- Slurm 23.02 (data_parser v0.0.39): optional numbers as ``{"set", "infinite",
  "number"}``, also squeue's (raw) ``exit_code`` and ``derived_exit_code``;
- Slurm 23.11-25.11 (data_parser v0.0.40-v0.0.44): states as lists
  (``["PENDING", "REQUEUED"]``; the first item is the base state),
  ``exit_code.{status: [..], return_code: {..}, signal: {id: {..}, name}}``.

Times are Unix seconds and become naive UTC timestamps; 0, unset or infinite -> NULL.
Output tables follow warehouse.schema.SCHEMAS["jobs"|"runs"|"allocations"]. Exit codes
follow the rule of :mod:`collector.slurm_exit`; GPU counts and indices
:mod:`collector.slurm_gres`.

squeue sees the *current* run of each job: its run_index is ``restart_cnt``. Its GPU
indices come from ``gres_detail`` (one entry per allocated node) paired with the node
list, and their number is the run's GPU count. For pending jobs squeue's ``start_time``
is the scheduler's estimate and for running jobs ``end_time`` is the time limit, so
neither is used. ``jobs.start_ts`` is the *first* run's start, which squeue only knows
while ``restart_cnt == 0``; otherwise it is NULL (sacct knows it).

sacct -D returns one record per run of a job (requeued runs share the job id); runs are
numbered by start time. The accounting database keeps GPU counts but no GPU indices,
so sacct yields allocations only when the caller says how many GPUs a node has
(``gpus_per_node``) and a run holds whole nodes: then its indices are 0..gpus_per_node-1.

What is refused (counted in ``SchedulerBatch.dropped`` as ``<command>.<field>``):

- the document (:class:`SlurmParseError`): not JSON, no ``jobs`` list, Slurm's errors;
- a record (skipped): not an object, no readable ``job_id``, an unreadable state, an
  implausible start or end (before 2000, more than a day after ``now``, end before
  start), a restart count outside 0-65535 (squeue: it is the run index);
- a value (stored NULL): submit time, node count, GPU count (negative or above a
  million), exit code and signal, an unreadable host list (the run keeps no
  allocations), a ``gres_detail`` entry with indices past the node's GPUs, or a MIG
  GRES it cannot place on an instance (``gres_mig``; that node's allocations).

Allocations carry what the run holds of each GPU (collector/slurm_gres.py): ``share``
for shard/MPS GRES, ``gpu_i_ids`` for MIG instances (placed through ``devices``, each
MIG node's GRES devices in Slurm's order).

Text is stored as UTF-8 whatever bytes Slurm passed through (undecodable bytes become
U+FFFD), so one job name never costs the document.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from collector.bounds import MAX_GPUS_PER_NODE, MAX_NODES, MAX_RESTARTS
from collector.slurm_exit import Ending, run_ending
from collector.slurm_fields import (
    NOTHING_FOUND,
    PENDING_STATES,
    RUNNING_STATES,
    Drops,
    SlurmParseError,
    expand,
    infer_job_type,
    job_type_comment,
    nodes_of,
    number,
    reason_text,
    resource_nodes,
    state,
    text,
    unix_time,
)
from collector.slurm_gres import (
    Device,
    gpu_count,
    gpus_from_tres_list,
    node_holdings,
    requested_gpus,
)
from warehouse.clock import naive_utc
from warehouse.schema import SCHEMAS

__all__ = ["SchedulerBatch", "SlurmParseError", "infer_job_type", "job_ids", "job_type_comment",
           "load_jobs", "parse_sacct", "parse_squeue"]

log = logging.getLogger(__name__)
_MAX_JOB_ID = 2**63 - 1


@dataclass
class SchedulerBatch:
    """Scheduler state in the warehouse's column contracts, and what the parse refused:
    ``dropped`` (count per ``<command>.<field>``) and ``problems`` (the first messages)."""

    jobs: pa.Table
    runs: pa.Table
    allocations: pa.Table
    dropped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_rows(cls, jobs: list[dict], runs: list[dict], allocs: list[dict],
                  drops: Drops | None = None) -> SchedulerBatch:
        """Tables from row dicts (keys of SCHEMAS[...]), with ``drops``' counts."""

        def table(kind: str, rows: list[dict]) -> pa.Table:
            schema = SCHEMAS[kind]
            return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()

        return cls(table("jobs", jobs), table("runs", runs), table("allocations", allocs),
                   dict(drops.counts) if drops else {}, list(drops.messages) if drops else [])


# ----------------------------------------------------------------------- documents


def load_jobs(doc: str | bytes | dict, command: str) -> list:
    """The ``jobs`` list of a document; SlurmParseError if there is none. Bytes that are
    not UTF-8 (names are passed through as bytes) are decoded as U+FFFD."""
    if isinstance(doc, bytes | bytearray):
        doc = bytes(doc).decode("utf-8", "replace")
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except (ValueError, RecursionError) as e:
            raise SlurmParseError(f"{command}: not JSON: {e}"[:300]) from None
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{command}: expected a JSON object, got {type(doc).__name__}")
    errs = doc.get("errors")
    # Slurm 22.05's sacct reports an empty result as an error ("Nothing found",
    # error_number 9003, seen on a real 22.05.8); it is an empty list of jobs.
    if isinstance(errs, list):
        errs = [e for e in errs if not (isinstance(e, dict)
                                        and e.get("error_number") == NOTHING_FOUND)]
    if errs:
        raise SlurmParseError(f"{command} reported errors: {errs!r:.300}")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError(f"{command}: no 'jobs' list in the document")
    return jobs


def _job_id(rec, i: int, command: str) -> str:
    if not isinstance(rec, dict):
        raise SlurmParseError(f"{command} jobs[{i}]: not a job record", "record")
    jid = number(rec.get("job_id"), f"{command} jobs[{i}]: job_id", 0, _MAX_JOB_ID)
    if jid is None:
        raise SlurmParseError(f"{command} jobs[{i}]: no job_id", "job_id")
    return str(jid)


def job_ids(doc: str | bytes | dict, drops: Drops | None = None) -> list[str]:
    """The distinct job ids of a ``squeue``/``sacct`` JSON document, in order; records
    without a readable id are skipped (and counted in ``drops``)."""
    drops = drops if drops is not None else Drops("sacct")
    ids = (drops.soft(_job_id, rec, i, drops.command)
           for i, rec in enumerate(load_jobs(doc, drops.command)))
    return list(dict.fromkeys(j for j in ids if j is not None))


def _each_record(jobs: list, drops: Drops, read):
    """``read(i, rec)`` for every record; a record that fails costs itself (counted)."""
    for i, rec in enumerate(jobs):
        try:
            yield read(i, rec)
        except SlurmParseError as err:
            drops.add(err)
        except Exception as exc:  # noqa: BLE001 - a bug must cost a record, not the cycle
            log.exception("%s jobs[%d]: unexpected error", drops.command, i)
            drops.add(SlurmParseError(f"{drops.command} jobs[{i}]: unexpected "
                                      f"{type(exc).__name__}: {exc}", "internal_error"))


def _reason(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


# ----------------------------------------------------------------------- squeue


def parse_squeue(doc: str | bytes | dict, now: datetime, job_type_regex: str | None = None,
                 gpus_per_node: int | None = None,
                 devices: Mapping[str, Sequence[Device]] | None = None) -> SchedulerBatch:
    """Jobs, current runs and GPU allocations from ``squeue --json``.

    ``now`` (the time of the query) bounds the times: a start in the future means not
    started yet. ``job_type_regex``: see :func:`infer_job_type`. ``gpus_per_node``
    bounds GPU indices (else 128). ``devices``: per node with MIG instances, its GRES
    devices in Slurm's order (:func:`collector.slurm_gres.device_order`), so a MIG GRES
    index becomes (GPU, GPU instance). Raises :class:`SlurmParseError` only for the
    document; bad records and values are counted in the result's ``dropped``.
    """
    now = naive_utc(now)
    drops = Drops("squeue")
    jobs, runs, allocs = [], [], []
    read = lambda i, rec: _squeue_record(i, rec, now, job_type_regex,  # noqa: E731
                                         gpus_per_node or MAX_GPUS_PER_NODE, drops,
                                         devices or {})
    for job, run, alloc in _each_record(load_jobs(doc, "squeue"), drops, read):
        jobs.append(job)
        if run is not None:
            runs.append(run)
            allocs += alloc
    return SchedulerBatch.from_rows(jobs, runs, allocs, drops)


def _squeue_record(i: int, rec, now: datetime, job_type_regex: str | None, max_index: int,
                   drops: Drops, devices: Mapping[str, Sequence[Device]]):
    jid = _job_id(rec, i, "squeue")
    what = f"squeue job {jid}"
    st = state(rec.get("job_state"), f"{what}: job_state")
    restart = number(rec.get("restart_cnt"), f"{what}: restart_cnt", 0, MAX_RESTARTS) or 0
    start = None if st in PENDING_STATES else unix_time(rec.get("start_time"),
                                                        f"{what}: start_time", now)
    started = start is not None and start <= now
    finished = started and st not in RUNNING_STATES
    end = unix_time(rec.get("end_time"), f"{what}: end_time", now) if finished else None
    if end is not None and end < start:
        raise SlurmParseError(f"{what}: end_time {end} is before start_time {start}",
                              "end_time")
    node_count = drops.soft(number, rec.get("node_count"), f"{what}: node_count", 0, MAX_NODES)
    gpus = drops.soft(_squeue_gpus, rec, started, node_count, what)
    name = text(rec.get("name"))
    job = {
        "job_id": jid, "name": name, "user_name": text(rec.get("user_name")),
        "account": text(rec.get("account")), "partition": text(rec.get("partition")),
        "job_type": infer_job_type(rec.get("comment"), name, job_type_regex),
        "state": st,
        "submit_ts": drops.soft(unix_time, rec.get("submit_time"), f"{what}: submit_time",
                                now),
        "start_ts": start if started and restart == 0 else None,
        "end_ts": end, "gpus": gpus, "nodes": node_count, "restarts": restart,
    }
    if not started:
        return job, None, []
    nodelist = nodes_of(rec.get("nodes"))
    holdings = _gres_holdings(rec, nodelist, what, max_index, drops, devices)
    allocs = [{"job_id": jid, "run_index": restart, "node": node, "gpu_index": h.gpu_index,
               "start_ts": start, "end_ts": end, "share": h.share,
               "gpu_i_ids": list(h.gpu_i_ids) if h.gpu_i_ids else None}
              for node, held in holdings for h in held]
    if any(h.devices for _, held in holdings for h in held):  # gres_detail is the truth
        job["gpus"] = gpus = sum(h.devices for _, held in holdings for h in held)
    ending = run_ending(rec, st, what, drops) if finished else Ending(None, None)
    run = {"job_id": jid, "run_index": restart, "start_ts": start, "end_ts": end, "state": st,
           "exit_code": ending.exit_code, "signal": ending.signal,
           "reason": _reason(reason_text(rec.get("state_reason")), ending.note),
           "failed_node": None, "gpus": gpus, "nodelist": nodelist}
    return job, run, allocs


def _squeue_gpus(rec: dict, started: bool, node_count: int | None, what: str) -> int | None:
    """GPUs from the TRES strings: allocated (if started), requested, per-entity requests."""
    gpus = gpu_count(rec.get("tres_alloc_str"), f"{what}: tres_alloc_str") if started else None
    if gpus is None:
        gpus = gpu_count(rec.get("tres_req_str"), f"{what}: tres_req_str")
    if gpus is None:
        gpus = requested_gpus(rec, node_count, what)
    return gpus


def _gres_holdings(rec: dict, nodelist: str | None, what: str, max_index: int,
                   drops: Drops, devices: Mapping[str, Sequence[Device]]
                   ) -> list[tuple[str, list]]:
    """(node, what the run holds of each GPU: collector.slurm_gres.Holding) per allocated
    node from ``gres_detail``; a node whose entry is refused holds nothing (counted)."""
    detail = rec.get("gres_detail") or []
    if not isinstance(detail, list):
        drops.add(SlurmParseError(f"{what}: gres_detail is not a list: {detail!r:.80}",
                                  "gres_detail"))
        return []
    if not detail:
        return []
    names = drops.soft(resource_nodes, rec, what)
    if not names:
        names = drops.soft(expand, nodelist, f"{what}: nodes", default=[])
    if len(detail) != len(names):
        drops.add(SlurmParseError(
            f"{what}: {len(detail)} gres_detail entries for {len(names)} nodes "
            f"({nodelist!r:.80}); cannot pair GPUs with nodes", "gres_detail"))
        return []
    out = []
    for node, entry in zip(names, detail, strict=True):
        if not isinstance(entry, str):
            drops.add(SlurmParseError(f"{what}: gres_detail entry {entry!r:.80}",
                                      "gres_detail"))
            continue
        out.append((node, drops.soft(
            lambda e, node=node: node_holdings(e, f"{what}: gres_detail on {node}",
                                               devices=devices.get(node),
                                               max_index=max_index), entry, default=[])))
    return out


# ----------------------------------------------------------------------- sacct


def parse_sacct(doc: str | bytes | dict, gpus_per_node: int | None = None,
                job_type_regex: str | None = None,
                now: datetime | None = None,
                mig_nodes: Collection[str] = ()) -> SchedulerBatch:
    """Jobs, runs (one per sacct record that started) and allocations from ``sacct -D``.

    Records of one job id are ordered by start time to number the runs. The job's
    state and end are those of its last record; its submit time the earliest; its start
    the first run's; ``restarts`` the number of runs before the last. Allocations: see
    the module docstring (``gpus_per_node``; never for a run on one of ``mig_nodes``,
    whose GRES gpu count is MIG instances, not GPUs). Job types: see
    :func:`infer_job_type`. ``now`` bounds the times (at most a day after it; without
    ``now``, before 2100).
    Raises :class:`SlurmParseError` only for the document; bad records and values are
    counted in the result's ``dropped``.
    """
    now = naive_utc(now) if now is not None else None
    drops = Drops("sacct")
    by_job: dict[str, list[dict]] = {}
    read = lambda i, rec: _sacct_record(i, rec, now, job_type_regex, drops)  # noqa: E731
    for rec in _each_record(load_jobs(doc, "sacct"), drops, read):
        by_job.setdefault(rec["job_id"], []).append(rec)
    jobs, runs, allocs = [], [], []
    for jid, recs in by_job.items():
        recs.sort(key=lambda r: (r["start"] is None, r["start"] or datetime.min, r["pos"]))
        started = [r for r in recs if r["start"] is not None]
        runs += _sacct_runs(jid, started)
        allocs += _whole_node_allocations(jid, started, gpus_per_node, drops, mig_nodes)
        jobs.append(_sacct_job(jid, recs, started))
    return SchedulerBatch.from_rows(jobs, runs, allocs, drops)


def _sacct_record(pos: int, rec, now: datetime | None, job_type_regex: str | None,
                  drops: Drops) -> dict:
    """One sacct record (one run, or a job that never started) as a flat dict."""
    jid = _job_id(rec, pos, "sacct")
    what = f"sacct job {jid}"
    state_v, reason = rec.get("state"), None
    if isinstance(state_v, dict):  # sacct: {"current": .., "reason": ..}
        state_v, reason = state_v.get("current"), state_v.get("reason")
    st = state(state_v, f"{what}: state")
    t = rec.get("time") or {}
    if not isinstance(t, dict):
        raise SlurmParseError(f"{what}: 'time' is not an object", "time")
    start = unix_time(t.get("start"), f"{what}: time.start", now)
    end = unix_time(t.get("end"), f"{what}: time.end", now)
    if start is not None and end is not None and end < start:
        raise SlurmParseError(f"{what}: time.end {end} is before time.start {start}",
                              "time.end")
    ending = run_ending(rec, st, what, drops) if end else Ending(None, None)
    tres = rec.get("tres") if isinstance(rec.get("tres"), dict) else {}
    name = text(rec.get("name"))
    return {
        "job_id": jid, "pos": pos, "name": name,
        "job_type": infer_job_type(rec.get("comment"), name, job_type_regex),
        "user_name": text(rec.get("user")) or text(rec.get("user_name")),
        "account": text(rec.get("account")), "partition": text(rec.get("partition")),
        "state": st, "reason": _reason(reason_text(reason), ending.note),
        "submit": drops.soft(unix_time, t.get("submission"), f"{what}: time.submission", now),
        "start": start, "end": end if start else None, "end_raw": end,
        "code": ending.exit_code, "signal": ending.signal,
        "nodelist": nodes_of(rec.get("nodes")) if start else None,
        "nnodes": drops.soft(number, rec.get("allocation_nodes"), f"{what}: allocation_nodes",
                             0, MAX_NODES),
        "gpus": drops.soft(gpus_from_tres_list, tres.get("allocated"), what) if start else None,
        "gpus_req": drops.soft(gpus_from_tres_list, tres.get("requested"), what),
        "restart_cnt": drops.soft(number, rec.get("restart_cnt"), f"{what}: restart_cnt",
                                  0, MAX_RESTARTS),
    }


def _gpus(r: dict) -> int | None:
    return r["gpus"] if r["gpus"] is not None else r["gpus_req"]


def _sacct_runs(jid: str, started: list[dict]) -> list[dict]:
    return [{"job_id": jid, "run_index": i, "start_ts": r["start"], "end_ts": r["end"],
             "state": r["state"], "exit_code": r["code"], "signal": r["signal"],
             "reason": r["reason"], "failed_node": None, "gpus": _gpus(r),
             "nodelist": r["nodelist"]}
            for i, r in enumerate(started)]


def _whole_node_allocations(jid: str, started: list[dict], gpus_per_node: int | None,
                            drops: Drops, mig_nodes: Collection[str] = ()) -> list[dict]:
    """GPU indices 0..gpus_per_node-1 on every node of runs that hold whole nodes; not for
    runs on a MIG node (its GRES gpus are instances: as many is not the node, issue 21)."""
    out = []
    if not gpus_per_node:
        return out
    for i, r in enumerate(started):
        names = drops.soft(expand, r["nodelist"], f"sacct job {jid}: nodes", default=[])
        if names and _gpus(r) == gpus_per_node * len(names) and not any(
                n in mig_nodes for n in names):
            out += [{"job_id": jid, "run_index": i, "node": node, "gpu_index": g,
                     "start_ts": r["start"], "end_ts": r["end"]}
                    for node in names for g in range(gpus_per_node)]
    return out


def _sacct_job(jid: str, recs: list[dict], started: list[dict]) -> dict:
    last = recs[-1]
    terminal = last["state"] not in RUNNING_STATES | PENDING_STATES
    submits = [r["submit"] for r in recs if r["submit"] is not None]
    restarts = max([len(started) - 1, 0] + [r["restart_cnt"] or 0 for r in recs])
    if last["start"] is None and started:  # queued again after a requeue
        restarts = max(restarts, len(started))
    return {
        "job_id": jid, "name": last["name"], "user_name": last["user_name"],
        "account": last["account"], "partition": last["partition"],
        "job_type": next((r["job_type"] for r in reversed(recs) if r["job_type"]), None),
        "state": last["state"], "submit_ts": min(submits) if submits else None,
        "start_ts": started[0]["start"] if started else None,
        "end_ts": last["end_raw"] if terminal else None, "gpus": _gpus(last),
        "nodes": last["nnodes"] or None, "restarts": restarts,
    }
