"""Confounders: things that look like thermal trouble but are not (issue 22).

An alert rule that pages for these cries wolf, so the alert-quality benchmark turns them
on (``SimConfig.confounders``) and counts every page they cause as false:

- a warm afternoon: the machine room's supply air rises by ``warm_c`` (3-5 C) for every
  rack at once, over ``warm_ramp_h`` hours, holds, and falls back the same way;
- a load burst: a wave of SFT and evaluation jobs fills the fleet's idle GPUs at once
  (every rack's power and temperature rise together);
- a rack drained for maintenance: the scheduler places nothing on one rack for some
  hours (its GPUs fall idle as their jobs end), then jobs start on it again.

Drawn from their own random stream (seed, 505), so turning them on changes nothing else
that was drawn; off by default (the demo and the tests see the cluster as before).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .config import SimConfig

HOUR = 3600.0
HORIZON_S = 90 * 86400.0  # scheduled this far past the anchor


@dataclass(frozen=True)
class Confounder:
    """One confounder in simulator seconds; ``rack`` only for a drain."""

    kind: str  # warm_afternoon | load_burst | rack_drain
    start_s: float
    end_s: float
    rack: int | None = None
    magnitude: float = 0.0  # inlet rise (C) or the share of idle GPUs the burst asks for


class Confounders:
    """The confounder schedule of one simulated cluster."""

    def __init__(self, config: SimConfig, n_racks: int, day_offset_s: float):
        self.items: list[Confounder] = []
        if not config.confounders:
            return
        rng = np.random.default_rng([config.seed, 505])
        ramp = 2 * HOUR
        for day in range(int(HORIZON_S // 86400)):
            # 13:00-15:00 UTC the warming begins (a day in two, on average)
            if rng.random() < 0.5:
                start = day * 86400.0 - day_offset_s + 13 * HOUR + rng.uniform(0, 2 * HOUR)
                hold = rng.uniform(1, 3) * HOUR
                if start >= 0:
                    self.items.append(Confounder("warm_afternoon", start,
                                                 start + 2 * ramp + hold,
                                                 magnitude=float(rng.uniform(3.0, 5.0))))
        t = rng.uniform(6, 30) * HOUR
        while t < HORIZON_S:  # a burst every ~2 days, 1-3 h
            self.items.append(Confounder("load_burst", t, t + rng.uniform(1, 3) * HOUR,
                                         magnitude=0.9))
            t += rng.uniform(30, 66) * HOUR
        t = rng.uniform(20, 60) * HOUR
        while t < HORIZON_S:  # a rack drained every ~4 days, for 4-10 h
            self.items.append(Confounder("rack_drain", t, t + rng.uniform(4, 10) * HOUR,
                                         rack=int(rng.integers(n_racks))))
            t += rng.uniform(72, 120) * HOUR
        # whole seconds, as the workload's events
        self.items = sorted((replace(c, start_s=float(round(c.start_s)),
                                     end_s=float(round(c.end_s))) for c in self.items),
                            key=lambda c: c.start_s)
        self.ramp_s = ramp
        self.burst_rng = np.random.default_rng([config.seed, 506])

    def ambient_c(self, t_s: np.ndarray) -> np.ndarray:
        """Supply-air rise of every rack at ``t_s`` by warm afternoons, degrees C."""
        t_s = np.asarray(t_s, dtype=np.float64)
        out = np.zeros(len(t_s))
        for c in self.items:
            if c.kind != "warm_afternoon" or len(t_s) == 0 or c.end_s <= t_s[0] \
                    or c.start_s > t_s[-1]:
                continue
            up = np.clip((t_s - c.start_s) / self.ramp_s, 0, 1)
            down = np.clip((c.end_s - t_s) / self.ramp_s, 0, 1)
            out += c.magnitude * np.minimum(up, down)
        return out

    def of_kind(self, kind: str) -> list[Confounder]:
        return [c for c in self.items if c.kind == kind]
