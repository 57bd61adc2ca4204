"""Slurm as a source: ``squeue --json``, incremental ``sacct --json -D``, jobcomp fallback.

Transport only (the JSON is parsed by :mod:`collector.slurm`, jobcomp lines by
:mod:`collector.jobcomp`). Each cycle:

1. ``sacct --json -D -a -S <since> -E now`` names the jobs active since the last
   successful read minus ``overlap_s`` (runs that ended while a read was in flight are
   not lost; the warehouse upserts, so overlap is harmless); ``sacct --json -D -a -j
   <ids>`` then reads every run of those jobs (requeues included).
   The first read after a start looks back ``lookback_s``. Commands run with
   ``TZ=UTC`` because sacct reads ``-S``/``-E`` in the local time zone.
2. When sacct fails (accounting disabled, slurmdbd down) and a jobcomp file is
   configured, the new lines of the jobcomp file stand in for it.
3. ``squeue --json``: running and pending jobs with their nodes and GPU indices, written
   last because it is the newest view of the running jobs. A run that has ended is
   taken from the history when the history has it (sacct knows the steps: the batch
   step's signal, the DerivedExitCode), with squeue's exit code where the history has
   none; from squeue otherwise.

Units of failure: a bad value or record costs itself (counted in ``source.dropped`` per
``<command>.<field>``, see :mod:`collector.slurm`); a ``sacct -j`` answer that cannot be
read is split in halves until the one job that spoils it is found and skipped (counted
as ``sacct.document``), so the window always advances; a command that fails is marked
down in ``source.status`` (shown in ``/healthz``) and the others still deliver. Only a
cycle in which every command failed raises (the service backs the source off). Output
is decoded as UTF-8 with undecodable bytes replaced: Slurm passes job names and
comments through as bytes.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from collector.jobcomp import JobcompReader
from collector.sanitize import DropCounter
from collector.slurm import SchedulerBatch, SlurmParseError, job_ids, parse_sacct, parse_squeue
from collector.slurm_fields import Drops
from collector.slurm_gres import Device, device_order
from gpulens.settings import default

__all__ = ["CommandStatus", "SlurmCommandError", "SlurmSource", "run_command"]

log = logging.getLogger(__name__)

JOBS_PER_READ = 500  # job ids per ``sacct -j`` (keeps the command line short)
COMMAND_TIMEOUT_S = 60.0  # seconds squeue or sacct may take, else the command failed


class SlurmCommandError(RuntimeError):
    """A Slurm command failed; the message has its exit status and stderr."""


def run_command(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Run a Slurm client command with ``TZ=UTC``; its stdout, or SlurmCommandError."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout_s,
                              env={**os.environ, "TZ": "UTC"}, check=False)
    except FileNotFoundError:
        raise SlurmCommandError(f"{argv[0]}: not found (install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(f"{argv[0]}: no answer within {timeout_s:g} s") from None
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        err = (proc.stderr.decode("utf-8", "replace") or out).strip().splitlines()
        raise SlurmCommandError(
            f"{' '.join(argv[:2])} exited {proc.returncode}: {err[-1] if err else ''}")
    return out


@dataclass
class CommandStatus:
    """Per-command state (``source.status[command]``), shown in ``/healthz`` like a
    scrape target: up, and the last error."""

    url: str  # the command
    up: bool = False
    last_success: datetime | None = None
    last_error: str | None = None


def _concat(parts: list[SchedulerBatch]) -> SchedulerBatch:
    if not parts:
        return SchedulerBatch.from_rows([], [], [])
    return SchedulerBatch(*(pa.concat_tables([getattr(p, k) for p in parts])
                            for k in ("jobs", "runs", "allocations")))


def _merge_ended(history: SchedulerBatch,
                 current: SchedulerBatch) -> tuple[SchedulerBatch, SchedulerBatch]:
    """Ended runs delivered by both the history (sacct, jobcomp) and squeue: the
    history's row stands (it knows the steps: the batch step's signal, DerivedExitCode),
    with squeue's code and signal where the history has none (22.05's sacct prints 0 for
    a failed step; its squeue still has the DerivedExitCode). squeue is written last, so
    its row of such a run is left out."""
    hist = history.runs.to_pylist()
    ended = {(r["job_id"], r["run_index"]): r for r in hist if r["end_ts"] is not None}
    if not ended or not current.runs.num_rows:
        return history, current
    keep, changed = [], False
    for row in current.runs.to_pylist():
        mine = ended.get((row["job_id"], row["run_index"]))
        keep.append(row["end_ts"] is None or mine is None)
        if keep[-1] or mine["exit_code"] or mine["signal"]:
            continue
        if row["exit_code"] or row["signal"]:
            mine["exit_code"], mine["signal"], changed = row["exit_code"], row["signal"], True
            mine["reason"] = "; ".join(p for p in (mine["reason"], row["reason"]) if p) or None
    if changed:
        history = SchedulerBatch(history.jobs, pa.Table.from_pylist(hist, history.runs.schema),
                                 history.allocations, history.dropped, history.problems)
    current = SchedulerBatch(current.jobs, current.runs.filter(pa.array(keep)),
                             current.allocations, current.dropped, current.problems)
    return history, current


def _batches(part: SchedulerBatch) -> list[tuple[str, pa.Table]]:
    return [("jobs", part.jobs), ("runs", part.runs), ("allocations", part.allocations)]


def _stamp(ts: datetime) -> str:
    """naive-UTC datetime -> sacct's ``YYYY-MM-DDTHH:MM:SS``."""
    return ts.strftime("%Y-%m-%dT%H:%M:%S")


