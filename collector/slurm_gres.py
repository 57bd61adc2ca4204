"""GPUs of a Slurm job: counts from TRES/GRES strings and lists, indices from gres_detail.

Forms read (all seen in real squeue/sacct/slurmrestd output, Slurm 22.05-25.11):

- TRES strings: ``cpu=8,mem=64G,gres/gpu=4`` (``tres_alloc_str``; a typed
  ``gres/gpu:h100=4`` may follow the untyped total, which then wins);
- per-entity requests: ``gres/gpu:4``, ``gres/gpu:h100:1,gres/gpu:h200:1`` (2 GPUs),
  ``gres/gpu=2`` (``tres_per_task``), older ``gres:gpu:4``, GRES with sockets
  ``gpu:a100:2(S:0-1)``, a bare ``gres/gpu`` (one);
- sacct's ``tres.allocated``: ``[{"type": "gres", "name": "gpu:h100", "count": 4}, ...]``;
- ``gres_detail``, one entry per allocated node: ``gpu:h100:4(IDX:0-3)``,
  ``gpu(IDX:0,2)``, ``gpu:h100:1(IDX:0),gpu:h200:1(IDX:2)``, ``gpu:h200:0(IDX:)``.

``shard``, ``mps`` and ``vgpu`` GRES are slices of GPUs, not GPUs, and are not counted.
``gres_detail`` is the truth for which GPUs a running job holds; its indices are bounded
by the node's GPUs (never expanded past them, so ``IDX:0-1000000000`` costs nothing).
"""

from __future__ import annotations

import re
from typing import Any

from collector.bounds import MAX_GPUS_PER_JOB, MAX_GPUS_PER_NODE
from collector.slurm_fields import SlurmParseError, number

__all__ = ["gpu_count", "gpus_from_tres_list", "parse_gres_detail", "requested_gpus"]

_TOP_COMMA = re.compile(r",(?![^()]*\))")  # commas outside parentheses
_DETAIL = re.compile(r"([^:(]+)[^(]*\((?:IDX:)?([^)]*)\)")
_DIGITS = re.compile(r"\d{1,12}")
_COUNT = re.compile(r"[-+]?\d+")


def _items(spec: str):
    """(name, type, count text) of each GRES item of a TRES/GRES string."""
    for item in _TOP_COMMA.split(spec):
        item = item.split("(", 1)[0].strip()
        for prefix in ("gres/", "gres:"):
            if item.startswith(prefix):
                item = item[len(prefix):]
                break
        if not item:
            continue
        if "=" in item:
            left, _, count = item.partition("=")
            parts = left.split(":")
        else:
            parts = item.split(":")
            count = parts.pop() if len(parts) > 1 and _COUNT.fullmatch(parts[-1]) else "1"
        yield parts[0], (parts[1] if len(parts) > 1 else None), count


def gpu_count(spec: Any, what: str) -> int | None:
    """GPUs in a TRES/GRES string (see the module doc); None when it names no GPU.

    An untyped ``gpu`` count is the total; otherwise typed counts add up. Raises
    SlurmParseError for a count that is not a whole number up to a million.
    """
    if not isinstance(spec, str) or not spec:
        return None
    untyped, typed, any_typed = None, 0, False
    for name, typ, count in _items(spec):
        if name != "gpu":
            continue
        if not _DIGITS.fullmatch(count) or int(count) > MAX_GPUS_PER_JOB:
            raise SlurmParseError(f"{what}: GPU count {count!r:.40} in {spec!r:.80} is not "
                                  f"a whole number up to {MAX_GPUS_PER_JOB:,}", "gpus")
        n = int(count)
        if typ is None:
            untyped = (untyped or 0) + n
        else:
            typed, any_typed = typed + n, True
    total = untyped if untyped is not None else (typed if any_typed else None)
    if total is not None and total > MAX_GPUS_PER_JOB:
        raise SlurmParseError(f"{what}: {total} GPUs in {spec!r:.80}", "gpus")
    return total


def gpus_from_tres_list(items: Any, what: str) -> int | None:
    """GPU count from sacct's ``tres.allocated`` / ``tres.requested`` list; None if none."""
    if not isinstance(items, list):
        return None
    untyped, typed, any_typed = None, 0, False
    for i in items:
        if not isinstance(i, dict) or i.get("type") != "gres":
            continue
        name = i.get("name")
        if not isinstance(name, str) or name.split(":", 1)[0] != "gpu":
            continue
        n = number(i.get("count"), f"{what}: tres", 0, MAX_GPUS_PER_JOB) or 0
        if name == "gpu":
            untyped = (untyped or 0) + n
        else:
            typed, any_typed = typed + n, True
    return untyped if untyped is not None else (typed if any_typed else None)


def parse_gres_detail(entry: str, what: str = "gres_detail",
                      max_index: int = MAX_GPUS_PER_NODE) -> list[int]:
    """GPU indices of one node's gres_detail entry (``gpu:h100:4(IDX:0-3)`` -> 0..3).

    Several GPU types on one node are joined; non-GPU GRES are ignored; an entry without
    indices (``gpu:1``, ``IDX:N/A``) gives none. An index at or above ``max_index`` (the
    node's GPUs) or a malformed range raises SlurmParseError (reason ``gres_detail``).
    """
    out: set[int] = set()
    for item in _TOP_COMMA.split(entry):
        m = _DETAIL.match(item.strip())
        if not m or m.group(1).removeprefix("gres/") != "gpu":
            continue
        for part in m.group(2).split(","):
            part = part.strip()
            if not part or part == "N/A":
                continue
            lo, _, hi = part.partition("-")
            hi = hi or lo
            if not (_DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi)) or int(hi) < int(lo):
                raise SlurmParseError(f"{what}: bad GPU index range {part!r:.40} in "
                                      f"{entry!r:.80}", "gres_detail")
            if int(hi) >= max_index:
                raise SlurmParseError(f"{what}: GPU index {hi} in {entry!r:.80} is beyond "
                                      f"the node's {max_index} GPUs", "gres_detail")
            out.update(range(int(lo), int(hi) + 1))
    return sorted(out)


def requested_gpus(rec: dict, node_count: int | None, what: str) -> int | None:
    """GPUs a job asked for through ``tres_per_job|node|socket|task`` (first found).

    Per node and per socket counts are multiplied by the nodes (one socket per node at
    least: a lower bound), per task counts by the tasks (else the nodes).
    """
    nodes = node_count or 1
    per_job = gpu_count(rec.get("tres_per_job"), f"{what}: tres_per_job")
    if per_job is not None:
        return per_job
    for key, times in (("tres_per_node", nodes), ("tres_per_socket", nodes),
                       ("tres_per_task", None)):
        n = gpu_count(rec.get(key), f"{what}: {key}")
        if n is None:
            continue
        if times is None:
            times = number(rec.get("tasks"), f"{what}: tasks", 0, MAX_GPUS_PER_JOB) or nodes
        total = n * times
        if total > MAX_GPUS_PER_JOB:
            raise SlurmParseError(f"{what}: {key} {n} x {times} is {total} GPUs", "gpus")
        return total
    return None
