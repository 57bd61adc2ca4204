"""Detectors: from a :class:`Window` to the entities a rule finds (``Hit``s).

Each detector gives every entity of its scope a value in the rule's unit (higher is
worse) and returns the entities at or above the rule's ``clear`` level; the evaluator
compares values with ``threshold``. All work is vectorised over the GPUs.

- ``gpu_column``: the newest sample (within ``stale_s``, default 60 s) of one column,
  e.g. ``temp_c``; for ``throttle_thermal`` 1 = throttling.
- ``gpu_peers``: a GPU's load-adjusted temperature (see window.load_adjusted, mean over
  ``smooth_s``) minus the median of its rack, in C, counted only when its robust z-score
  within the rack (median/MAD) is at least ``min_z``.
- ``rack_hot``: a rack's median load-adjusted temperature now (``smooth_s``) against
  (a) its own at the start of the window (first ``baseline_s``) and (b) the other racks
  of the same GPU model (counted when the robust z-score across them is at least
  ``min_z`` and there are 4 such racks or more); the value is the larger excess, in C.
  The own excess is the larger of two baselines, the window's first ``baseline_s`` and
  the ``baseline_s`` ending ``recent_s`` before now, each lowered by
  ``load_margin_c_per_w`` times the change of the rack's median power since it (W): the
  fitted heating coefficient's error, times that change, is not a cooling problem.
- ``gpu_rate``: temperature rise over ``window_s`` in C per minute, counted only while
  power changed by at most ``max_power_change_w`` and the GPU is at ``min_temp_c`` or
  above (a job starting heats a GPU fast; that is not an anomaly).
- ``xid``: events of kind xid with a code in ``codes`` in the last ``window_s``, per node.
- ``twin``: per twin instance of an HA pair, the seconds since it last answered.
- ``straggler``: per node, the minutes a straggler episode of a run of at least
  ``min_gpus`` GPUs has lasted (warehouse/stragglers.py); an episode counts as ongoing
  while its end is within ``open_s`` of now (the table is refreshed every few minutes).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pandas as pd

from alerts.model import Hit, Rule
from alerts.rules import parse_codes
from alerts.window import (
    Window,
    fit_c_per_w,
    group_median,
    latest,
    load_adjusted,
    mean,
    robust_z,
)

MIN_RACKS_FOR_PEERS = 4
MIN_GPUS_FOR_PEERS = 4


def _r(x) -> float | None:
    """A JSON-friendly rounded float (None for NaN)."""
    return None if x is None or not np.isfinite(x) else round(float(x), 2)


def _gpu_hits(rule: Rule, win: Window, value: np.ndarray, extra=None) -> list[Hit]:
    idx = np.flatnonzero(np.nan_to_num(value, nan=-np.inf) >= rule.clear)
    now_cols = win.cols(60.0)
    temp = latest(win.series["temp_c"][idx], now_cols)
    power = latest(win.series["power_w"][idx], now_cols)
    hits = []
    for j, i in enumerate(idx):
        context = {"temp_c": _r(temp[j]), "power_w": _r(power[j])}
        if extra is not None:
            context.update({k: _r(v[i]) for k, v in extra.items()})
        hits.append(Hit(rule.name, float(value[i]), win.rack[i], win.node[i],
                        int(win.gpu_index[i]), context))
    return hits


def gpu_column(rule: Rule, win: Window) -> list[Hit]:
    value = latest(win.series[rule.params["column"]], win.cols(rule.params.get("stale_s", 60)))
    return _gpu_hits(rule, win, value)


def _adjusted(win: Window, first: int, stop: int, c_per_w: dict | None = None) -> np.ndarray:
    s = win.series
    return load_adjusted(mean(s["temp_c"], first, stop), mean(s["power_w"], first, stop),
                         win.model, c_per_w)


def _c_per_w(win: Window, first: int, stop: int) -> dict:
    s = win.series
    return fit_c_per_w(mean(s["temp_c"], first, stop), mean(s["power_w"], first, stop),
                       win.model)


def gpu_peers(rule: Rule, win: Window) -> list[Hit]:
    width = win.series["temp_c"].shape[1]
    adj = _adjusted(win, width - win.cols(rule.params["smooth_s"]), width)
    racks = np.where(pd.isna(win.rack), "", win.rack).astype(object)
    known = np.isfinite(adj)
    dev = np.full(win.n, np.nan)
    z = np.full(win.n, np.nan)
    dev[known], z[known], count = robust_z(adj[known], racks[known])
    z_ok = np.zeros(win.n, dtype=bool)
    z_ok[known] = (count >= MIN_GPUS_FOR_PEERS) & (z[known] >= rule.params["min_z"])
    value = np.where(z_ok, dev, 0.0)
    return _gpu_hits(rule, win, value, {"deviation_c": dev, "z": z})


def rack_hot(rule: Rule, win: Window) -> list[Hit]:
    p = rule.params
    width = win.series["temp_c"].shape[1]
    keep = np.flatnonzero(pd.notna(win.rack))
    if not len(keep):
        return []
    names, codes = np.unique(win.rack[keep].astype(str), return_inverse=True)
    n = len(names)
    # one heating coefficient for now and the baseline: fitted apart, a change of the fit
    # (a failing rack ending) moved every rack's baseline excess (issue 22)
    first = width - win.cols(p["smooth_s"])
    k = _c_per_w(win, first, width)
    now, gpus = group_median(_adjusted(win, first, width, k)[keep], codes, n)
    load_now, _ = group_median(mean(win.series["power_w"], first, width)[keep], codes, n)
    own = np.full(n, -np.inf)
    # two baselines of baseline_s: the window's start and the one ending recent_s before
    # now (a rack whose job ended minutes before its cooling failed is level with the
    # second one; issue 22)
    base_cols = win.cols(p["baseline_s"])
    for stop in sorted({base_cols, max(base_cols, width - win.cols(p.get("recent_s", 0.0)))}):
        own = np.fmax(own, _own_excess(win, k, keep, codes, n, now, load_now,
                                       stop - base_cols, stop,
                                       p.get("load_margin_c_per_w", 0.0)))
    temp = latest(win.series["temp_c"], win.cols(60.0))[keep].astype(np.float64)
    power = latest(win.series["power_w"], win.cols(60.0))[keep]
    temp_med, _ = group_median(temp, codes, n)
    power_med, _ = group_median(power, codes, n)
    temp_max = np.full(n, -np.inf)
    np.fmax.at(temp_max, codes, np.nan_to_num(temp, nan=-np.inf))
    enough = np.flatnonzero(gpus >= MIN_GPUS_FOR_PEERS)
    # peers are racks of the same GPU model: models differ in their load-adjusted level
    # (issue 22: A100 racks 4.5 C below H100 racks hid an H100 rack's failure)
    head = np.full(n, len(codes))
    np.minimum.at(head, codes, np.arange(len(codes)))
    rack_model = win.model[keep][head].astype(str)
    dev, z, peers = robust_z(now[enough], rack_model[enough])
    peer = np.where((peers >= MIN_RACKS_FOR_PEERS) & (z >= p["min_z"]), dev, 0.0)
    own = own[enough]
    value = np.fmax(np.nan_to_num(peer, nan=0.0), own)
    hits = []
    for i, v, d, o in zip(enough, value, dev, own, strict=True):
        if not v >= rule.clear:
            continue
        nodes = sorted(set(win.node[keep][codes == i]))
        hits.append(Hit(rule.name, float(v), str(names[i]), None, None, {
            "temp_c": _r(temp_med[i]), "temp_max_c": _r(temp_max[i]),
            "power_w": _r(power_med[i]), "above_peers_c": _r(d), "above_baseline_c": _r(o),
            "gpus": int(gpus[i]), "nodes": nodes,
        }))
    return hits


def _own_excess(win: Window, k: dict, keep, codes, n: int, now, load_now, first: int,
                stop: int, margin_c_per_w: float) -> np.ndarray:
    """Each rack's median load-adjusted temperature ``now`` above its own over columns
    ``[first, stop)``, C, less ``margin_c_per_w`` times the change of its median power
    (W): an error of the fitted k moves the load-adjusted level by (error x change)
    (issue 22: an idle rack taking a whole-rack job rose 4 C against its baseline while
    a failing, idle and hot rack pulled the fleet's k down)."""
    base, _ = group_median(_adjusted(win, first, stop, k)[keep], codes, n)
    load, _ = group_median(mean(win.series["power_w"], first, stop)[keep], codes, n)
    return now - base - margin_c_per_w * np.nan_to_num(np.abs(load_now - load))


def gpu_rate(rule: Rule, win: Window) -> list[Hit]:
    p = rule.params
    width = win.series["temp_c"].shape[1]
    cols = min(width, win.cols(p["window_s"]) + 1)
    if cols < 4:
        return []
    first, stop = width - cols, width
    temp, power = win.series["temp_c"], win.series["power_w"]
    t0, t1 = mean(temp, first, first + 2), mean(temp, stop - 2, stop)
    p0, p1 = mean(power, first, first + 2), mean(power, stop - 2, stop)
    minutes = (cols - 2) * win.step_s / 60.0
    rate = (t1 - t0) / minutes
    steady = (np.abs(p1 - p0) <= p["max_power_change_w"]) & (t1 >= p["min_temp_c"])
    value = np.where(steady, rate, np.nan)
    return _gpu_hits(rule, win, value, {"rise_c": t1 - t0})


def xid(rule: Rule, win: Window) -> list[Hit]:
    ev = win.events
    if ev is None or ev.empty:
        return []
    since = win.end - timedelta(seconds=rule.params["window_s"])
    codes = parse_codes(str(rule.params["codes"]))
    ev = ev[(ev["ts"] > since) & (ev["ts"] <= win.end) & ev["code"].isin(codes)]
    racks = dict(zip(win.node, win.rack, strict=True))
    hits = []
    for node, part in ev.groupby("node"):
        value = float(len(part))
        if value >= rule.clear:
            gpus = sorted({int(g) for g in part["gpu_index"].dropna()})
            rack = racks.get(node)
            if rack is None and "rack" in part:
                rack = part["rack"].iloc[0]
            hits.append(Hit(rule.name, value, rack, node, None, {
                "codes": sorted({int(c) for c in part["code"]}), "gpus": gpus,
                "last_ts": part["ts"].max().isoformat(),
            }))
    return hits


def straggler(rule: Rule, win: Window) -> list[Hit]:
    ep = win.stragglers
    if ep is None or ep.empty:
        return []
    p = rule.params
    now = np.datetime64(win.end, "us")
    ep = ep[(ep["job_gpus"] >= p["min_gpus"])
            & (ep["end_ts"].to_numpy("datetime64[us]")
               >= now - np.timedelta64(int(p["open_s"] * 1e6), "us"))]
    hits = []
    for node, part in ep.groupby("node"):
        rec = part.sort_values("start_ts").iloc[0]
        minutes = (now - np.datetime64(rec["start_ts"], "us")) / np.timedelta64(60, "s")
        if minutes >= rule.clear:
            hits.append(Hit(rule.name, float(minutes), rec.get("rack"), str(node), None, {
                "job_id": str(rec["job_id"]), "job_gpus": int(rec["job_gpus"]),
                "gpus": [int(g) for g in rec["gpu_indices"]],
                "slowdown": _r(rec["slowdown_frac"]),
                "gpu_hours_per_hour": _r(rec["gpu_hours_per_hour"]),
                "since": pd.Timestamp(rec["start_ts"]).isoformat(),
            }))
    return hits


def twin(rule: Rule, win: Window) -> list[Hit]:
    """Per twin of an HA pair, the seconds since it last answered (alerts/ha.py); the
    hit names the missing instance as its ``node``."""
    return [Hit(rule.name, float(unseen), None, name, None, {"unseen_s": _r(unseen)})
            for name, unseen in sorted(win.twins.items()) if unseen >= rule.clear]


DETECTORS: dict[str, Callable[[Rule, Window], list[Hit]]] = {
    "gpu_column": gpu_column,
    "gpu_peers": gpu_peers,
    "rack_hot": rack_hot,
    "gpu_rate": gpu_rate,
    "xid": xid,
    "straggler": straggler,
    "twin": twin,
}


def detect(rule: Rule, win: Window) -> list[Hit]:
    """The entities ``rule`` finds in ``win`` (value at or above ``rule.clear``)."""
    return DETECTORS[rule.kind](rule, win)
