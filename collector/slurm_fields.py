"""Reading single fields of Slurm's JSON, in every format from 22.05 to 25.11.

See collector/slurm.py for the formats. Every reader names the field it failed on
(``what``, as ``"<command> job <id>: <field>"``) in its :class:`SlurmParseError`, whose
``reason`` is that field: the key a refused value or record is counted under.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import hostlist

from collector.bounds import EARLIEST, MAX_FUTURE, clean_text

__all__ = ["NOTHING_FOUND", "PENDING_STATES", "RUNNING_STATES", "Drops", "SlurmParseError",
           "clean_text", "expand", "infer_job_type", "job_type_comment", "nodes_of",
           "number", "reason_text", "resource_nodes", "state", "text", "unix_time"]

RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED",
                            "SIGNALING", "STAGE_OUT", "RESIZING"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                            "RESV_DEL_HOLD"})
NOTHING_FOUND = 9003  # ESLURM_REST_EMPTY_RESULT
_TYPE_TAG = re.compile(r"(?:^|[\s,;])gpulens:type=([A-Za-z0-9_-]+)")
_INT_TEXT = re.compile(r"\s*-?\d{1,19}\s*")
_LATEST = datetime(2100, 1, 1)  # the bound when no "now" is given
MAX_LISTED = 20  # problems kept as messages per parse (the counts are complete)


class SlurmParseError(ValueError):
    """A Slurm JSON document, record or field that cannot be read.

    The message names the command, the job and the field; ``reason`` is the field (or
    ``"document"``), the key under which a refused record or value is counted.
    """

    def __init__(self, message: str, reason: str = "document"):
        super().__init__(message)
        self.reason = reason


def _error(what: str, problem: str) -> SlurmParseError:
    return SlurmParseError(f"{what}: {problem}", what.rsplit(": ", 1)[-1])


class Drops:
    """Records and values one parse refused: counts per ``<command>.<field>`` and the first
    few messages (for the log)."""

    def __init__(self, command: str):
        self.command = command
        self.counts: Counter[str] = Counter()
        self.messages: list[str] = []

    def add(self, err: SlurmParseError) -> None:
        self.counts[f"{self.command}.{err.reason}"] += 1
        if len(self.messages) < MAX_LISTED:
            self.messages.append(str(err))

    def soft(self, read, *args, default=None):
        """``read(*args)``, or ``default`` (counted) if it raises SlurmParseError: the
        unit of failure is this value, not the record."""
        try:
            return read(*args)
        except SlurmParseError as err:
            self.add(err)
            return default


# ----------------------------------------------------------------------- field readers


def number(v: Any, what: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """An integer from either format (plain or ``{"set", "infinite", "number"}``);
    unset or infinite -> None; outside ``[lo, hi]`` -> SlurmParseError."""
    if isinstance(v, dict) and "set" in v:
        if not v.get("set") or v.get("infinite"):
            return None
        v = v.get("number")
        if isinstance(v, dict):
            raise _error(what, f"a number wrapped twice: {v!r:.80}")
    if v is None:
        return None
    if isinstance(v, bool):
        raise _error(what, f"expected a number, got {v!r}")
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise _error(what, f"expected a finite number, got {v!r}")
        v = int(v)
    elif isinstance(v, str) and _INT_TEXT.fullmatch(v):
        v = int(v)
    elif not isinstance(v, int):
        raise _error(what, f"expected a number, got {v!r:.80}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _error(what, f"{v} is outside the plausible range [{lo}, {hi}]")
    return v


def unix_time(v: Any, what: str, now: datetime | None = None) -> datetime | None:
    """Unix seconds -> naive UTC datetime; 0, negative or unset -> None. A time before
    2000 or more than a day after ``now`` (2100 without ``now``) -> SlurmParseError."""
    n = number(v, what)
    if not n or n < 0:
        return None
    if not _EARLIEST_S <= n <= _latest_s(now):
        latest = now + MAX_FUTURE if now is not None else _LATEST
        raise _error(what, f"{n} s is not a plausible time (after {latest:%Y-%m-%d} or "
                           "before 2000)")
    return _EPOCH + timedelta(seconds=n)


_EPOCH = datetime(1970, 1, 1)
_EARLIEST_S = (EARLIEST - _EPOCH).total_seconds()


@lru_cache(maxsize=4)
def _latest_s(now: datetime | None) -> float:
    """Unix seconds of the latest plausible time (naive UTC ``now`` + MAX_FUTURE)."""
    return ((now + MAX_FUTURE if now is not None else _LATEST) - _EPOCH).total_seconds()


def state(v: Any, what: str) -> str | None:
    """Base state from ``"RUNNING"`` (22.05) or ``["RUNNING", ...]`` (current)."""
    if v is None:
        return None
    if isinstance(v, str):
        return clean_text(v) or None
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return clean_text(v[0]) or None if v else None
    raise _error(what, f"expected a state string or list, got {v!r:.80}")


def text(v: Any) -> str | None:
    """A non-empty string field, cleaned; anything else -> None."""
    return clean_text(v) if isinstance(v, str) and v else None


def reason_text(v: Any) -> str | None:
    """A state reason; ``None``/empty/"None" -> None."""
    return None if v in (None, "", "None") or not isinstance(v, str | int) else clean_text(str(v))


def nodes_of(v: Any) -> str | None:
    """A host list string (or current ``job_resources.nodes.list``); none assigned -> None."""
    if isinstance(v, dict):
        v = v.get("list")
    if not isinstance(v, str) or not v or v == "None assigned" or v.startswith("("):
        return None
    return clean_text(v)


def expand(nodelist: str | None, what: str) -> list[str]:
    """Host names of a Slurm host list (python-hostlist refuses more than 100,000)."""
    if not nodelist:
        return []
    try:
        return hostlist.expand_hostlist(nodelist)
    except (hostlist.BadHostlist, ValueError, IndexError) as e:
        raise _error(what, f"bad host list {nodelist!r:.80}: {e}") from None


def resource_nodes(job: dict, what: str) -> list[str] | None:
    """Node names in allocation order from ``job_resources``, any format; None if absent."""
    res = job.get("job_resources")
    if not isinstance(res, dict):
        return None
    nodes = res.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):
        names = [a.get("name") for a in nodes["allocation"] if isinstance(a, dict)]
        if names and all(isinstance(n, str) for n in names):
            return [clean_text(n) for n in names]
    alloc = res.get("allocated_nodes")
    if isinstance(alloc, dict):  # 22.05 sometimes keys the list by position
        alloc = [alloc[k] for k in sorted(alloc, key=lambda k: int(k) if k.isdigit() else 0)]
    if isinstance(alloc, list):
        names = [a.get("nodename") for a in alloc if isinstance(a, dict)]
        if names and all(isinstance(n, str) for n in names):
            return [clean_text(n) for n in names]
    listed = nodes_of(nodes)
    return expand(listed, f"{what}: job_resources") if listed else None


def job_type_comment(job_type: str) -> str:
    """The job comment that tags a job's type (``gpulens:type=pretrain``)."""
    return f"gpulens:type={job_type}"


def infer_job_type(comment: Any, name: str | None,
                   name_regex: re.Pattern | str | None = None) -> str | None:
    """A job's type: ``gpulens:type=X`` in its comment, else ``name_regex`` on its name.

    Slurm's JSON has no job type; sites tag jobs with ``--comment gpulens:type=sft`` (or
    add the tag to an existing comment) or name them by a convention that
    ``name_regex`` captures (its group ``type``, else its first group, else the whole
    match). The comment is squeue's string or sacct's ``{"job": ...}`` object. Returns
    the type lower-cased, or None.
    """
    if isinstance(comment, dict):
        comment = comment.get("job")
    if isinstance(comment, str):
        m = _TYPE_TAG.search(comment)
        if m:
            return m.group(1).lower()
    if name_regex and isinstance(name, str) and name:
        pattern = re.compile(name_regex) if isinstance(name_regex, str) else name_regex
        m = pattern.search(name)
        if m:
            found = m.groupdict().get("type") or (m.group(1) if m.groups() else m.group(0))
            return clean_text(found.lower()) if found else None
    return None
