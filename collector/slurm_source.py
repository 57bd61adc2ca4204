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
   last because it is the newest view of the running jobs.

A failure of squeue fails the cycle (the service backs the source off).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from collector.jobcomp import JobcompReader
from collector.slurm import SchedulerBatch, job_ids, parse_sacct, parse_squeue

__all__ = ["SlurmCommandError", "SlurmSource", "run_command"]

JOBS_PER_READ = 500  # job ids per ``sacct -j`` (keeps the command line short)


class SlurmCommandError(RuntimeError):
    """A Slurm command failed; the message has its exit status and stderr."""


def run_command(argv: Sequence[str], timeout_s: float = 60.0) -> str:
    """Run a Slurm client command with ``TZ=UTC``; its stdout, or SlurmCommandError."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "TZ": "UTC"}, check=False)
    except FileNotFoundError:
        raise SlurmCommandError(f"{argv[0]}: not found (install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(f"{argv[0]}: no answer within {timeout_s:g} s") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmCommandError(
            f"{' '.join(argv[:2])} exited {proc.returncode}: {err[-1] if err else ''}")
    return proc.stdout


def _concat(parts: list[SchedulerBatch]) -> SchedulerBatch:
    if not parts:
        return parse_sacct({"jobs": []})
    return SchedulerBatch(*(pa.concat_tables([getattr(p, k) for p in parts])
                            for k in ("jobs", "runs", "allocations")))


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
        interval_s: float = 30.0,
        squeue: str = "squeue",
        sacct: str = "sacct",
        jobcomp_file: str = "",
        jobcomp_tz: str = "UTC",
        overlap_s: float = 600.0,
        lookback_s: float = 86_400.0,
        gpus_per_node: int | None = None,
        job_type_regex: str | None = None,
        timeout_s: float = 60.0,
        run: Callable[[Sequence[str]], str] | None = None,
    ):
        self.interval_s = interval_s  # seconds between cycles
        self.squeue, self.sacct = squeue, sacct
        self.overlap = timedelta(seconds=overlap_s)
        self.lookback = timedelta(seconds=lookback_s)
        self.gpus_per_node = gpus_per_node
        self.job_type_regex = job_type_regex or None
        self.run = run or (lambda argv: run_command(argv, timeout_s))
        self.jobcomp = (JobcompReader(jobcomp_file, tz=jobcomp_tz,
                                      job_type_regex=self.job_type_regex)
                        if jobcomp_file else None)
        self.sacct_since: datetime | None = None  # start of the last successful read
        self.sacct_error: str | None = None  # why the last sacct read failed, if it did

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
        ids = job_ids(window)
        parts = [parse_sacct(self.run([self.sacct, "--json", "-D", "-a",
                                       "-j", ",".join(ids[i:i + JOBS_PER_READ])]),
                             self.gpus_per_node, self.job_type_regex)
                 for i in range(0, len(ids), JOBS_PER_READ)]
        self.sacct_since = ts
        return _concat(parts)

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """One cycle at ``ts`` (naive UTC): sacct (or jobcomp), then squeue."""
        ts = ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
        batches: list[tuple[str, pa.Table]] = []
        history = None
        if self.sacct:
            try:
                history = self.read_sacct(ts)
                self.sacct_error = None
            except Exception as exc:
                if self.jobcomp is None:
                    raise
                self.sacct_error = f"{type(exc).__name__}: {exc}"
        if history is None and self.jobcomp is not None:
            history = self.jobcomp.read()
        if history is not None:
            batches += _batches(history)
        doc = self.run([self.squeue, "--json"])
        batches += _batches(parse_squeue(doc, ts, self.job_type_regex))
        return batches
