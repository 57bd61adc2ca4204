"""Slurm's job-completion log (``JobCompType=jobcomp/filetxt``): the fallback for sacct.

Where accounting (slurmdbd) is off, slurmctld can still append one line per finished
run to a text file::

    JobId=12 UserId=alice(1000) GroupId=alice(1000) Name=train JobState=COMPLETED
    Partition=gpu TimeLimit=60 StartTime=2026-11-02T10:00:00 EndTime=2026-11-02T11:00:00
    NodeList=gpu[001-002] NodeCnt=2 ProcCnt=16 WorkDir=/home/alice ReservationName=
    Tres=cpu=16,node=2,billing=16,gres/gpu=16 Account=ml QOS=normal WcKey= Cluster=c1
    SubmitTime=2026-11-02T09:59:00 EligibleTime=2026-11-02T09:59:00 DerivedExitCode=0:0
    ExitCode=0:0

(one line in the file). Values are not quoted, so a job name with blanks is recovered
by splitting only before the known keys. Times are slurmctld's local time (``tz``).
A requeued job logs one line per ended run (a requeued run with state PENDING on
Slurm 22.05, REQUEUED on others; stored as REQUEUED); runs are
numbered by their order in the file, which is why :class:`JobcompReader` reads the file
from its start after a restart and then incrementally by offset.

One bad line costs that line: a line without a numeric JobId, with an implausible time
(before 2000, more than a day after now, an end before its start), an exit code or
signal out of range, or an absurd node or GPU count is skipped and counted in the
batch's ``dropped`` (``jobcomp.<field>``); the lines around it are kept. The reader
moves its offset only past lines it has parsed. Bytes that are not UTF-8 (names are
bytes to Slurm) are read as U+FFFD. The exit code follows collector.slurm_exit: a clean
``ExitCode`` with a non-zero ``DerivedExitCode`` (a failed srun step) keeps the derived
code and says so in the run's reason.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from collector.bounds import (
    MAX_EXIT_CODE,
    MAX_GPUS_PER_JOB,
    MAX_NODES,
    MAX_SIGNAL,
    plausible_time,
)
from collector.slurm import SchedulerBatch, infer_job_type
from collector.slurm_fields import Drops, SlurmParseError, clean_text
from warehouse.clock import naive_utc, utcnow

__all__ = ["JobcompError", "JobcompReader", "parse_jobcomp_line", "parse_jobcomp_lines"]

KEYS = ("JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit",
        "StartTime", "EndTime", "NodeList", "NodeCnt", "ProcCnt", "WorkDir",
        "ReservationName", "Tres", "Account", "QOS", "WcKey", "Cluster", "SubmitTime",
        "EligibleTime", "ArrayJobId", "ArrayTaskId", "HetJobId", "HetJobOffset",
        "DerivedExitCode", "ExitCode")
_SPLIT = re.compile(r"(?:^|\s)(" + "|".join(KEYS) + r")=")
REQUEUE_LOGGED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
_GPUS = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d{1,12})(?=,|$)")
_UNTYPED_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d{1,12})(?=,|$)")
_EXIT = re.compile(r"(\d{1,6}):(\d{1,6})")
_DIGITS = re.compile(r"\d{1,12}")


class JobcompError(SlurmParseError):
    """One jobcomp line that cannot be read; the message names the line and the field,
    ``reason`` the field (the key it is counted under)."""


def parse_jobcomp_line(line: str) -> dict[str, str]:
    """The ``Key=value`` fields of one line (unknown keys stay inside the value before)."""
    parts = _SPLIT.split(line.strip())
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _time(v: str | None, tz, what: str, now: datetime) -> datetime | None:
    if not v or v in ("Unknown", "None", "0"):
        return None
    try:
        t = datetime.fromisoformat(v).replace(tzinfo=tz).astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise JobcompError(f"{what}: {v!r:.40} is not a time", what.rsplit(" ", 1)[-1]) from None
    if not plausible_time(t, now):
        raise JobcompError(f"{what}: {v!r:.40} is not a plausible time",
                           what.rsplit(" ", 1)[-1])
    return t


def _exit(v: str | None, what: str) -> tuple[int | None, int | None]:
    m = _EXIT.fullmatch(v or "")
    if not m:
        return None, None
    code, sig = int(m.group(1)), int(m.group(2))
    if code > MAX_EXIT_CODE or sig > MAX_SIGNAL:
        raise JobcompError(f"{what}: {v!r} is not an exit code:signal", what.rsplit(" ", 1)[-1])
    return code, sig or None


def _count(v: str | None, hi: int, what: str) -> int | None:
    if not v:
        return None
    if not _DIGITS.fullmatch(v) or int(v) > hi:
        raise JobcompError(f"{what}: {v!r:.40} is not a count up to {hi}",
                           what.rsplit(" ", 1)[-1])
    return int(v)


def _gpus(tres: str | None, what: str) -> int | None:
    untyped = _UNTYPED_GPUS.findall(tres or "")
    found = [int(x) for x in (untyped or _GPUS.findall(tres or ""))]
    total = sum(found) if found else None
    if total is not None and total > MAX_GPUS_PER_JOB:
        raise JobcompError(f"{what}: {total} GPUs", "gpus")
    return total


def _run_of_line(f: dict[str, str], lineno: int, zone, now: datetime) -> dict:
    """The fields of one run from one line; JobcompError naming the line and field."""
    jid = f.get("JobId", "")
    if not _DIGITS.fullmatch(jid):
        raise JobcompError(f"jobcomp line {lineno}: no numeric JobId", "JobId")
    what = f"jobcomp line {lineno} (job {jid})"
    state = (f.get("JobState") or "").split(" ", 1)[0] or None
    start = _time(f.get("StartTime"), zone, f"{what} StartTime", now)
    end = _time(f.get("EndTime"), zone, f"{what} EndTime", now)
    if start is not None and end is not None and end < start:
        raise JobcompError(f"{what}: EndTime {end} is before StartTime {start}", "EndTime")
    code, signal = _exit(f.get("ExitCode"), f"{what} ExitCode")
    note = None
    if not code and not signal:
        dcode, dsignal = _exit(f.get("DerivedExitCode"), f"{what} DerivedExitCode")
        if dcode or dsignal:
            code, signal = dcode, dsignal
            note = f"DerivedExitCode {f.get('DerivedExitCode')}"
    if state == "FAILED" and code == 0 and not signal:
        code = None
    nodelist = f.get("NodeList") or None
    return {
        "job_id": jid, "state": state, "start": start, "end": end, "code": code,
        "signal": signal, "note": note, "gpus": _gpus(f.get("Tres"), f"{what} Tres"),
        "nodelist": None if nodelist in ("(null)", "None assigned") else nodelist,
        "nodes": _count(f.get("NodeCnt"), MAX_NODES, f"{what} NodeCnt"),
        "submit": _time(f.get("SubmitTime"), zone, f"{what} SubmitTime", now),
        "user": (f.get("UserId") or "").split("(")[0] or None, "name": f.get("Name") or None,
        "account": f.get("Account") or None, "partition": f.get("Partition") or None,
    }


def parse_jobcomp_lines(
    lines: list[str],
    *,
    runs_seen: dict[str, int] | None = None,
    tz: str = "UTC",
    job_type_regex: str | None = None,
    now: datetime | None = None,
    first_line: int = 1,
) -> SchedulerBatch:
    """Jobs and runs of jobcomp lines; ``runs_seen`` (job -> runs already read) is updated.

    Each line is one ended run: its ``run_index`` is the number of runs of that job
    seen before it. The job row carries the state and end of its newest line; a run
    that was requeued leaves the job's end open (the job will run again). Blank lines
    are skipped; bad lines are skipped and counted (the module doc). ``now`` (default:
    the clock) bounds the times; ``first_line`` numbers the lines in messages. Never
    raises for the content of a line.
    """
    zone = ZoneInfo(tz)
    now = naive_utc(now) if now is not None else utcnow()
    seen = runs_seen if runs_seen is not None else {}
    drops = Drops("jobcomp")
    jobs: dict[str, dict] = {}
    runs: list[dict] = []
    for lineno, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            r = _run_of_line(parse_jobcomp_line(clean_text(line)), lineno, zone, now)
        except SlurmParseError as err:
            drops.add(err)
            continue
        jid = r["job_id"]
        index = seen.get(jid, 0)
        seen[jid] = index + 1
        # A requeued run is logged with the job's new state: PENDING on Slurm 22.05.8
        # (seen on a real cluster), REQUEUED elsewhere. The run itself was requeued.
        requeued = r["state"] in REQUEUE_LOGGED
        state = "REQUEUED" if requeued else r["state"]
        if r["start"] is not None:
            runs.append({"job_id": jid, "run_index": index, "start_ts": r["start"],
                         "end_ts": r["end"], "state": state, "exit_code": r["code"],
                         "signal": r["signal"], "reason": r["note"], "failed_node": None,
                         "gpus": r["gpus"], "nodelist": r["nodelist"]})
        jobs[jid] = {
            "job_id": jid, "name": r["name"], "user_name": r["user"],
            "account": r["account"], "partition": r["partition"],
            "job_type": infer_job_type(None, r["name"], job_type_regex),
            "state": "PENDING" if requeued else state,
            "submit_ts": r["submit"] if index == 0 else None,
            "start_ts": r["start"] if index == 0 else None,
            "end_ts": None if requeued else r["end"], "gpus": r["gpus"],
            "nodes": r["nodes"], "restarts": index + (1 if requeued else 0),
        }
    return SchedulerBatch.from_rows(list(jobs.values()), runs, [], drops)


class JobcompReader:
    """Reads a jobcomp/filetxt file incrementally (from offset 0 after a restart)."""

    def __init__(self, path: str, *, tz: str = "UTC", job_type_regex: str | None = None):
        self.path = path
        self.tz = tz
        self.job_type_regex = job_type_regex
        self.offset = 0  # bytes of the file already read (whole lines only)
        self.lines = 0  # lines already read (to number lines in messages)
        self.runs_seen: dict[str, int] = {}

    def read(self, now: datetime | None = None) -> SchedulerBatch:
        """The runs appended since the last read; a truncated/rotated file starts over.
        The offset moves past the new lines only once they are parsed."""
        size = os.path.getsize(self.path)
        if size < self.offset:
            self.offset, self.lines, self.runs_seen = 0, 0, {}
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        lines = complete.decode("utf-8", "replace").splitlines()
        seen = dict(self.runs_seen)
        batch = parse_jobcomp_lines(lines, runs_seen=seen, tz=self.tz, now=now,
                                    job_type_regex=self.job_type_regex,
                                    first_line=self.lines + 1)
        self.offset += len(complete)
        self.lines += len(lines)
        self.runs_seen = seen
        return batch
