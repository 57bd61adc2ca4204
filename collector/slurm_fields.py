"""Reading single fields of Slurm's JSON, in both the 22.05 and the current format.

See collector/slurm.py for the two formats. Every reader names the field it failed on
(``what``) in its ``SlurmParseError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import hostlist

RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED",
                            "SIGNALING", "STAGE_OUT", "RESIZING"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                            "RESV_DEL_HOLD"})
_GRES_GPU = re.compile(r"gpu(?::[^:(),]+)?(?::(\d+))?\(IDX:([^)]*)\)")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_TRES_GPU_TYPED = re.compile(r"(?:^|,)gres/gpu:[^=,]+=(\d+)")
_PER_NODE_GPU = re.compile(r"gres[:/]gpu(?::[^:,]+)?:(\d+)")
NOTHING_FOUND = 9003  # ESLURM_REST_EMPTY_RESULT
_TYPE_TAG = re.compile(r"(?:^|[\s,;])gpulens:type=([A-Za-z0-9_-]+)")


class SlurmParseError(ValueError):
    """A Slurm JSON document that cannot be read; the message says what and where."""


# ----------------------------------------------------------------------- field readers


def _number(v: Any, what: str) -> int | None:
    """An integer from either format; unset or infinite -> None."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise SlurmParseError(f"{what}: expected a number, got {v!r}")
    if isinstance(v, int | float):
        return int(v)
    if isinstance(v, dict) and "set" in v:
        if not v.get("set") or v.get("infinite"):
            return None
        return _number(v.get("number"), what)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    raise SlurmParseError(f"{what}: expected a number, got {v!r}")


def _time(v: Any, what: str) -> datetime | None:
    """Unix seconds -> naive UTC datetime; 0 / unset -> None."""
    n = _number(v, what)
    if not n or n < 0:
        return None
    return datetime.fromtimestamp(n, UTC).replace(tzinfo=None)


def _state(v: Any, what: str) -> str | None:
    """Base state from ``"RUNNING"`` (22.05) or ``["RUNNING", ...]`` (current)."""
    if v is None:
        return None
    if isinstance(v, str):
        return v or None
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return v[0] if v else None
    raise SlurmParseError(f"{what}: expected a state string or list, got {v!r}")


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _reason(v: Any) -> str | None:
    return None if v in (None, "", "None") else str(v)


def _indices(spec: str) -> list[int]:
    """``0-3,6`` -> [0, 1, 2, 3, 6]; ``N/A`` -> []."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse_gres_detail(entry: str) -> list[int]:
    """GPU indices of one node's gres_detail entry (``gpu:h100:4(IDX:0-3)`` -> 0..3).

    Several GPU types on one node (``gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)``) are joined;
    non-GPU GRES (``shard``, ``mps``) are ignored.
    """
    out: list[int] = []
    for m in _GRES_GPU.finditer(entry):
        out.extend(_indices(m.group(2)))
    return sorted(set(out))


def _gpus_from_tres_str(s: Any) -> int | None:
    if not isinstance(s, str) or not s:
        return None
    m = _TRES_GPU.search(s)
    if m:
        return int(m.group(1))
    typed = [int(x) for x in _TRES_GPU_TYPED.findall(s)]
    return sum(typed) if typed else None


def _gpus_from_tres_list(items: Any) -> int | None:
    """GPU count from sacct's ``tres.allocated`` / ``tres.requested`` list."""
    if not isinstance(items, list):
        return None
    plain = [i for i in items if isinstance(i, dict) and i.get("type") == "gres"
             and i.get("name") == "gpu"]
    if plain:
        return _number(plain[0].get("count"), "tres count")
    typed = [_number(i.get("count"), "tres count") or 0 for i in items
             if isinstance(i, dict) and i.get("type") == "gres"
             and str(i.get("name", "")).startswith("gpu:")]
    return sum(typed) if typed else None


def _nodes(v: Any) -> str | None:
    if isinstance(v, dict):  # current job_resources.nodes: {"count", "list", ...}
        v = v.get("list")
    if not isinstance(v, str) or not v or v == "None assigned" or v.startswith("("):
        return None
    return v


def _expand(nodelist: str | None, what: str) -> list[str]:
    if not nodelist:
        return []
    try:
        return hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as e:
        raise SlurmParseError(f"{what}: bad host list {nodelist!r}: {e}") from None


def _resource_nodes(job: Mapping) -> list[str] | None:
    """Node names in allocation order from ``job_resources``, any format; None if absent."""
    res = job.get("job_resources")
    if not isinstance(res, dict):
        return None
    nodes = res.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):
        names = [a.get("name") for a in nodes["allocation"] if isinstance(a, dict)]
        if names and all(isinstance(n, str) for n in names):
            return names
    alloc = res.get("allocated_nodes")
    if isinstance(alloc, dict):  # 22.05 sometimes keys the list by position
        alloc = [alloc[k] for k in sorted(alloc, key=lambda k: int(k) if k.isdigit() else 0)]
    if isinstance(alloc, list):
        names = [a.get("nodename") for a in alloc if isinstance(a, dict)]
        if names and all(isinstance(n, str) for n in names):
            return names
    listed = _nodes(nodes)
    return _expand(listed, "job_resources.nodes") if listed else None


def _exit(v: Any, what: str) -> tuple[int | None, int | None]:
    """(return code, signal) from a raw wait status (22.05 squeue) or the dict forms."""
    if v is None:
        return None, None
    if isinstance(v, int) and not isinstance(v, bool):
        return (v >> 8) & 0xFF, (v & 0x7F) or None
    if isinstance(v, dict):
        status = v.get("status")
        if isinstance(status, list):
            status = status[0] if status else None
        code = _number(v.get("return_code"), f"{what}.return_code")
        sig = v.get("signal")
        signal = None
        if isinstance(sig, dict):
            raw = sig.get("id", sig.get("signal_id"))
            signal = _number(raw, f"{what}.signal")
        if status == "PENDING" and not code and not signal:
            return None, None
        return code, signal
    raise SlurmParseError(f"{what}: expected an exit code, got {v!r}")


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
    if isinstance(comment, Mapping):
        comment = comment.get("job")
    if isinstance(comment, str):
        m = _TYPE_TAG.search(comment)
        if m:
            return m.group(1).lower()
    if name_regex and name:
        pattern = re.compile(name_regex) if isinstance(name_regex, str) else name_regex
        m = pattern.search(name)
        if m:
            found = m.groupdict().get("type") or (m.group(1) if m.groups() else m.group(0))
            return found.lower() if found else None
    return None


