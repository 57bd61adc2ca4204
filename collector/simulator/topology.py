"""The simulated floor: racks in zones and rows, nodes, GPUs, and their static traits.

Everything here is fixed for a (config, seed): names, UUIDs, partitions, and the per-GPU
traits the telemetry model uses (idle draw, power factor, thermal resistance, inlet
temperature of the rack). Arrays are indexed by the global GPU index
``node_index * gpus_per_node + gpu_index``.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pyarrow as pa

from warehouse.schema import SCHEMAS

from .config import MODELS, GpuModel, SimConfig

TRAIN, EVAL = 0, 1
PARTITIONS = ("train", "eval")


def gpu_uuid(seed: int, node: str, index: int) -> str:
    """A stable NVIDIA-style UUID ("GPU-" + uuid hex) derived from the seed and slot."""
    digest = hashlib.sha1(f"{seed}/{node}/{index}".encode()).digest()[:16]
    return "GPU-" + str(uuid.UUID(bytes=digest))


class Topology:
    """Names, placement and static per-GPU traits of a simulated cluster."""

    def __init__(self, config: SimConfig):
        self.config = config
        rng = np.random.default_rng([config.seed, 101])  # drawn in this order: racks, GPUs
        self._place_racks(config, rng)
        self._place_nodes(config)
        self._gpu_traits(config, rng)

    def _place_racks(self, c: SimConfig, rng: np.random.Generator) -> None:
        """Rack names, partitions, zones, floor positions and inlet temperatures (°C)."""
        rw = max(2, len(str(c.racks)))
        self.rack_names = [f"r{i + 1:0{rw}d}" for i in range(c.racks)]
        n_eval = min(c.racks - 1, round(c.racks * c.eval_rack_fraction)) if c.racks > 1 else 0
        # eval racks are the last ones (the last zone), train racks the rest
        self.rack_partition = np.array(
            [EVAL if i >= c.racks - n_eval else TRAIN for i in range(c.racks)], dtype=np.int8
        )
        per_zone = -(-c.racks // max(1, c.zones))
        self.rack_zone = np.arange(c.racks) // per_zone
        self.zone_names = [f"zone{z + 1}" for z in range(max(1, c.zones))]
        # floor: rows of racks_per_row within a zone; zones side by side along y
        pos_in_zone = np.arange(c.racks) - self.rack_zone * per_zone
        rows_per_zone = -(-per_zone // c.racks_per_row)
        self.rack_row = (self.rack_zone * rows_per_zone + pos_in_zone // c.racks_per_row).astype(
            np.int32
        )
        self.rack_x = (pos_in_zone % c.racks_per_row).astype(np.float64)
        self.rack_y = self.rack_row * 2.0 + self.rack_zone * 2.0  # aisles and a zone gap
        # inlet air: warmer at the ends of a row, plus a per-rack offset (degrees C)
        mid = (c.racks_per_row - 1) / 2.0
        self.rack_inlet_c = (
            c.inlet_c + 0.5 * np.abs(self.rack_x - mid) + rng.normal(0.0, 0.8, c.racks).clip(-2, 2)
        )

    def _place_nodes(self, c: SimConfig) -> None:
        nw = max(3, len(str(c.n_nodes)))
        self.node_names = [f"node{i + 1:0{nw}d}" for i in range(c.n_nodes)]
        self.node_rack = np.repeat(np.arange(c.racks), c.nodes_per_rack)
        self.node_partition = self.rack_partition[self.node_rack]

    def _gpu_traits(self, c: SimConfig, rng: np.random.Generator) -> None:
        """Per GPU: node, index, UUID, model limits (W, MiB, MHz, °C), idle power (W),
        power and thermal spread, HBM offset (°C), energy counter start (J), ECC drift."""
        g = c.gpus_per_node
        self.gpu_node = np.repeat(np.arange(c.n_nodes), g)
        self.gpu_index = np.tile(np.arange(g, dtype=np.int16), c.n_nodes)
        self.gpu_rack = self.node_rack[self.gpu_node]
        self.gpu_partition = self.node_partition[self.gpu_node]
        self.gpu_uuids = [
            gpu_uuid(c.seed, self.node_names[n], int(i))
            for n, i in zip(self.gpu_node, self.gpu_index, strict=True)
        ]
        self.models: tuple[GpuModel, GpuModel] = (MODELS[c.train_model], MODELS[c.eval_model])
        pick = lambda attr: np.array(  # noqa: E731
            [getattr(m, attr) for m in self.models]
        )[self.gpu_partition]
        self.tdp_w = pick("tdp_w").astype(np.float64)
        self.memory_mib = pick("memory_mib").astype(np.float64)
        self.max_clock = pick("max_clock_mhz").astype(np.float64)
        self.idle_clock = pick("idle_clock_mhz").astype(np.float64)
        self.slowdown_c = pick("slowdown_c").astype(np.float64)
        lo = np.array([m.idle_w[0] for m in self.models])
        hi = np.array([m.idle_w[1] for m in self.models])
        u = rng.random(c.n_gpus)
        self.idle_w = lo[self.gpu_partition] + u * (hi - lo)[self.gpu_partition]
        # busy draw relative to TDP: some boards draw a few % above it
        self.power_factor = rng.normal(1.0, 0.035, c.n_gpus).clip(0.92, 1.09)
        # thermal resistance of each GPU's model (°C/W), as calibrated, and its own
        self.model_thermal_r = np.array(
            [m.thermal_c_per_w * c.thermal_scale for m in self.models])[self.gpu_partition]
        self.thermal_r = self.model_thermal_r * rng.normal(1.0, 0.05, c.n_gpus).clip(0.88, 1.12)
        self.hbm_offset_c = rng.uniform(*c.hbm_offset_c, c.n_gpus)
        self.energy0_j = rng.uniform(1e9, 5e10, c.n_gpus).round()
        # a few GPUs accumulate correctable (single-bit) ECC errors, errors per hour
        self.sbe_per_h = np.where(rng.random(c.n_gpus) < 0.01, rng.uniform(0.2, 3, c.n_gpus), 0)
        self.sbe0 = np.where(self.sbe_per_h > 0, rng.integers(0, 50, c.n_gpus), 0)

    def partition_nodes(self, part: int) -> np.ndarray:
        return np.flatnonzero(self.node_partition == part)

    def tables(self) -> dict[str, pa.Table]:
        """The topology as {"racks", "nodes", "gpus"} tables of the warehouse schema."""
        c = self.config
        racks = pa.table(
            {
                "rack": self.rack_names,
                "zone": [self.zone_names[z] for z in self.rack_zone],
                "row": self.rack_row.astype(np.int32),
                "x": self.rack_x,
                "y": self.rack_y.astype(np.float64),
            },
            schema=SCHEMAS["racks"],
        )
        nodes = pa.table(
            {
                "node": self.node_names,
                "rack": [self.rack_names[r] for r in self.node_rack],
                "partition": [PARTITIONS[p] for p in self.node_partition],
                "gpus": np.full(c.n_nodes, c.gpus_per_node, dtype=np.int32),
            },
            schema=SCHEMAS["nodes"],
        )
        gpus = pa.table(
            {
                "gpu_uuid": self.gpu_uuids,
                "node": [self.node_names[n] for n in self.gpu_node],
                "gpu_index": self.gpu_index,
                "model": [self.models[p].name for p in self.gpu_partition],
                "tdp_w": self.tdp_w,
                "memory_mib": self.memory_mib,
            },
            schema=SCHEMAS["gpus"],
        )
        return {"racks": racks, "nodes": nodes, "gpus": gpus}
