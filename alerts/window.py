"""The windowed data the rules read: the last minutes of every GPU on a time grid.

A :class:`Window` holds, for ``n`` GPUs and ``T`` steps of ``step_s`` seconds ending at
``end``, one ``(n, T)`` float array per telemetry column (NaN where a sample is missing;
``throttle_thermal`` is 0.0/1.0), the GPUs' node, index, rack and model, and the recent
GPU events. Column ``T - 1`` holds samples with ``ts`` in ``(end - step_s, end]``.
:func:`build_window` makes one from the long frames the warehouse queries return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd

COLUMNS = ("temp_c", "mem_temp_c", "power_w", "throttle_thermal")
DEFAULT_C_PER_W = 0.07  # die temperature rise per watt when a fleet fit is not possible


@dataclass(frozen=True)
class Window:
    end: datetime  # naive UTC, the evaluation time
    step_s: float  # seconds per grid column (the sampling interval)
    node: np.ndarray  # (n,) object
    gpu_index: np.ndarray  # (n,) int
    rack: np.ndarray  # (n,) object; None when the topology does not know the node
    model: np.ndarray  # (n,) object
    series: dict[str, np.ndarray]  # column -> (n, T) float32
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # ts, node, gpu_index, code
    # recent straggler episodes (warehouse/queries/stragglers.py: recent), issue 15
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)
    # twin instance name -> seconds since it last answered (alerts/ha.py), issue 20
    twins: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.node)

    def cols(self, seconds: float) -> int:
        """How many trailing grid columns cover ``seconds`` (at least 1)."""
        return max(1, min(self.series["temp_c"].shape[1], math.ceil(seconds / self.step_s)))


def build_window(samples: pd.DataFrame, gpus: pd.DataFrame, events: pd.DataFrame,
                 end: datetime, span_s: float, step_s: float,
                 columns: tuple[str, ...] = COLUMNS,
                 stragglers: pd.DataFrame | None = None) -> Window:
    """Grid the long ``samples`` frame (ts, node, gpu_index, and COLUMNS) over
    ``(end - span_s, end]``. ``gpus`` (node, gpu_index, rack, model) gives each node's
    rack and each GPU's model (a row with a NULL gpu_index still gives its node's rack).
    GPUs without samples in the window are left out. ``columns``: the series gridded
    (the backtest adds one that marks where a sample exists, see alerts/backtest.py)."""
    width = max(1, math.ceil(span_s / step_s))
    keys = samples[["node", "gpu_index"]].drop_duplicates().sort_values(["node", "gpu_index"])
    keys = keys.astype({"gpu_index": np.int64}).reset_index(drop=True)
    known = gpus.dropna(subset=["gpu_index"]).astype({"gpu_index": np.int64})
    known = known.drop_duplicates(["node", "gpu_index"])[["node", "gpu_index", "model"]]
    keys = keys.merge(known, on=["node", "gpu_index"], how="left")
    racks = gpus.dropna(subset=["rack"]).drop_duplicates("node").set_index("node")["rack"]
    keys["rack"] = keys["node"].map(racks)
    row = pd.MultiIndex.from_frame(keys[["node", "gpu_index"]]).get_indexer(
        pd.MultiIndex.from_frame(samples[["node", "gpu_index"]].astype({"gpu_index": np.int64})))
    age_s = (np.datetime64(end, "us") - samples["ts"].to_numpy("datetime64[us]")) / np.timedelta64(
        1, "s")
    col = width - 1 - np.floor(age_s / step_s).astype(np.int64)
    ok = (col >= 0) & (col < width)
    series = {}
    for name in columns:
        grid = np.full((len(keys), width), np.nan, dtype=np.float32)
        if name in samples:
            values = pd.to_numeric(samples[name], errors="coerce").to_numpy(np.float32,
                                                                            na_value=np.nan)
            grid[row[ok], col[ok]] = values[ok]
        series[name] = grid
    return Window(
        end=end, step_s=step_s, node=keys["node"].to_numpy(object),
        gpu_index=keys["gpu_index"].to_numpy(np.int64),
        rack=keys["rack"].astype(object).where(keys["rack"].notna(), None).to_numpy(object),
        model=keys["model"].astype(object).fillna("unknown").to_numpy(object),
        series=series, events=events,
        stragglers=pd.DataFrame() if stragglers is None else stragglers,
    )


# -- reductions over the grid (pure numpy) ---------------------------------------------
def latest(grid: np.ndarray, cols: int) -> np.ndarray:
    """Each row's newest non-NaN value among its last ``cols`` columns (NaN if none)."""
    tail = grid[:, -cols:]
    present = ~np.isnan(tail)
    back = np.argmax(present[:, ::-1], axis=1)
    out = tail[np.arange(len(tail)), tail.shape[1] - 1 - back]
    out[~present.any(axis=1)] = np.nan
    return out


