"""Prometheus's query API answers (``data.result`` lists) -> samples and MIG instance rows.

Pure: :func:`read_results` folds the answers of the queries of
:func:`collector.prometheus.field_queries` (instant vectors or range matrices, one list
per field of :data:`collector.dcgm.FIELDS`) into the wide samples rows the exporter path
makes. An answer shaped as Prometheus writes it is checked in bulk; any other is read
series by series, each bad series or point skipped and counted. What is refused, and how
it is counted, is listed in docs/collectors.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from collector.dcgm import (
    DCGM_MAX_NUM_DEVICES,
    FIELDS,
    GPU_INDEX,
    MIG_SLICES_DEFAULT,
    build_samples,
    fill_grid,
    gpu_slices,
    instance_rows,
    mig_slices,
)
from collector.federate import NO_NODE
from collector.nodenames import NodeNames, host_of
from gpulens.settings import default
from warehouse.schema import SCHEMAS

__all__ = ["PrometheusResultError", "parse_results", "read_results"]

class PrometheusResultError(ValueError):
    """The answers are not shaped like Prometheus's ``data.result`` lists."""


# Unix seconds a point's time may have: 1970 to 5138 (datetime64[us] holds it exactly).
_MAX_EPOCH_S = 1e11


def _str(v: Any) -> str | None:
    return v if type(v) is str and v else None


def _floats(raw: list) -> tuple[np.ndarray, np.ndarray]:
    """``raw`` (numbers, or strings as Prometheus writes values) as float64, and where an
    item is no number (NaN there). One C-level conversion unless something is odd."""
    try:
        out = np.asarray(raw, dtype=object).astype(np.float64)
        if out.shape == (len(raw),):  # else items were lists numpy took as a dimension
            return out, np.zeros(len(out), bool)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(len(raw), np.nan)
    bad = np.zeros(len(raw), bool)
    for i, x in enumerate(raw):
        try:
            if type(x) is bool or not isinstance(x, str | int | float):
                raise TypeError
            out[i] = float(x)
        except (TypeError, ValueError, OverflowError):
            bad[i] = True
    return out, bad


class _Columns:
    """What :func:`read_results` gathers, column by column: per accepted series
    (``series``: fid, rank, node, gpu, uuid, instance, profile, model) and its point count
    (``per``); per point its ``times`` and ``values`` as the answer wrote them."""

    def __init__(self):
        self.series: tuple[list, ...] = tuple([] for _ in range(8))
        self.per: list[int] = []
        self.times: list = []
        self.values: list = []

    def __len__(self) -> int:
        return len(self.per)


class _NodeOf:
    """Node name of a series' labels, each exporter host mapped by ``names`` once."""

    def __init__(self, names: NodeNames):
        self.names = names
        self.mapped: dict[str, str] = {}

    def host(self, host: str | None) -> str | None:
        if not host:
            return None
        out = self.mapped.get(host)
        return out if out is not None else self.mapped.setdefault(host, self.names(host))

    def __call__(self, m: dict, node_label: str) -> str | None:
        node = m.get(node_label) if node_label else None
        if type(node) is str and node:  # named by the operator: as is
            return node
        host = m.get("Hostname") or m.get("hostname")
        return self.host(host if type(host) is str and host
                         else host_of(_str(m.get("instance"))))


def _gpu_ok(gpu: Any) -> bool:
    """A ``gpu`` label naming a GPU index DCGM can have."""
    return (type(gpu) is str and gpu.isascii() and gpu.isdigit() and len(gpu) <= 2
            and int(gpu) < DCGM_MAX_NUM_DEVICES)


def _instance(gi: Any) -> int:
    """The MIG instance of a ``GPU_I_ID`` label; -1 for none (or an unreadable one)."""
    if type(gi) is str and gi.isascii() and gi.isdigit() and len(gi) <= 6:
        return int(gi)
    return -1


