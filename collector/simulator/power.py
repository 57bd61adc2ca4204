"""Power, thermal limits and the energy counter, in exact integer milliwatts.

A GPU's "base" draw at tick k, ``B[k]`` (mW), is its idle draw when no run holds it, else
the run's busy draw capped by the thermal limit: the power at which the die would reach
its slowdown temperature given the rack's inlet air (``temp = inlet + R * power``). The
reported power is ``B[k] + u[k] - u[k-1]`` where ``u`` is per-tick noise, so the energy
counter has a closed form that any window can evaluate on its own::

    energy_j(k) = energy0 + (sum_{j<k} B[j] + u[k-1]) * interval_s / 1000

and it increases by exactly ``power_w * interval_s`` from one tick to the next. The sum of
``B`` before a tick is taken over run intervals (busy draw is constant over a run except
while a cooling incident raises its rack's inlet), with integer arithmetic so that every
window gets bit-identical counters.
"""

from __future__ import annotations

import numpy as np

from .incidents import Incidents
from .topology import Topology

POWER_BRAKE = 0.4  # share of a busy draw above TDP that survives the power limiter


def limit_mw(slowdown_c, inlet_c, thermal_r) -> np.ndarray:
    """Thermal limit, mW: the draw that puts the die at its slowdown temperature."""
    return np.floor((slowdown_c - inlet_c) / thermal_r * 1000.0).astype(np.int64)


class PowerModel:
    """Per-GPU power traits and the exact prefix sums of the base draw."""

    def __init__(self, topo: Topology, incidents: Incidents, interval_s: float):
        self.topo, self.inc, self.dt = topo, incidents, interval_s
        self.idle_mw = np.rint(topo.idle_w * 1000).astype(np.int64)
        self.base_limit_mw = limit_mw(
            topo.slowdown_c, topo.rack_inlet_c[topo.gpu_rack], topo.thermal_r
        )
        self.spans = self._spans()

    def busy_mw(self, gpu: np.ndarray, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Busy draw (mW) of GPUs ``gpu`` at run intensity ``level`` (0-1), before the
        thermal limit, and whether the board wanted more than its TDP (power brake)."""
        t = self.topo
        idle, tdp = t.idle_w[gpu], t.tdp_w[gpu]
        raw = idle + (tdp * t.power_factor[gpu] - idle) * level
        over = raw > tdp
        braked = np.where(over, tdp + POWER_BRAKE * (raw - tdp), raw)
        return np.rint(braked * 1000).astype(np.int64), over

    def inlet_c(self, ticks: np.ndarray) -> np.ndarray:
        """Inlet air of every rack at ``ticks``, degrees C, shape (len(ticks), racks)."""
        t_s = np.asarray(ticks, dtype=np.float64) * self.dt
        return self.topo.rack_inlet_c[None, :] + self.inc.inlet_delta(t_s, self.topo.config.racks)

    def limit_at(self, ticks: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """Thermal limit (mW) of GPUs ``gpu`` at ``ticks``, shape (len(ticks), len(gpu))."""
        t = self.topo
        return limit_mw(t.slowdown_c[gpu][None, :], self.inlet_c(ticks)[:, t.gpu_rack[gpu]],
                        t.thermal_r[gpu][None, :])

    def _spans(self) -> list[tuple[int, int, int]]:
        """(rack, first tick, end tick) of the merged cooling incidents of each rack."""
        by_rack: dict[int, list[tuple[int, int]]] = {}
        for i in self.inc.cooling:
            a, b = int(np.ceil(i.start_s / self.dt)), int(np.ceil(i.end_s / self.dt))
            by_rack.setdefault(i.rack, []).append((a, b))
        out = []
        for rack, ivs in by_rack.items():
            ivs.sort()
            cur = list(ivs[0])
            for a, b in ivs[1:]:
                if a <= cur[1]:
                    cur[1] = max(cur[1], b)
                else:
                    out.append((rack, *cur))
                    cur = [a, b]
            out.append((rack, *cur))
        return out

    def base_sum(self, k0: int, gpu, level, a, b) -> np.ndarray:
        """sum_{j<k0} B[j] per GPU (int64 mW-ticks), given every run interval as flat
        arrays: GPU, run intensity, first tick ``a`` and end tick ``b`` (exclusive)."""
        topo = self.topo
        n = len(self.idle_mw)
        total = self.idle_mw * k0
        sel = a < k0
        if not sel.any():
            return total
        g, lv, a, b = gpu[sel], level[sel], a[sel], b[sel]
        busy, _ = self.busy_mw(g, lv)
        const = np.minimum(busy, self.base_limit_mw[g])
        ticks = np.minimum(b, k0) - a
        extra = np.bincount(g, weights=ticks * (const - self.idle_mw[g]), minlength=n)
        total = total + np.rint(extra).astype(np.int64)
        for rack, s0, s1 in self.spans:
            s1 = min(s1, k0)
            hit = (topo.gpu_rack[g] == rack) & (a < s1) & (b > s0)
            if s0 >= s1 or not hit.any():
                continue
            j = np.arange(s0, s1)
            inlet = self.inlet_c(j)[:, rack]
            gh = g[hit]
            lim = limit_mw(
                topo.slowdown_c[gh][:, None], inlet[None, :], topo.thermal_r[gh][:, None]
            )
            vals = np.minimum(busy[hit][:, None], lim) - const[hit][:, None]
            inside = (j[None, :] >= a[hit][:, None]) & (j[None, :] < b[hit][:, None])
            corr = np.where(inside, vals, 0).sum(axis=1)
            total += np.rint(np.bincount(gh, weights=corr, minlength=n)).astype(np.int64)
        return total
