"""GPU telemetry of the simulated cluster: one row per GPU per tick, vectorised.

Tick ``k`` is at ``anchor + k * interval_s``. Every window is computed on its own: the
state of each GPU comes from the workload's run intervals, per-tick noise from a
counter-based generator seeded by (seed, tick), and the energy counter from the closed
form in :mod:`power`, so backfill and live mode emit identical rows for the same tick.
Units: percent 0-100, MiB, watts, joules, degrees C, MHz.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from warehouse.schema import SCHEMAS

from .power import PowerModel, limit_mw
from .stragglers import Stragglers, scaled
from .topology import Topology
from .workload import Workload

CELLS_PER_BLOCK = 400_000  # GPU-ticks computed at once (bounds memory)
SM_FACTOR = np.array([0.0, 0.85, 0.78, 0.6, 0.45])  # sm_active / util by job type code
# tensor-pipe activity / SM activity, and DRAM activity / util, by job type code: dense
# bf16 training keeps the tensor pipe busiest (~50 %, near its MFU), evaluation
# (decoding) is memory-bound, debug jobs barely touch the tensor cores
TENSOR_FACTOR = np.array([0.0, 0.62, 0.5, 0.3, 0.15])
DRAM_FACTOR = np.array([0.0, 0.35, 0.4, 0.6, 0.2])
MEM_UTIL_FACTOR = np.array([0.0, 0.45, 0.4, 0.35, 0.3])
NOISE_STREAM = 7


class Telemetry:
    """Computes ``samples`` rows for any range of ticks."""

    def __init__(self, topo: Topology, workload: Workload, power: PowerModel,
                 anchor_us: int, day_offset_s: float, stragglers: Stragglers | None = None):
        self.topo, self.w, self.power = topo, workload, power
        self.strag = stragglers
        c = topo.config
        self.c, self.dt = c, c.interval_s
        self.dt_us = int(round(c.interval_s * 1e6))
        self.anchor_us, self.day_offset_s = anchor_us, day_offset_s
        self.node_arr = pa.array(topo.node_names, pa.string())
        self.uuid_arr = pa.array(topo.gpu_uuids, pa.string())
        n = 0
        self.run_cols = {k: np.zeros(n) for k in ("code", "level", "mem", "start", "period")}

    # --- run attributes, kept as arrays indexed by run_id --------------------------
    def _runs(self) -> dict[str, np.ndarray]:
        runs = self.w.runs
        have = len(self.run_cols["code"])
        if have < len(runs):
            new = runs[have:]
            add = {
                "code": [r.job.jtype.code for r in new],
                "level": [r.job.level for r in new],
                "mem": [r.job.mem_frac for r in new],
                "start": [r.start_s for r in new],
                "period": [200.0 + (r.run_id * 37) % 400 for r in new],
            }
            for k, v in add.items():
                self.run_cols[k] = np.concatenate([self.run_cols[k], np.asarray(v, float)])
        return self.run_cols

    def entries(self) -> dict[str, np.ndarray]:
        """Every (run, GPU) interval as flat arrays with first/end ticks ``a``/``b``."""
        e = dict(self.w.allocs.view())
        e["a"] = np.ceil(e["start"] / self.dt).astype(np.int64)
        e["b"] = np.ceil(e["end"] / self.dt).astype(np.int64)
        e["level"] = self._runs()["level"][e["run"]]
        return e

    # --- windows -------------------------------------------------------------------
    def window(self, k0: int, k1: int) -> pa.Table:
        """Samples of ticks k0 <= k < k1 (the workload must be advanced past k1)."""
        k0 = max(0, k0)
        if k1 <= k0:
            return SCHEMAS["samples"].empty_table()
        ent = self.entries()
        step = max(1, CELLS_PER_BLOCK // self.c.n_gpus)
        parts = [self._block(k, min(k1, k + step), ent) for k in range(k0, k1, step)]
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _noise(self, ks: np.ndarray) -> np.ndarray:
        g = self.c.n_gpus
        out = np.empty((len(ks), 6, g), dtype=np.float32)
        for i, k in enumerate(ks):
            rng = np.random.default_rng([self.c.seed, NOISE_STREAM, int(k) + 1])
            out[i] = rng.standard_normal((6, g), dtype=np.float32)
        return out

    def _paint(self, k_first: int, rows: int, ent: dict) -> tuple[np.ndarray, np.ndarray]:
        """Which selected entry holds each GPU at each row (-1: idle), and the selection."""
        g = self.c.n_gpus
        sel = np.flatnonzero((ent["a"] < k_first + rows) & (ent["b"] > k_first))
        if len(sel) == 0:
            return np.full((rows, g), -1, dtype=np.int64), sel
        gpu = ent["gpu"][sel]
        a = np.clip(ent["a"][sel] - k_first, 0, rows)
        b = np.clip(ent["b"][sel] - k_first, 0, rows)
        w = np.arange(1, len(sel) + 1, dtype=np.float64)
        diff = np.bincount(a * g + gpu, weights=w, minlength=(rows + 1) * g)
        diff -= np.bincount(b * g + gpu, weights=w, minlength=(rows + 1) * g)
        held = np.rint(np.cumsum(diff.reshape(rows + 1, g)[:rows], axis=0)).astype(np.int64)
        return held - 1, sel

    def _xids(self, k_first: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """xid_last and the double-bit ECC count of each GPU at each row."""
        g = self.c.n_gpus
        xid = np.zeros((rows, g), dtype=np.int32)
        dbe = np.zeros((rows, g), dtype=np.int64)
        t_end = (k_first + rows) * self.dt
        t_first = k_first * self.dt
        for (ts, gpu, code, _), reset in sorted(zip(self.w.xids, self.w.xid_reset, strict=True)):
            if ts >= t_end or reset <= t_first:
                continue
            a = max(0, int(np.ceil(ts / self.dt)) - k_first)
            b = rows if reset == np.inf else min(rows, int(np.ceil(reset / self.dt)) - k_first)
            xid[a:b, gpu] = code
            if code == 48:
                dbe[a:b, gpu] += 1
        return xid, dbe

    def _block(self, k0: int, k1: int, ent: dict) -> pa.Table:
        """Samples of ticks ``k0 <= k < k1``: what the jobs do, the power and energy that
        follow, then the temperatures, clocks and errors (one row per GPU per tick)."""
        topo, pm = self.topo, self.power
        rows = k1 - k0 + 1  # row 0 is tick k0-1 (for the energy counter)
        ks = np.arange(k0 - 1, k1)
        t_s = ks * self.dt
        held, sel = self._paint(k0 - 1, rows, ent)
        busy = held >= 0
        job = self._job_state(busy, held, sel, ent, t_s)
        f = self._straggling(busy, held, sel, ent, t_s)
        inlet = pm.inlet_c(ks)[:, topo.gpu_rack]
        lim = limit_mw(topo.slowdown_c[None, :], inlet, topo.thermal_r[None, :])
        z = self._noise(ks)
        power_w, energy, hot = self._power(k0, busy, job, lim, z, ent, f)
        # drop row 0 from here on
        busy, hot, z, t_s, inlet, lim = busy[1:], hot[1:], z[1:], t_s[1:], inlet[1:], lim[1:]
        job = {k: v[1:] for k, v in job.items()}
        r = self._readings(k0, rows, busy, hot, job, z, t_s, inlet, lim, power_w)
        if f is not None:  # stragglers: slow clocks and their flags, peers waiting
            r["clock"] = r["clock"] * f["cf"][1:]
            r["sm"] = r["sm"] * f["smf"][1:]
            r["hot"], r["braked"] = r["hot"] | f["hot"][1:], r["braked"] | f["brake"][1:]
        return self._table(k0, k1, r, power_w, energy)

    def _straggling(self, busy, held, sel, ent: dict, t_s) -> dict | None:
        """The straggler factors of the window (see stragglers.py), None without any."""
        if self.strag is None or not len(sel):
            return None
        run_of = np.where(busy, ent["run"][sel][np.where(busy, held, 0)], -1)
        return self.strag.factors(self.w, t_s, np.arange(self.c.n_gpus), run_of)

    def _job_state(self, busy, held, sel, ent: dict, t_s) -> dict[str, np.ndarray]:
        """Per tick and GPU, of the run holding it: busy power (mW) and whether it may
        exceed TDP, workload code, level, memory share, seconds since start, period."""
        g, rows = self.c.n_gpus, len(t_s)
        if not len(sel):
            zeros = np.zeros((rows, g))
            return {"pb": np.zeros((rows, g), np.int64), "over": np.zeros((rows, g), bool),
                    "code": np.zeros((rows, g), np.int64), "level": zeros, "mem": zeros,
                    "since": zeros, "period": np.ones((rows, g)),
                    "run": np.full((rows, g), -1, np.int64)}
        e = np.where(busy, held, 0)
        runs = self._runs()
        run = ent["run"][sel]
        pb_e, over_e = self.power.busy_mw(ent["gpu"][sel], ent["level"][sel])
        pick = lambda arr: np.where(busy, arr[e], 0)  # noqa: E731
        return {"pb": pick(pb_e), "over": pick(over_e).astype(bool),
                "code": pick(runs["code"][run]).astype(np.int64),
                "level": pick(runs["level"][run]), "mem": pick(runs["mem"][run]),
                "since": t_s[:, None] - pick(runs["start"][run]),
                "period": np.where(busy, runs["period"][run][e], 1.0),
                "run": np.where(busy, run[e], -1)}

    def _power(self, k0: int, busy, job: dict, lim, z, ent: dict, f: dict | None = None):
        """``(power_w, energy_j, hot)``: power of ticks k0.. (W), the energy counter (J)
        and where the busy power exceeds the thermal limit (row 0 included)."""
        topo, pm, g = self.topo, self.power, self.c.n_gpus
        pb = job["pb"]
        drawn = np.minimum(pb, lim) if f is None else scaled(np.minimum(pb, lim), f["pf"])
        base = np.where(busy, drawn, pm.idle_mw[None, :])
        hot = busy & (pb > lim)
        sigma_mw = np.where(busy, self.c.power_noise * 1000.0 * topo.tdp_w[None, :], 800.0)
        u = np.rint(sigma_mw * np.clip(z[:, 0], -3, 3)).astype(np.int64)
        if self.c.comm_every_ticks > 0:
            u = u + self._comm_waits(k0, busy, job, base)
        power_w = (base[1:] + u[1:] - u[:-1]) / 1000.0
        s0 = pm.base_sum(k0, ent["gpu"], ent["level"], ent["a"], ent["b"])
        if self.strag is not None:
            s0 = s0 + self.strag.energy_correction(self.w, k0, self.dt, ent, pm)
        s = s0[None, :] + np.concatenate([np.zeros((1, g), np.int64), np.cumsum(base[1:-1], 0)])
        energy = topo.energy0_j[None, :] + (s + u[:-1]) * (self.dt / 1000.0)
        return power_w, energy, hot

    def _comm_waits(self, k0: int, busy, job: dict, base) -> np.ndarray:
        """The power dips of training runs waiting in collectives, as a term of the
        reading noise ``u`` (mW; the reading is ``base + u[k] - u[k-1]``, so the energy
        counter stays exact): a sawtooth rising by ``d`` per tick and falling once every
        ``comm_every_ticks`` ticks, so one reading in that many shows the waiting draw
        ``comm_w_per_tdp`` x TDP and the others ``base + d``; the mean stays ``base``.
        DCGM reads instantaneous power, and a GPU spinning in an all-reduce draws little
        while GPU_UTIL stays at 100 % (why Acme's median power is ~100 W, issue 16)."""
        c, ticks = self.c, np.arange(k0 - 1, k0 - 1 + len(base))
        train = busy & ((job["code"] == 1) | (job["code"] == 2))
        wait_mw = c.comm_w_per_tdp * 1000.0 * self.topo.tdp_w[None, :]
        d = np.maximum(base - wait_mw, 0.0) / (c.comm_every_ticks - 1)
        phase = (ticks[:, None] + job["run"] * 7) % c.comm_every_ticks
        return np.where(train, np.rint(d * phase), 0).astype(np.int64)

    def _readings(self, k0: int, rows: int, busy, hot, job: dict, z, t_s, inlet, lim,
                  power_w) -> dict[str, np.ndarray]:
        """Utilisation, memory, temperatures (°C), clocks (MHz), throttling and errors."""
        topo = self.topo
        code, pb = job["code"], job["pb"]
        util = self._util(code, job["level"], job["since"], job["period"], z)
        sm = np.clip(util * SM_FACTOR[code] * (1 + 0.03 * z[:, 2]), 0, 100)
        tensor = np.clip(sm * TENSOR_FACTOR[code] * (1 + 0.05 * z[:, 2]), 0, 100)
        dram = np.clip(util * DRAM_FACTOR[code] * (1 + 0.05 * z[:, 3]), 0, 100)
        mem_util = np.where(busy, np.clip(util * MEM_UTIL_FACTOR[code] + 2 * z[:, 3], 0, 100), 0)
        mem_used = np.where(busy, np.minimum(job["mem"] * topo.memory_mib
                                             * (1 + 0.004 * z[:, 3]), topo.memory_mib), 0.0)
        daily = 0.6 * np.sin(2 * np.pi * (t_s + self.day_offset_s) / 86400.0 - 2.0)
        daily = daily + self.w.confounders.ambient_c(t_s)  # warm afternoons (off by default)
        temp = inlet + daily[:, None] + topo.thermal_r * power_w + 0.25 * z[:, 4]
        mem_temp = temp + topo.hbm_offset_c * (0.6 + 0.004 * util) + 0.3 * z[:, 5]
        braked = busy & job["over"] & (power_w >= topo.tdp_w)
        ratio = np.where(hot, np.minimum(lim, pb) / np.maximum(pb, 1), 1.0)
        clock = np.where(busy, topo.max_clock * np.clip(1 - 1.6 * (1 - ratio), 0.5, 1.0)
                         * np.where(braked, 0.96, 1.0), topo.idle_clock)
        xid, dbe = self._xids(k0, rows - 1)
        sbe = topo.sbe0 + np.floor(topo.sbe_per_h * t_s[:, None] / 3600.0).astype(np.int64)
        return {"util": util, "mem_util": mem_util, "sm": sm, "mem_used": mem_used,
                "temp": temp, "mem_temp": mem_temp, "clock": clock, "hot": hot,
                "braked": braked, "sbe": sbe, "dbe": dbe, "xid": xid, "tensor": tensor,
                "dram": dram}

    def _table(self, k0: int, k1: int, r: dict, power_w, energy) -> pa.Table:
        """The readings as a samples table (SCHEMAS["samples"]), rounded as exporters do."""
        topo, c, g = self.topo, self.c, self.c.n_gpus
        ticks = k1 - k0
        n = ticks * g
        ts = self.anchor_us + np.rint(np.arange(k0, k1) * self.dt * 1e6).astype(np.int64)
        gpu_of_row = np.tile(np.arange(g), ticks)
        f32 = lambda x: np.asarray(x, dtype=np.float32).reshape(n)  # noqa: E731
        cols = [
            pa.array(np.repeat(ts, g), pa.timestamp("us")),
            self.node_arr.take(pa.array(topo.gpu_node[gpu_of_row])),
            pa.array(np.tile(topo.gpu_index, ticks), pa.int16()),
            self.uuid_arr.take(pa.array(gpu_of_row)),
            pa.array(np.full(n, c.interval_s, dtype=np.float32)),
            pa.array(f32(r["util"])),
            pa.array(f32(np.rint(r["mem_util"]))),
            pa.array(f32(np.round(r["sm"], 1))),
            pa.array(f32(np.rint(r["mem_used"]))),
            pa.array(f32(np.round(power_w, 3))),
            pa.array(energy.reshape(n)),
            pa.array(f32(np.rint(r["temp"]))),
            pa.array(f32(np.rint(r["mem_temp"]))),
            pa.array(f32(np.rint(r["clock"] / 15.0) * 15.0)),
            pa.array(r["hot"].reshape(n)),
            pa.array(r["braked"].reshape(n)),
            pa.array(r["sbe"].reshape(n)),
            pa.array(r["dbe"].reshape(n)),
            pa.array(r["xid"].reshape(n)),
            pa.array(f32(np.round(r["tensor"], 1))),
            pa.array(f32(np.round(r["dram"], 1))),
        ]
        return pa.Table.from_arrays(cols, schema=SCHEMAS["samples"])

    def _util(self, code, level, since, period, z) -> np.ndarray:
        """GPU utilisation (integer percent) by job type: pre-training near 100% with
        start-up and checkpoint dips, SFT steady, evaluation bursty, debug low; with
        ``util_near_full`` (DCGM's GPU_UTIL: the share of time a kernel runs, which a
        busy GPU keeps near 100 % whatever its intensity; Acme's median is 97-99 %)
        SFT and evaluation read near 100 % too."""
        ckpt = self.c.checkpoint_interval_h * 3600.0
        full = 100 - np.abs(1.5 * z[:, 1])
        pt = np.where(since < 300, 12 + 5 * z[:, 1],
                      full if self.c.util_near_full else 96 + 2.5 * z[:, 1])
        pt = np.where((since >= ckpt) & (np.mod(since, ckpt) < 90), 20 + 5 * z[:, 1], pt)
        if self.c.util_near_full:
            sft = ev = full - 2 * np.abs(z[:, 3])
        else:
            sft = level * 100 + 4 * z[:, 1]
            ev = level * 100 + 25 * np.sin(2 * np.pi * since / period) + 10 * z[:, 1]
        dbg = np.where(z[:, 2] > 0.5, 0.0, level * 100 + 12 * z[:, 1])
        util = np.select([code == 1, code == 2, code == 3, code == 4], [pt, sft, ev, dbg], 0.0)
        return np.rint(np.clip(util, 0, 100))