def _uuid(m: dict) -> str | None:
    u = m.get("UUID") or m.get("uuid")
    return u if type(u) is str else None


def _series_meta(fid: int, m: dict, rank_of: dict, node: str, gpu: str) -> tuple:
    name = m.get("__name__")
    gi = m.get("GPU_I_ID")
    inst = -1 if gi is None else _instance(gi)
    return (fid, rank_of.get(name, 0) if type(name) is str else 0, node, int(gpu),
            _uuid(m), inst, _str(m.get("GPU_I_PROFILE")) if inst >= 0 else None,
            _str(m.get("modelName")) if inst >= 0 else None)


def _read_each(fid: int, result: list, rank_of: dict, node_label: str, node_of: _NodeOf,
               cols: _Columns, counts: Counter) -> None:
    """Series by series, each checked: what is malformed is skipped and counted."""
    for series in result:
        m = series.get("metric") if type(series) is dict else None
        if type(m) is not dict:
            counts["series: not an object with a metric object"] += 1
            continue
        points = series.get("values")
        if points is None and "value" in series:
            points = [series["value"]]
        if type(points) is not list:
            counts["series: no value or values list"] += 1
            continue
        gpu = m.get("gpu")
        if gpu is None:
            continue  # not a GPU's series (NVSwitch, CPU)
        if not _gpu_ok(gpu):
            if points:
                counts[GPU_INDEX] += len(points)
            continue
        node = node_of(m, node_label)
        if not node:
            if points:
                counts[NO_NODE] += len(points)
            continue
        k = 0
        for p in points:  # [unix seconds, "value"]; the numbers are checked in bulk
            if type(p) is list and len(p) == 2:
                cols.times.append(p[0])
                cols.values.append(p[1])
                k += 1
            else:
                counts["series: point not [time, value]"] += 1
        if k:
            for col, x in zip(cols.series, _series_meta(fid, m, rank_of, node, gpu),
                              strict=True):
                col.append(x)
            cols.per.append(k)


def _read_well_formed(fid: int, result: list, rank_of: dict, node_label: str,
                      node_of: _NodeOf, cols: _Columns) -> bool:
    """The fast path of :func:`_read_each`, for a field's answer shaped as Prometheus
    writes it: each check runs over whole columns (types, the distinct ``gpu`` labels and
    hosts once each). Adds exactly what :func:`_read_each` would add and returns True;
    returns False, having added nothing, when any series would be skipped or counted."""
    if not result:
        return True
    try:
        if set(map(type, result)) != {dict}:
            return False
        metrics = [s["metric"] for s in result]
        gpus = [m.get("gpu") for m in metrics]  # AttributeError: a metric not a dict
        if set(map(type, metrics)) != {dict} or not all(
                g is None or _gpu_ok(g) for g in set(gpus)):  # TypeError: unhashable
            return False
        ranges = [s.get("values") for s in result]
        if ranges.count(None) == len(ranges):  # instant vectors: one point each
            points = [s["value"] for s in result]  # KeyError: neither value nor values
            per = [1] * len(points)
        elif set(map(type, ranges)) == {list}:
            per = list(map(len, ranges))
            points = [p for r in ranges for p in r]
        else:
            return False
        if points and (set(map(type, points)) != {list} or set(map(len, points)) != {2}):
            return False
    except (KeyError, TypeError, AttributeError):
        return False
    keep = [i for i, g in enumerate(gpus) if g is not None and per[i]]
    if len(keep) < len(gpus):  # series of no GPU (NVSwitch, CPU) or without points
        starts = np.concatenate(([0], np.cumsum(per)))
        points = [p for i in keep for p in points[starts[i]:starts[i + 1]]]
        metrics, gpus, per = ([xs[i] for i in keep] for xs in (metrics, gpus, per))
    n = len(metrics)
    nodes = _nodes(metrics, node_label, node_of)
    if not all(nodes):
        return False
    names = [m.get("__name__") for m in metrics]
    uuids = [m.get("UUID") or m.get("uuid") for m in metrics]
    insts = [m.get("GPU_I_ID") for m in metrics]
    try:
        rank = {x: rank_of.get(x, 0) if type(x) is str else 0 for x in set(names)}
    except TypeError:  # an unhashable __name__
        return False
    if not set(map(type, uuids)) <= {str}:
        uuids = [u if type(u) is str else None for u in uuids]
    if insts.count(None) == n:  # no MIG instances
        insts, profiles, models = [-1] * n, [None] * n, [None] * n
    else:
        insts = [-1 if gi is None else _instance(gi) for gi in insts]
        profiles = [_str(m.get("GPU_I_PROFILE")) if i >= 0 else None
                    for m, i in zip(metrics, insts, strict=True)]
        models = [_str(m.get("modelName")) if i >= 0 else None
                  for m, i in zip(metrics, insts, strict=True)]
    index = {g: int(g) for g in set(gpus)}
    for col, xs in zip(cols.series, ([fid] * n, [rank[x] for x in names], nodes,
                                     [index[g] for g in gpus], uuids, insts, profiles,
                                     models), strict=True):
        col.extend(xs)
    cols.per.extend(per)
    cols.times.extend(map(_first, points))
    cols.values.extend(map(_second, points))
    return True


