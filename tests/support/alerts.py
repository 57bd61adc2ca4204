"""Shared helpers of the alert tests: recorded series, a small cluster, a runtime config,
and a rack incident run through the alert runtime on a simulated clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from alerts.runtime import AlertRuntime
from alerts.sinks import post
from alerts.window import Window, build_window
from gpulens.config import load
from warehouse import Warehouse
from warehouse.queries import alerts as q

T0 = datetime(2026, 11, 2, 12, 0, 0)
STEP = timedelta(seconds=15)


def fleet_frame(k: int, node, temp, power) -> pd.DataFrame:
    """The samples of minute ``k`` (0-59, the last at T0) of a hand-built fleet: one row
    per GPU, ``gpu_index`` cycling over 8, HBM at the die's temperature, no throttling."""
    n = len(temp)
    return pd.DataFrame({"ts": T0 - (59 - k) * STEP, "node": node,
                         "gpu_index": np.arange(n) % 8, "temp_c": temp, "power_w": power,
                         "mem_temp_c": temp, "throttle_thermal": 0.0})


def fleet_window(frames: list[pd.DataFrame]) -> Window:
    """The evaluation window at T0 (15 min, 15-s steps) over ``fleet_frame`` rows; a
    node's rack is the first two letters of its name, every GPU an H100."""
    samples = pd.concat(frames)
    gpus = samples[["node", "gpu_index"]].drop_duplicates()
    gpus["rack"] = gpus["node"].str[:2]
    gpus["model"] = "H100"
    return build_window(samples, gpus, pd.DataFrame(), T0, 900, 15)


def series_window(now: datetime, temps: dict[datetime, float], *, width: int = 60,
                  column: str = "temp_c") -> Window:
    """One GPU whose ``column`` took the recorded values (ts -> value) up to ``now``."""
    grid = np.full((1, width), np.nan, dtype=np.float32)
    for ts, value in temps.items():
        age = int((now - ts) / STEP)
        if 0 <= age < width and ts <= now:
            grid[0, width - 1 - age] = value
    series = {c: np.full((1, width), np.nan, dtype=np.float32)
              for c in ("temp_c", "mem_temp_c", "power_w", "throttle_thermal")}
    series[column] = grid
    return Window(end=now, step_s=15.0, node=np.array(["n01"], dtype=object),
                  gpu_index=np.array([0]), rack=np.array(["r1"], dtype=object),
                  model=np.array(["H100"], dtype=object), series=series,
                  events=pd.DataFrame())


class Cluster:
    """A small fleet: ``racks`` racks x 2 nodes x 8 GPUs, half of them busy.

    ``temp_c = 24 + rack offset + 0.066 C/W * power + noise + inlet rise``, where the
    inlet rise of a rack follows ``rise(rack, ts)`` (degrees C).
    """

    def __init__(self, racks: int = 6, seed: int = 0):
        self.racks = [f"r{i}" for i in range(racks)]
        self.nodes = [f"n{r}{j}" for r in range(racks) for j in range(2)]
        self.rng = np.random.default_rng(seed)
        self.offset = dict(zip(self.racks, self.rng.uniform(-1, 1, racks), strict=True))
        n = len(self.nodes) * 8
        self.node = np.repeat(self.nodes, 8)
        self.rack = np.array([self.racks[int(x[1:-1])] for x in self.node], dtype=object)
        self.gpu_index = np.tile(np.arange(8), len(self.nodes)).astype(np.int16)
        self.power = np.where(np.arange(n) % 2 == 0, 650.0, 65.0)
        self.incidents: list[tuple[str, datetime, datetime, float]] = []

    def topology(self) -> dict[str, pd.DataFrame]:
        return {
            "racks": pd.DataFrame({"rack": self.racks}),
            "nodes": pd.DataFrame({"node": self.nodes, "rack": [self.racks[int(x[1:-1])]
                                                               for x in self.nodes],
                                   "partition": "train", "gpus": 8}),
            "gpus": pd.DataFrame({"gpu_uuid": [f"GPU-{a}-{b}" for a, b in
                                               zip(self.node, self.gpu_index, strict=True)],
                                  "node": self.node, "gpu_index": self.gpu_index,
                                  "model": "H100", "tdp_w": 700.0}),
        }

    def rise(self, rack: str, ts: datetime) -> float:
        """Inlet rise by cooling incidents: +2.4 C per minute up to the plateau, back down
        the same way (like the simulator's rack cooling failure)."""
        total = 0.0
        for r, start, end, peak in self.incidents:
            if r != rack or ts < start:
                continue
            up = min(peak, peak / 5 * (int((ts - start).total_seconds() // 60) + 1))
            if ts >= end:
                up = max(0.0, peak - peak / 5 * (int((ts - end).total_seconds() // 60) + 1))
            total += up
        return total

    def samples(self, ts: datetime) -> pd.DataFrame:
        rise = np.array([self.rise(r, ts) for r in self.rack])
        offs = np.array([self.offset[r] for r in self.rack])
        temp = 24 + offs + 0.066 * self.power + rise + self.rng.normal(0, 0.2, len(rise))
        return pd.DataFrame({
            "ts": ts, "node": self.node, "gpu_index": self.gpu_index,
            "interval_s": 15.0, "power_w": self.power, "temp_c": temp,
            "mem_temp_c": temp + 5, "throttle_thermal": False,
        })


def alert_config(cluster_name: str | None = None, **overrides):
    """Defaults with alert settings overridden (``webhook_url=...``), and cluster.name."""
    return load(None, env={}).with_overrides(
        cluster__name=cluster_name,
        **{f"alerts__{k.replace('.', '__')}": v for k, v in overrides.items()})


class Incident:
    """A warehouse file, a small cluster with rack r2 failing from +16 min to +30 min,
    and a runtime on a simulated clock; ``tick()`` is one 15-s cycle of the service."""

    def __init__(self, path, start=T0, **settings):
        self.path, self.settings = path, settings
        self.cluster = Cluster()
        self.start = start
        self.cluster.incidents.append(("r2", start + timedelta(minutes=16),
                                       start + timedelta(minutes=30), 12.0))
        self.now = start
        self.send = post
        self.open()
        self.wh.ingest_all(self.cluster.topology())

    def open(self):
        self.wh = Warehouse(self.path)
        self.rt = AlertRuntime(self.wh, alert_config(**self.settings), now=lambda: self.now,
                               send=lambda *a, **k: self.send(*a, **k))

    def restart(self):
        self.wh.close()
        self.open()

    def tick(self, deliver: bool = True):
        self.wh.ingest("samples", self.cluster.samples(self.now)).result()
        self.rt.evaluate_once()
        if deliver:
            self.rt.deliver_once()
        self.now += STEP

    def run_until(self, minutes: float, **kw):
        while self.now < self.start + timedelta(minutes=minutes):
            self.tick(**kw)

    def outbox(self):
        return q.list_notifications(self.wh.reader(), now=self.now, since_s=86400 * 30)
