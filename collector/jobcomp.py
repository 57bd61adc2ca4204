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
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from collector.slurm import SchedulerBatch, _tables, infer_job_type

__all__ = ["JobcompReader", "parse_jobcomp_line", "parse_jobcomp_lines"]

KEYS = ("JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit",
        "StartTime", "EndTime", "NodeList", "NodeCnt", "ProcCnt", "WorkDir",
        "ReservationName", "Tres", "Account", "QOS", "WcKey", "Cluster", "SubmitTime",
        "EligibleTime", "ArrayJobId", "ArrayTaskId", "HetJobId", "HetJobOffset",
        "DerivedExitCode", "ExitCode")
_SPLIT = re.compile(r"(?:^|\s)(" + "|".join(KEYS) + r")=")
REQUEUE_LOGGED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
_GPUS = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")


def parse_jobcomp_line(line: str) -> dict[str, str]:
    """The ``Key=value`` fields of one line (unknown keys stay inside the value before)."""
    parts = _SPLIT.split(line.strip())
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _time(v: str | None, tz) -> datetime | None:
    if not v or v in ("Unknown", "None", "0"):
        return None
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        return None
    return t.replace(tzinfo=tz).astimezone(UTC).replace(tzinfo=None)


def _exit(v: str | None) -> tuple[int | None, int | None]:
    if not v or ":" not in v:
        return None, None
    code, _, sig = v.partition(":")
    return (int(code) if code.isdigit() else None), (int(sig) or None if sig.isdigit() else None)


def _gpus(tres: str | None) -> int | None:
    found = [int(x) for x in _GPUS.findall(tres or "")]
    return sum(found) if found else None


def parse_jobcomp_lines(
    lines: list[str],
    *,
    runs_seen: dict[str, int] | None = None,
    tz: str = "UTC",
    job_type_regex: str | None = None,
) -> SchedulerBatch:
    """Jobs and runs of jobcomp lines; ``runs_seen`` (job -> runs already read) is updated.

    Each line is one ended run: its ``run_index`` is the number of runs of that job
    seen before it. The job row carries the state and end of its newest line; a run
    that was requeued leaves the job's end open (the job will run again). Blank and
    unparseable lines are skipped.
    """
    zone = ZoneInfo(tz)
    seen = runs_seen if runs_seen is not None else {}
    jobs: dict[str, dict] = {}
    runs: list[dict] = []
    for line in lines:
        f = parse_jobcomp_line(line)
        jid = f.get("JobId", "")
        if not jid.isdigit():
            continue
        index = seen.get(jid, 0)
        seen[jid] = index + 1
        state = (f.get("JobState") or "").split(" ", 1)[0] or None
        # A requeued run is logged with the job's new state: PENDING on Slurm 22.05.8
        # (seen on a real cluster), REQUEUED elsewhere. The run itself was requeued.
        requeued = state in REQUEUE_LOGGED
        if requeued:
            state = "REQUEUED"
        start, end = _time(f.get("StartTime"), zone), _time(f.get("EndTime"), zone)
        code, signal = _exit(f.get("ExitCode"))
        gpus = _gpus(f.get("Tres"))
        nodelist = f.get("NodeList") or None
        if nodelist in ("(null)", "None assigned"):
            nodelist = None
        if start is not None:
            runs.append({"job_id": jid, "run_index": index, "start_ts": start, "end_ts": end,
                         "state": state, "exit_code": code, "signal": signal, "reason": None,
                         "failed_node": None, "gpus": gpus, "nodelist": nodelist})
        user = (f.get("UserId") or "").split("(")[0] or None
        node_cnt = f.get("NodeCnt", "")
        jobs[jid] = {
            "job_id": jid, "name": f.get("Name") or None, "user_name": user,
            "account": f.get("Account") or None, "partition": f.get("Partition") or None,
            "job_type": infer_job_type(None, f.get("Name"), job_type_regex),
            "state": "PENDING" if requeued else state,
            "submit_ts": _time(f.get("SubmitTime"), zone) if index == 0 else None,
            "start_ts": start if index == 0 else None,
            "end_ts": None if requeued else end, "gpus": gpus,
            "nodes": int(node_cnt) if node_cnt.isdigit() else None,
            "restarts": index + (1 if requeued else 0),
        }
    return _tables(list(jobs.values()), runs, [])


class JobcompReader:
    """Reads a jobcomp/filetxt file incrementally (from offset 0 after a restart)."""

    def __init__(self, path: str, *, tz: str = "UTC", job_type_regex: str | None = None):
        self.path = path
        self.tz = tz
        self.job_type_regex = job_type_regex
        self.offset = 0  # bytes of the file already read (whole lines only)
        self.runs_seen: dict[str, int] = {}

    def read(self) -> SchedulerBatch:
        """The runs appended since the last read; a truncated/rotated file starts over."""
        size = os.path.getsize(self.path)
        if size < self.offset:
            self.offset, self.runs_seen = 0, {}
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = complete.decode("utf-8", "replace").splitlines()
        return parse_jobcomp_lines(lines, runs_seen=self.runs_seen, tz=self.tz,
                                   job_type_regex=self.job_type_regex)