_first, _second = itemgetter(0), itemgetter(1)


def _nodes(metrics: list[dict], node_label: str, node_of: _NodeOf) -> list[str | None]:
    """Each series' node, as :class:`_NodeOf` names it; each distinct host mapped once."""
    if node_label:
        labelled = [m.get(node_label) for m in metrics]
        if set(map(type, labelled)) == {str} and "" not in labelled:
            return labelled
    else:
        hosts = [m.get("Hostname") or m.get("hostname") for m in metrics]
        if set(map(type, hosts)) == {str} and "" not in hosts:
            node = {h: node_of.host(h) for h in set(hosts)}
            return [node[h] for h in hosts]
    return [node_of(m, node_label) for m in metrics]


def parse_results(
    results: Sequence[list[dict[str, Any]]],
    *,
    interval_s: float = default("collect.interval_s"),
    node_label: str = "",
    names: NodeNames | None = None,
    counts: Counter | None = None,
) -> pa.Table:
    """Samples rows from the ``data.result`` lists of the queries of
    :func:`collector.prometheus.field_queries`; :func:`read_results` tells what it does
    and refuses."""
    return read_results(results, interval_s=interval_s, node_label=node_label, names=names,
                        counts=counts)[0]


def read_results(
    results: Sequence[list[dict[str, Any]]],
    *,
    interval_s: float = default("collect.interval_s"),
    node_label: str = "",
    names: NodeNames | None = None,
    counts: Counter | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Samples rows, and MIG instance rows (``mig_samples``), from the ``data.result``
    lists of the queries of :func:`collector.prometheus.field_queries`.

    ``results[j]`` answers field ``FIELDS[j]``: an instant vector (``value: [t, "v"]``)
    or a range matrix (``values: [[t, "v"], ...]``); ``t`` is Unix seconds and becomes
    the row's naive-UTC ``ts``. Series without a ``gpu`` label (NVSwitch, CPU) are
    ignored. One bad thing costs one thing: a series that is not an object with a
    ``metric`` object and ``value``/``values``, a point that is not ``[t, "v"]`` with a
    Unix time and a number, a ``gpu`` label that is not an index 0-31 or a series that
    names no node is skipped and counted in ``counts`` (``"series: <why>"``, per point
    where points are readable); a value that is blank or impossible becomes NULL
    (:func:`collector.dcgm.clean_values`). Node names as in :mod:`collector.nodenames`:
    ``node_label`` as is, else ``Hostname``/``hostname`` or the host of ``instance``,
    mapped by ``names``. MIG instances fold into their GPU's row as in the exporter path.

    Raises :class:`PrometheusResultError`, naming the field and what is wrong, only when
    ``results`` is not a list of one list per field.
    """
    counts = Counter() if counts is None else counts
    names = names or NodeNames()
    if not isinstance(results, list | tuple) or len(results) > len(FIELDS):
        raise PrometheusResultError(
            f"expected a list of at most {len(FIELDS)} query results (one per field), "
            f"got {type(results).__name__}"
            + (f" of {len(results)}" if isinstance(results, list | tuple) else ""))
    rank_of = {n: r for f in FIELDS for r, n in enumerate(f.names)}
    # Columns per accepted series and per point (_Columns); spread to points with np.repeat.
    # A field's answer shaped as Prometheus writes it is checked in bulk; any other is
    # read series by series, each bad one skipped and counted (same rows, same counts).
    gathered = _Columns()
    node_of = _NodeOf(names)
    for fid, result in enumerate(results):
        if type(result) is not list:
            raise PrometheusResultError(
                f"result {fid} ({FIELDS[fid].names[0]}): expected a list of series, got "
                f"{type(result).__name__}")
        if not _read_well_formed(fid, result, rank_of, node_label, node_of, gathered):
            _read_each(fid, result, rank_of, node_label, node_of, gathered, counts)
    cols, per, times, values = gathered.series, gathered.per, gathered.times, gathered.values
    empty = SCHEMAS["samples"].empty_table(), SCHEMAS["mig_samples"].empty_table()
    if not values:
        return empty
    t_a, t_bad = _floats(times)
    v_a, v_bad = _floats(values)
    t_bad |= ~((t_a >= 0) & (t_a < _MAX_EPOCH_S))
    v_bad &= ~t_bad
    if t_bad.any():
        counts["series: time not a Unix time"] += int(t_bad.sum())
    if v_bad.any():
        counts["series: value not a number"] += int(v_bad.sum())
    good = ~(t_bad | v_bad)
    if not good.any():
        return empty
    per_a = np.asarray(per, np.int64)

    def spread(col, dtype):
        return np.repeat(np.asarray(col, dtype=dtype), per_a)[good]

    fids, ranks = spread(cols[0], np.int64), spread(cols[1], np.int64)
    nodes, gpus, uuids = spread(cols[2], object), spread(cols[3], np.int64), spread(cols[4], object)
    insts, profiles = spread(cols[5], np.int64), spread(cols[6], object)
    mig = [i for i, x in enumerate(cols[5]) if x >= 0]
    weight_s, slices_s = np.ones(len(per)), np.full(len(per), float(MIG_SLICES_DEFAULT))
    for i in mig:
        weight_s[i], slices_s[i] = mig_slices(cols[6][i]), gpu_slices(cols[7][i])
    weights, slices = np.repeat(weight_s, per_a)[good], np.repeat(slices_s, per_a)[good]
    times, values = t_a[good], v_a[good]
    t_codes, t_uniq = pd.factorize(np.asarray(times, np.float64))
    n_codes, n_uniq = pd.factorize(pd.Series(nodes, dtype=object))
    gpu_a = gpus
    key = (t_codes.astype(np.int64) * len(n_uniq) + n_codes) * DCGM_MAX_NUM_DEVICES + gpu_a
    ukey, first, row = np.unique(key, return_index=True, return_inverse=True)
    fid_a, inst_a = fids, insts
    value_a = np.asarray(values, np.float64)
    grid = fill_grid(len(ukey), row, fid_a, ranks, value_a, inst=inst_a, weight=weights,
                     slices=slices[first], counts=counts)
    seconds = t_uniq[t_codes[first]]
    ts = (seconds * 1e6).round().astype("datetime64[us]")
    node_col = list(n_uniq[n_codes[first]])
    samples = build_samples(ts, node_col, gpu_a[first], list(uuids[first]), grid, interval_s)
    instances = instance_rows(ts, node_col, gpu_a[first], row, fid_a, inst_a, value_a,
                              profiles)
    return samples, instances
