"""Scheduled incidents: the ground truth the dashboards and alerts should reveal.

- rack cooling failures: a rack's inlet air rises by ``cooling_rise_c`` over
  ``cooling_ramp_min`` (in one-minute steps), holds 30-60 min, then falls back; the first
  begins ``first_incident_after_min`` after the live start, others recur every
  ``cooling_incident_every_h`` hours before and after it;
- one poorly cooled GPU (thermal resistance x ``hot_gpu_factor``) for the whole run;
- lemon nodes, whose fault rate is ``lemon_factor`` times the others'.

Incidents are not telemetry: they are exposed through ``Cluster.incidents()`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from .config import SimConfig
from .topology import TRAIN, Topology

HORIZON_S = 90 * 86400.0  # recurring incidents are scheduled this far past the live start


@dataclass(frozen=True)
class Incident:
    """One ground-truth incident (times naive UTC)."""

    kind: str  # rack_cooling | hot_gpu | lemon_node | slow_gpu | slow_node (stragglers)
    start: datetime
    end: datetime | None  # None: lasts for the whole simulation
    rack: str | None = None
    node: str | None = None
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    magnitude: float = 0.0  # inlet rise (C), thermal-resistance factor, or fault factor
    detail: str = ""
    job_id: str | None = None  # the job a straggler slows (stragglers only)


@dataclass(frozen=True)
class Cooling:
    """A rack cooling failure in simulator seconds (since the anchor)."""

    rack: int
    start_s: float
    ramp_s: float
    hold_s: float
    rise_c: float

    @property
    def end_s(self) -> float:
        return self.start_s + 2 * self.ramp_s + self.hold_s

    def delta_c(self, t_s: np.ndarray) -> np.ndarray:
        """Inlet rise (degrees C) at times ``t_s``: a staircase of one-minute steps."""
        t = np.asarray(t_s, dtype=np.float64) - self.start_s
        steps = max(1, round(self.ramp_s / 60.0))
        up = np.minimum(np.floor(t / 60.0) + 1, steps) / steps
        down = 1.0 - np.minimum(np.floor((t - self.ramp_s - self.hold_s) / 60.0) + 1, steps) / steps
        frac = np.where(t < self.ramp_s, up, np.where(t < self.ramp_s + self.hold_s, 1.0, down))
        return np.where((t >= 0) & (t < self.end_s - self.start_s), self.rise_c * frac, 0.0)


class Incidents:
    """Draws and holds the incident schedule of one simulated cluster."""

    def __init__(self, config: SimConfig, topo: Topology, live_s: float):
        c = config
        rng = np.random.default_rng([c.seed, 202])
        train_racks = np.flatnonzero(topo.rack_partition == TRAIN)
        racks = train_racks if len(train_racks) else np.arange(c.racks)
        # multi-node jobs fill the lowest-numbered free nodes first, so the first third of
        # the train racks is the busiest: the live incident and the hot GPU go there
        busiest = racks[: max(1, -(-len(racks) // 3))]
        first = live_s + c.first_incident_after_min * 60.0
        every = c.cooling_incident_every_h * 3600.0
        starts = [first]
        if every > 0:
            back = int(first // every)
            starts = [first - m * every for m in range(back, 0, -1)] + starts
            starts += [first + m * every for m in range(1, int(HORIZON_S // every) + 1)]
        self.cooling: list[Cooling] = []
        for s in starts:
            jitter = 0.0 if s == first else rng.uniform(-0.2, 0.2) * every
            start = max(0.0, round(s + jitter))
            self.cooling.append(
                Cooling(
                    rack=int(rng.choice(busiest if s == first else racks)),
                    start_s=start,
                    ramp_s=c.cooling_ramp_min * 60.0,
                    hold_s=round(rng.uniform(*c.cooling_hold_min) * 60.0),
                    rise_c=float(np.round(rng.uniform(*c.cooling_rise_c), 1)),
                )
            )
        self.hot_gpu = int(rng.choice(np.flatnonzero(np.isin(topo.gpu_rack, busiest))))
        train_nodes = topo.partition_nodes(TRAIN)
        pool = train_nodes if len(train_nodes) else np.arange(c.n_nodes)
        n_lemon = min(c.lemon_nodes, len(pool))
        self.lemons = np.sort(rng.choice(pool, n_lemon, replace=False)) if n_lemon else []
        self.node_hazard = np.ones(c.n_nodes)
        self.node_hazard[self.lemons] = c.lemon_factor
        topo.thermal_r[self.hot_gpu] = topo.model_thermal_r[self.hot_gpu] * c.hot_gpu_factor

    def inlet_delta(self, t_s: np.ndarray, n_racks: int) -> np.ndarray:
        """Inlet rise by incidents, degrees C, shape (len(t_s), n_racks)."""
        t_s = np.asarray(t_s, dtype=np.float64)
        out = np.zeros((len(t_s), n_racks))
        if len(t_s) == 0:
            return out
        for inc in self.overlapping(t_s[0], t_s[-1] + 1):
            out[:, inc.rack] += inc.delta_c(t_s)
        return out

    def overlapping(self, a_s: float, b_s: float) -> list[Cooling]:
        """Cooling incidents active somewhere in [a_s, b_s)."""
        return [i for i in self.cooling if i.start_s < b_s and i.end_s > a_s]

    def ground_truth(self, topo: Topology, to_dt) -> list[Incident]:
        """All incidents as :class:`Incident` records; ``to_dt`` maps seconds to datetime."""
        out = [
            Incident(
                kind="rack_cooling",
                start=to_dt(i.start_s),
                end=to_dt(i.end_s),
                rack=topo.rack_names[i.rack],
                magnitude=i.rise_c,
                detail=f"inlet +{i.rise_c:.1f} C, plateau {i.hold_s / 60:.0f} min",
            )
            for i in self.cooling
        ]
        g = self.hot_gpu
        out.append(
            Incident(
                kind="hot_gpu",
                start=to_dt(0.0),
                end=None,
                rack=topo.rack_names[topo.gpu_rack[g]],
                node=topo.node_names[topo.gpu_node[g]],
                gpu_uuid=topo.gpu_uuids[g],
                gpu_index=int(topo.gpu_index[g]),
                magnitude=float(topo.config.hot_gpu_factor),
                detail="poor cooling: thermal resistance raised",
            )
        )
        for n in self.lemons:
            out.append(
                Incident(
                    kind="lemon_node",
                    start=to_dt(0.0),
                    end=None,
                    rack=topo.rack_names[topo.node_rack[n]],
                    node=topo.node_names[n],
                    magnitude=float(self.node_hazard[n]),
                    detail="fails jobs repeatedly, passes health checks",
                )
            )
        return out


def seconds_to_datetime(anchor: datetime):
    """A function mapping simulator seconds to naive UTC datetimes."""
    return lambda s: anchor + timedelta(seconds=float(s))
