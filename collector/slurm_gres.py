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

What a job holds on one node (:func:`node_holdings`, issue 21), from Slurm's source
(src/stepmgr/gres_stepmgr.c, src/plugins/gpu/nvml/gpu_nvml.c, src/plugins/gres/gpu/
gres_gpu.c; docs/collectors.md, "Slurm GRES"):

- ``gpu[:type]:N(IDX:i,j-k)``: GRES *device* indices: the node's GPU devices in slurmd's
  order. Without MIG they are the GPUs. With MIG (AutoDetect=nvml) every MIG instance is
  a device: slurmd sorts whole GPUs first (by NVLink/PCI order, i.e. index) and then the
  MIG devices by device file (``/dev/nvidiaN`` then the GPU instance's capability minor,
  i.e. GPU then GPU instance id). :func:`device_order` builds that list from the node's
  MIG layout as gpulens saw it (``gpu_mig_samples``).
- shared GRES, Slurm 23.11.2 on: ``shard:3(2/4,1/4,0/4)``, ``mps:50(50/100,0/100)``: per
  GPU device ``allocated/configured``: the job's share of that GPU;
- shared GRES before 23.11.2: ``shard:2(IDX:0)``, ``mps:50(IDX:0)`` (captured from a real
  22.05.8): the GPUs only (share unknown: the GPU's energy is then split by seconds held,
  as for time-slicing);
- ``gpu(CNT:2)``, ``shard(CNT:2)``: a count without devices: nothing to place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from collector.bounds import MAX_GPUS_PER_JOB, MAX_GPUS_PER_NODE
from collector.slurm_fields import SlurmParseError, number

__all__ = ["Device", "Holding", "device_order", "gpu_count", "gpus_from_tres_list",
           "node_holdings", "requested_gpus"]

_TOP_COMMA = re.compile(r",(?![^()]*\))")  # commas outside parentheses
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


# ------------------------------------------------------- what a job holds on one node

SHARED = ("shard", "mps")  # shared GRES: slices of the node's GPUs
_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.(\d+)gb", re.IGNORECASE)
_MEM_GB = re.compile(r"(\d+)gb$", re.IGNORECASE)
_SHARE = re.compile(r"(\d{1,12}|-)/(\d{1,12})")


@dataclass(frozen=True)
class Device:
    """One GPU device of a node in Slurm's GRES order: a whole GPU (``gpu_i_id`` None) or
    a MIG GPU instance of GPU ``gpu_index`` (``gpu_i_id``, its ``profile``, e.g. 3g.40gb)."""

    gpu_index: int
    gpu_i_id: int | None = None
    profile: str | None = None


@dataclass(frozen=True)
class Holding:
    """What a job holds of one physical GPU: the whole GPU, some of its MIG instances
    (``gpu_i_ids``), or a ``share`` (fraction 0-1 of its shards or MPS; None: whole GPU,
    MIG, or a shared GRES whose share Slurm did not print). ``devices``: GRES gpu
    devices held (Slurm's GPU count: a MIG instance counts one)."""

    gpu_index: int
    gpu_i_ids: tuple[int, ...] | None = None
    share: float | None = None
    devices: int = 0


def device_order(gpus: Iterable[int],
                 instances: Iterable[tuple[int, int, str | None]]) -> tuple[Device, ...]:
    """A node's GRES gpu devices in slurmd's order (AutoDetect=nvml): the GPUs without MIG
    instances by index, then each MIG instance by (GPU index, GPU instance id).
    ``gpus``: the node's GPU indices; ``instances``: (gpu_index, gpu_i_id, profile)."""
    inst = sorted({(g, i): p for g, i, p in instances}.items())
    mig_gpus = {g for (g, _), _p in inst}
    whole = [Device(g) for g in sorted(set(gpus) - mig_gpus)]
    return tuple(whole + [Device(g, i, p) for (g, i), p in inst])


def _ranges(text: str, what: str, entry: str, limit: int, noun: str) -> list[int]:
    """``0-1,4`` -> [0, 1, 4]; every index below ``limit`` (the node's ``noun``)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part or part == "N/A":
            continue
        lo, _, hi = part.partition("-")
        hi = hi or lo
        if not (_DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi)) or int(hi) < int(lo):
            raise SlurmParseError(f"{what}: bad GPU index range {part!r:.40} in "
                                  f"{entry!r:.80}", "gres_detail")
        if int(hi) >= limit:
            raise SlurmParseError(f"{what}: GPU index {hi} in {entry!r:.80} is beyond "
                                  f"the node's {limit} {noun}", "gres_detail")
        out.update(range(int(lo), int(hi) + 1))
    return sorted(out)


def _profile_agrees(typ: str | None, device: Device) -> bool:
    """Whether a GRES type (``a100_3g.40gb``, ``a100.MIG.20gb``, ``h100``) can name the
    device: a type naming a MIG profile or memory size must match the instance's."""
    if not typ:
        return True
    m = _PROFILE.search(typ)
    if m is None:
        mem = _MEM_GB.search(typ)
        if mem is None or "mig" not in typ.lower():
            return True  # a GPU model (h100): says nothing of the instance
        m_dev = _PROFILE.search(device.profile or "")
        return m_dev is not None and m_dev.group(3) == mem.group(1)
    return device.profile is not None and m.group(0).lower() in device.profile.lower()


