"""Stragglers in multi-node jobs (issue 15, MegaScale): ground truth and its telemetry.

A synchronous job runs at the pace of its slowest member. Every ``straggler_every_h``
hours (the first ``first_straggler_after_min`` after the live start) the largest
multi-node run then running gets one straggler, alternately:

- ``slow_gpu``: one GPU with degraded clocks (bad cooling): SM clock x (1 - slowdown),
  thermal throttling reported, its power down with its clock;
- ``slow_node``: every GPU of one node slowed by the node's power brake (HW slowdown
  reported), clocks x (1 - slowdown).

Either way the other GPUs of the run wait at collectives: their power drops to
``PEER_WAIT_POWER`` of their busy draw and their SM activity by the slowdown, while
GPU_UTIL still reads busy (the NCCL kernels spin). An episode lasts
``straggler_hold_min`` minutes or until its run ends; one shorter than
``MIN_EPISODE_S`` is dropped. Episodes are resolved lazily, once the workload has been
simulated past their start, from the runs alone, so they are the same however the
history is asked for. Times are simulator seconds; slowdown is a fraction 0-1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import SimConfig
from .workload import Workload

PEER_WAIT_POWER = 0.8  # share of their busy draw the waiting peers keep
STRAGGLER_POWER = 0.6  # power falls by this share of the clock's slowdown
MIN_EPISODE_S = 15 * 60.0
HORIZON_S = 90 * 86400.0


@dataclass(frozen=True)
class Episode:
    """One injected straggler: ``gpus`` are the slow GPUs (global indices)."""

    kind: str  # slow_gpu | slow_node
    run_id: int
    node: int
    gpu: int  # global GPU index for slow_gpu, -1 for slow_node
    start_s: float
    end_s: float
    slowdown: float
    gpus: tuple[int, ...]


class Stragglers:
    """The straggler schedule and the telemetry factors it implies."""

    def __init__(self, config: SimConfig, live_s: float):
        c = self.c = config
        every = c.straggler_every_h * 3600.0
        first = live_s + c.first_straggler_after_min * 60.0
        times = [first]
        if every > 0:
            times = [first - m * every for m in range(int(first // every), 0, -1)] + times
            times += [first + m * every for m in range(1, int(HORIZON_S // every) + 1)]
        self.times = [t for t in times if t >= 0]
        self.episodes: list[Episode] = []
        self._done = 0  # schedule times resolved so far
        self._corr: dict[int, np.ndarray] = {}  # episode -> energy correction (cached)

    def resolve(self, w: Workload) -> list[Episode]:
        """Episodes whose start the workload has been simulated past."""
        while self._done < len(self.times) and self.times[self._done] < w.now:
            i, t = self._done, self.times[self._done]
            self._done += 1
            runs = [r for r in w.runs if len(r.nodes) >= 2 and r.start_s <= t < r.end_s]
            if not runs:
                continue
            run = max(runs, key=lambda r: (len(r.gpus), -r.run_id))
            rng = np.random.default_rng([self.c.seed, 505, i])
            node = int(rng.choice(run.nodes))
            end = min(t + rng.uniform(*self.c.straggler_hold_min) * 60.0, run.end_s)
            slowdown = float(np.round(rng.uniform(*self.c.straggler_slowdown), 3))
            on_node = run.gpus[run.gpus // self.c.gpus_per_node == node]
            if i % 2 == 0:
                kind, gpu = "slow_gpu", int(rng.choice(on_node))
                gpus = (gpu,)
            else:
                kind, gpu, gpus = "slow_node", -1, tuple(int(g) for g in on_node)
            if end - t >= MIN_EPISODE_S:
                self.episodes.append(Episode(kind, run.run_id, node, gpu, float(t),
                                             float(round(end)), slowdown, gpus))
        return self.episodes

    def overlapping(self, w: Workload, a_s: float, b_s: float) -> list[tuple[int, Episode]]:
        """(index, episode) of the episodes active somewhere in [a_s, b_s]."""
        return [(i, e) for i, e in enumerate(self.resolve(w)) if e.start_s <= b_s
                and e.end_s > a_s]

    def factors(self, w: Workload, t_s: np.ndarray, gpus: np.ndarray,
                run_of: np.ndarray) -> dict[str, np.ndarray] | None:
        """Per tick (rows of ``t_s``) and GPU (columns ``gpus``, held by run ``run_of``,
        -1 idle): factors on busy power ``pf``, SM clock ``cf`` and SM activity ``smf``,
        and the thermal/brake flags; None when no episode touches the window."""
        if len(t_s) == 0:
            return None
        eps = self.overlapping(w, float(t_s[0]), float(t_s[-1]))
        if not eps:
            return None
        shape = (len(t_s), len(gpus))
        out = {"pf": np.ones(shape), "cf": np.ones(shape), "smf": np.ones(shape),
               "hot": np.zeros(shape, bool), "brake": np.zeros(shape, bool)}
        for _, e in eps:
            on = (t_s[:, None] >= e.start_s) & (t_s[:, None] < e.end_s) & (run_of == e.run_id)
            slow = on & np.isin(gpus, e.gpus)[None, :]
            peer = on & ~slow
            out["pf"] = np.where(slow, 1 - STRAGGLER_POWER * e.slowdown,
                                 np.where(peer, PEER_WAIT_POWER, out["pf"]))
            out["cf"] = np.where(slow, 1 - e.slowdown, out["cf"])
            out["smf"] = np.where(peer, 1 - e.slowdown, out["smf"])
            out["hot" if e.kind == "slow_gpu" else "brake"] |= slow
        return out

    def energy_correction(self, w: Workload, k0: int, dt: float, ent: dict, pm) -> np.ndarray:
        """sum_{j<k0} of (straggler base draw - plain base draw) per GPU, int64 mW-ticks,
        so the energy counter keeps integrating the power reported (see power.py)."""
        n = len(pm.idle_mw)
        total = np.zeros(n, np.int64)
        for i, e in self.overlapping(w, 0.0, k0 * dt):
            s0, s1 = int(np.ceil(e.start_s / dt)), int(np.ceil(e.end_s / dt))
            full = s1 <= k0
            if full and i in self._corr:
                total += self._corr[i]
                continue
            corr = self._episode_correction(w, e, s0, min(s1, k0), dt, ent, pm)
            if full:
                self._corr[i] = corr
            total += corr
        return total

    def _episode_correction(self, w, e: Episode, s0: int, s1: int, dt: float, ent: dict,
                            pm) -> np.ndarray:
        n = len(pm.idle_mw)
        mine = ent["run"] == e.run_id
        if s1 <= s0 or not mine.any():
            return np.zeros(n, np.int64)
        g, a, b = ent["gpu"][mine], ent["a"][mine], ent["b"][mine]
        j = np.arange(s0, s1)
        inside = (j[:, None] >= a[None, :]) & (j[:, None] < b[None, :])
        run_of = np.where(inside, e.run_id, -1)
        f = self.factors(w, j * dt, g, run_of)
        pb, _ = pm.busy_mw(g, ent["level"][mine])
        lim = pm.limit_at(j, g)
        base = np.minimum(pb[None, :], lim)
        delta = np.where(inside, scaled(base, f["pf"]) - base, 0).sum(axis=0)
        return np.bincount(g, weights=delta, minlength=n).astype(np.int64)


def scaled(base_mw: np.ndarray, pf: np.ndarray) -> np.ndarray:
    """Busy draw (mW, int64) times the straggler factor, exact where the factor is 1."""
    return np.where(pf != 1.0, np.rint(base_mw * pf), base_mw).astype(np.int64)