def mean(grid: np.ndarray, first: int, stop: int) -> np.ndarray:
    """Each row's mean over columns ``[first, stop)`` ignoring NaN (NaN if none)."""
    part = grid[:, first:stop]
    count = (~np.isnan(part)).sum(axis=1)
    total = np.nansum(part, axis=1, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def load_adjusted(temp_c: np.ndarray, power_w: np.ndarray, model: np.ndarray,
                  c_per_w: dict | None = None) -> np.ndarray:
    """Temperature with the GPU's own heating removed, ``temp_c - k * power_w`` (C).

    ``k`` (C per W) is fitted per GPU model across the fleet (least squares, see
    :func:`fit_c_per_w`) unless given in ``c_per_w`` (model -> k), so what is left
    estimates the air the GPU breathes: comparable between GPUs at different load.
    """
    c_per_w = c_per_w if c_per_w is not None else fit_c_per_w(temp_c, power_w, model)
    out = np.full(temp_c.shape, np.nan)
    ok = np.isfinite(temp_c) & np.isfinite(power_w)
    for m in np.unique(model):
        sel = ok & (model == m)
        out[sel] = temp_c[sel].astype(np.float64) - c_per_w.get(m, DEFAULT_C_PER_W) * power_w[sel]
    return out


def fit_c_per_w(temp_c: np.ndarray, power_w: np.ndarray, model: np.ndarray) -> dict:
    """Die temperature rise per watt of each GPU model (C/W), fitted by least squares
    across the fleet; a fit needs 20 GPUs and a power spread of 50 W, otherwise
    ``DEFAULT_C_PER_W``."""
    out = {}
    ok = np.isfinite(temp_c) & np.isfinite(power_w)
    for m in np.unique(model):
        sel = ok & (model == m)
        t, p = temp_c[sel].astype(np.float64), power_w[sel].astype(np.float64)
        k = DEFAULT_C_PER_W
        if len(p) >= 20 and p.std() >= 50.0:
            k = float(np.clip(np.cov(p, t, bias=True)[0, 1] / p.var(), 0.01, 0.3))
        out[m] = k
    return out


def group_median(values: np.ndarray, codes: np.ndarray, n: int):
    """Median of each group's non-NaN ``values`` (groups ``0..n-1`` by ``codes``; NaN for
    a group without any) and each group's count of them, in float64 (as pandas)."""
    values = np.asarray(values, dtype=np.float64)
    ok = ~np.isnan(values)
    v, c = values[ok], np.asarray(codes)[ok]
    order = np.lexsort((v, c))
    v, c = v[order], c[order]
    count = np.bincount(c, minlength=n)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    has = count > 0
    med = np.full(n, np.nan)
    med[has] = (v[(start + (count - 1) // 2)[has]] + v[(start + count // 2)[has]]) / 2
    return med, count


def robust_z(values: np.ndarray, groups: np.ndarray | None = None, floor: float = 0.5):
    """Deviation from the (group) median and its robust z-score (MAD scaled by 1.4826,
    plus ``floor`` in the values' unit so identical peers do not divide by zero).
    Returns (deviation, z, peers per group). Numpy only: the backtest runs this at every
    evaluation of a month."""
    values = np.asarray(values, dtype=np.float64)
    if groups is None:
        codes, n = np.zeros(len(values), dtype=np.int64), 1
    else:
        keys, codes = np.unique(np.asarray(groups, dtype=object), return_inverse=True)
        n = len(keys)
    med, count = group_median(values, codes, n)
    dev = values - med[codes]
    mad, _ = group_median(np.abs(dev), codes, n)
    return dev, dev / (1.4826 * mad[codes] + floor), count[codes]