class SlurmSource:
    """Source ``slurm``: jobs, runs and GPU allocations from Slurm's client commands.

    ``run`` executes a command and returns stdout (tests inject recorded answers).
    ``squeue``/``sacct`` are the commands (``sacct=""`` turns accounting off);
    ``jobcomp_file`` the jobcomp/filetxt log used when sacct is off or failing.
    """

    name = "slurm"

    def __init__(
        self,
        *,
        interval_s: float = default("slurm.interval_s"),
        squeue: str = default("slurm.squeue"),
        sacct: str = default("slurm.sacct"),
        jobcomp_file: str = "",
        jobcomp_tz: str = default("slurm.jobcomp_tz"),
        overlap_s: float = default("slurm.sacct_overlap_min") * 60,
        lookback_s: float = default("slurm.lookback_h") * 3600,
        gpus_per_node: int | None = None,
        job_type_regex: str | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
        run: Callable[[Sequence[str]], str] | None = None,
        mig_layout: Callable[[datetime], Mapping[str, tuple]] | None = None,
    ):
        self.interval_s = interval_s  # seconds between cycles
        self.squeue, self.sacct = squeue, sacct
        self.overlap = timedelta(seconds=overlap_s)
        self.lookback = timedelta(seconds=lookback_s)
        self.gpus_per_node = gpus_per_node
        self.job_type_regex = job_type_regex or None
        self.run = run or (lambda argv: run_command(argv, timeout_s))
        # per node with MIG: (GPU indices, [(gpu_index, gpu_i_id, profile)]) at a time
        self.mig_layout = mig_layout
        self.jobcomp = (JobcompReader(jobcomp_file, tz=jobcomp_tz,
                                      job_type_regex=self.job_type_regex)
                        if jobcomp_file else None)
        self.sacct_since: datetime | None = None  # start of the last successful read
        self.sacct_error: str | None = None  # why the last sacct read failed, if it did
        self.dropped = DropCounter()  # records and values refused, per <command>.<field>
        self.status: dict[str, CommandStatus] = {"squeue": CommandStatus(squeue)}
        if sacct:
            self.status["sacct"] = CommandStatus(sacct)
        if self.jobcomp is not None:
            self.status["jobcomp"] = CommandStatus(jobcomp_file)

    def _count(self, batch: SchedulerBatch) -> SchedulerBatch:
        self.dropped.add(batch.dropped)
        for message in batch.problems:
            log.warning("slurm: refused %s", message)
        return batch

    def _read_jobs(self, ids: list[str], ts: datetime, drops: Drops,
                   mig_nodes: frozenset[str] = frozenset()) -> list[SchedulerBatch]:
        """``sacct -j`` for ``ids``; an answer that cannot be read is split in halves until
        the job that spoils it is found, skipped and counted (``sacct.document``).
        ``mig_nodes``: no whole-node allocations there (collector.slurm.parse_sacct)."""
        doc = self.run([self.sacct, "--json", "-D", "-a", "-j", ",".join(ids)])
        try:
            return [self._count(parse_sacct(doc, self.gpus_per_node, self.job_type_regex,
                                            now=ts, mig_nodes=mig_nodes))]
        except SlurmParseError as err:
            if len(ids) == 1:
                drops.add(SlurmParseError(f"sacct -j {ids[0]}: {err}", "document"))
                return []
        half = len(ids) // 2
        return (self._read_jobs(ids[:half], ts, drops, mig_nodes)
                + self._read_jobs(ids[half:], ts, drops, mig_nodes))

    def read_sacct(self, ts: datetime) -> SchedulerBatch:
        """Every run of the jobs active since the last read (minus the overlap) up to ``ts``.

        Two reads: the window (``-S``/``-E``) names the jobs that changed; then all
        records of those jobs (``-j``, no window). A window can hold only some runs of
        a requeued job (seen on Slurm 22.05.8), and runs are numbered by their order
        among all of the job's records, so the numbering needs all of them.
        """
        since = (self.sacct_since - self.overlap) if self.sacct_since else ts - self.lookback
        window = self.run([self.sacct, "--json", "-D", "-a", "-S", _stamp(since),
                           "-E", _stamp(ts + timedelta(seconds=1))])
        drops = Drops("sacct")
        ids = job_ids(window, drops)
        parts = []
        mig = frozenset(self._devices(ts)) if self.gpus_per_node and ids else frozenset()
        for i in range(0, len(ids), JOBS_PER_READ):
            parts += self._read_jobs(ids[i:i + JOBS_PER_READ], ts, drops, mig)
        self.dropped.add(drops.counts)
        for message in drops.messages:
            log.warning("slurm: refused %s", message)
        self.sacct_since = ts
        return _concat(parts)

    def _attempt(self, command: str, ts: datetime, read):
        """``read()`` with ``status[command]`` kept; None (and the error kept) if it failed."""
        st = self.status[command]
        try:
            result = read()
        except Exception as exc:  # noqa: BLE001 - one command down is not the cycle
            st.up, st.last_error = False, f"{type(exc).__name__}: {exc}"
            log.warning("slurm: %s failed: %s", command, st.last_error)
            return None
        st.up, st.last_success, st.last_error = True, ts, None
        return result

    def _devices(self, ts: datetime) -> dict[str, tuple[Device, ...]]:
        """Per node with MIG instances, its GRES devices in Slurm's order (issue 21); none
        when no layout is given or it cannot be read (MIG GRES are then refused)."""
        if self.mig_layout is None:
            return {}
        try:
            layout = self.mig_layout(ts)
        except Exception as exc:  # noqa: BLE001 - no layout costs the MIG nodes, not squeue
            log.warning("slurm: MIG layout unreadable: %s", exc)
            return {}
        return {node: device_order(gpus, inst) for node, (gpus, inst) in layout.items()}

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """One cycle at ``ts`` (naive UTC): sacct (or jobcomp), then squeue. Raises only
        when every command failed (the first error)."""
        ts = ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
        batches: list[tuple[str, pa.Table]] = []
        history = None
        if self.sacct:
            history = self._attempt("sacct", ts, lambda: self.read_sacct(ts))
            self.sacct_error = self.status["sacct"].last_error
        if history is None and self.jobcomp is not None:
            history = self._attempt("jobcomp", ts,
                                    lambda: self._count(self.jobcomp.read(now=ts)))
        current = self._attempt("squeue", ts, lambda: self._count(parse_squeue(
            self.run([self.squeue, "--json"]), ts, self.job_type_regex, self.gpus_per_node,
            self._devices(ts))))
        if history is not None and current is not None:
            history, current = _merge_ended(history, current)
        for part in (history, current):  # squeue last: the newest view of running jobs
            if part is not None:
                batches += _batches(part)
        if not batches:
            errors = [f"{k}: {st.last_error}" for k, st in self.status.items() if not st.up]
            raise SlurmCommandError("; ".join(errors))
        return batches