def _item(item: str) -> tuple[str, str | None, str] | None:
    """(name, type, text inside the parentheses) of one gres_detail item; None if it has
    no parenthesised part (``gpu:1``)."""
    head, paren, rest = item.strip().partition("(")
    if not paren:
        return None
    parts = head.removeprefix("gres/").split(":")
    if len(parts) > 1 and _COUNT.fullmatch(parts[-1]):
        parts.pop()
    inner = rest.split(")", 1)[0]
    return parts[0], (":".join(parts[1:]) or None), inner


def node_holdings(entry: str, what: str = "gres_detail", *,
                  devices: Sequence[Device] | None = None,
                  max_index: int = MAX_GPUS_PER_NODE) -> list[Holding]:
    """What a job holds of each physical GPU of one node, from its ``gres_detail`` entry
    (forms in the module doc), one :class:`Holding` per GPU, by GPU index.

    ``devices``: the node's GRES devices (:func:`device_order`) when its MIG layout is
    known; without it device i is GPU i, below ``max_index``. Raises SlurmParseError
    naming the entry: ``gres_detail`` for an index past the node's devices or an
    unreadable share, ``gres_mig`` for a GRES type naming a MIG profile the device at
    that index does not have (slurmd's order differs from :func:`device_order`: a
    hand-written gres.conf) or a MIG type on a node whose layout is unknown.
    """
    limit = len(devices) if devices is not None else max_index
    noun = "GPU devices" if devices is not None else "GPUs"
    held: dict[int, dict] = {}

    def gpu(i: int) -> dict:
        return held.setdefault(i, {"gi": set(), "whole": False, "share": None, "devices": 0,
                                   "shared": False})

    for raw in _TOP_COMMA.split(entry):
        parsed = _item(raw)
        if parsed is None:
            continue
        name, typ, inner = parsed
        if name == "gpu":
            if inner.startswith("CNT:"):
                continue
            idx = _ranges(inner.removeprefix("IDX:"), what, entry, limit, noun)
            if devices is None and idx and typ and _PROFILE.search(typ):
                raise SlurmParseError(f"{what}: MIG type {typ!r:.40} in {entry!r:.80} on a "
                                      "node whose MIG layout is unknown", "gres_mig")
            for i in idx:
                dev = devices[i] if devices is not None else Device(i)
                if not _profile_agrees(typ, dev):
                    raise SlurmParseError(
                        f"{what}: GRES device {i} of type {typ!r:.40} in {entry!r:.80} is "
                        f"GPU {dev.gpu_index} instance {dev.gpu_i_id} ({dev.profile}) in "
                        "slurmd's autodetect order: this node orders them otherwise",
                        "gres_mig")
                h = gpu(dev.gpu_index)
                h["devices"] += 1
                if dev.gpu_i_id is None:
                    h["whole"] = True
                else:
                    h["gi"].add(dev.gpu_i_id)
        elif name in SHARED:
            if inner.startswith("CNT:"):
                continue
            if inner.startswith("IDX:"):  # before 23.11.2: the GPUs, not the share
                for i in _ranges(inner[4:], what, entry, limit, noun):
                    gpu((devices[i] if devices is not None else Device(i)).gpu_index)[
                        "shared"] = True
                continue
            counts = inner.split(",")
            if len(counts) > limit:
                raise SlurmParseError(f"{what}: {len(counts)} {name} counts in "
                                      f"{entry!r:.80} for {limit} GPU devices", "gres_detail")
            for i, pair in enumerate(counts):
                m = _SHARE.fullmatch(pair.strip())
                if m is None or (m.group(1) != "-" and int(m.group(1)) > int(m.group(2))):
                    raise SlurmParseError(f"{what}: {name} count {pair!r:.40} in "
                                          f"{entry!r:.80} is not allocated/configured",
                                          "gres_detail")
                if m.group(1) in ("-", "0"):
                    continue
                h = gpu((devices[i] if devices is not None else Device(i)).gpu_index)
                h["shared"] = True
                h["share"] = (h["share"] or 0.0) + int(m.group(1)) / int(m.group(2))
    out = []
    for g in sorted(held):
        h = held[g]
        if h["whole"]:
            out.append(Holding(g, None, None, h["devices"]))
        elif h["gi"]:
            out.append(Holding(g, tuple(sorted(h["gi"])), None, h["devices"]))
        else:
            out.append(Holding(g, None, min(h["share"], 1.0) if h["share"] else None, 0))
    return out
