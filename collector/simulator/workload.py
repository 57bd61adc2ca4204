"""The workload as a discrete-event simulation, generated lazily forward in time.

Jobs arrive as Poisson processes (evaluation and debug jobs follow a daily rhythm), wait
in a per-partition FIFO queue and start under a backfill scheduler at GPU granularity;
multi-node jobs take whole nodes. Events at one instant are handled together and in a
fixed order, so the history is the same however far and in how many steps it is advanced.
Times are integer seconds since the anchor.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from .config import SimConfig
from .confounders import Confounders
from .incidents import Incidents
from .jobs import FATES, HOUR, Job, JobFactory, Run, draw_fate
from .topology import EVAL, TRAIN, Topology

END, REPAIR, ELIGIBLE, ARRIVAL, DRAIN, BURST = 0, 1, 2, 3, 4, 5
BF_MAX_JOBS = 100  # queued jobs a scheduling pass looks at (Slurm's bf_max_job_test)
JOB_ID_BASE = 100000


class AllocStore:
    """Growing flat arrays, one entry per (run, GPU): gpu, run_id, start_s, end_s."""

    def __init__(self):
        self.n = 0
        self.cols = {k: np.zeros(1024, np.int64) for k in ("gpu", "run", "start", "end")}

    def add(self, gpus: np.ndarray, run_id: int, start: float, end: float) -> None:
        m = len(gpus)
        if self.n + m > len(self.cols["gpu"]):
            size = max(2 * len(self.cols["gpu"]), self.n + m)
            for k, v in self.cols.items():
                self.cols[k] = np.resize(v, size)
        s = slice(self.n, self.n + m)
        self.cols["gpu"][s], self.cols["run"][s] = gpus, run_id
        self.cols["start"][s], self.cols["end"][s] = start, end
        self.n += m

    def view(self) -> dict[str, np.ndarray]:
        return {k: v[: self.n] for k, v in self.cols.items()}


class Workload:
    """Jobs, runs, allocations, XIDs and node repairs, simulated up to ``self.now``."""

    def __init__(self, config: SimConfig, topo: Topology, incidents: Incidents,
                 day_offset_s: float):
        c = self.c = config
        self.topo, self.inc = topo, incidents
        self.day_offset_s = day_offset_s  # seconds past UTC midnight at the anchor
        self.rng = np.random.default_rng([c.seed, 303])
        self.gpn = c.gpus_per_node
        self.free = np.ones((c.n_nodes, self.gpn), dtype=bool)
        self.free_count = np.full(c.n_nodes, self.gpn)
        self.up = np.ones(c.n_nodes, dtype=bool)  # schedulable (not drained or in repair)
        self.down_until = np.zeros(c.n_nodes)
        # latest end of the runs on a node: the scheduler's estimate of when it is free
        # (the simulator's runs end as their users expected, so it uses the real end)
        self.busy_until = np.zeros(c.n_nodes)
        self.node_runs: list[dict[int, float]] = [{} for _ in range(c.n_nodes)]
        self.part_nodes = [topo.partition_nodes(TRAIN), topo.partition_nodes(EVAL)]
        self.queue: list[list[Job]] = [[], []]
        self.jobs: list[Job] = []
        self.runs: list[Run] = []
        self.allocs = AllocStore()
        self.xids: list[tuple] = []  # (ts_s, gpu, code, run_id); reset in self.xid_reset
        self.xid_reset: list[float] = []  # seconds when the XID gauge clears (inf: unknown)
        self.repairs: list[tuple[int, float, float]] = []  # (node, down_s, up_s)
        self.lost: list[tuple[float, int]] = []  # (ts_s, node): node stopped responding
        self.factory = JobFactory(c, len(self.part_nodes[TRAIN]), len(self.part_nodes[EVAL]))
        self.repair_after: dict[int, int] = {}  # run_id -> node repaired after the run
        self.run_xids: dict[int, list[int]] = {}  # run_id -> indices into self.xids
        self.heap: list[tuple] = []
        self.order = 0
        self.now = 0.0
        self.rates = self._rates()
        self._warm_start()
        for jt in self.rates:
            self._next_arrival(jt, 0.0)
        self.confounders = Confounders(c, c.racks, day_offset_s)
        for cf in self.confounders.items:  # (none unless config.confounders)
            if cf.kind == "rack_drain":
                nodes = np.flatnonzero(topo.node_rack == cf.rack)
                self._push(cf.start_s, DRAIN, (tuple(int(n) for n in nodes), cf.end_s))
            elif cf.kind == "load_burst":
                self._push(cf.start_s, BURST, cf.magnitude)

    # --- arrivals -----------------------------------------------------------------
    def _rates(self) -> dict[str, float]:
        """Poisson arrival rate per job type (jobs/s) meeting the configured loads."""
        c = self.c
        rng = np.random.default_rng([c.seed, 404])
        cap = [len(p) * self.gpn for p in self.part_nodes]
        want = {"sft": (c.sft_load, TRAIN),
                "eval": (c.eval_load, EVAL), "debug": (c.debug_load, TRAIN)}
        rates = {}
        for jt, (load, part) in want.items():
            if cap[part] == 0 or load <= 0:
                continue
            mean = np.mean([(d := self.factory.draw(rng, jt))["gpus"] * d["work_s"]
                            for _ in range(400)])
            rates[jt] = load * cap[part] / mean
        return rates

    def _diurnal(self, t: float) -> float:
        """Relative submission rate of interactive jobs at time t (peak 06:00 UTC)."""
        hour = ((t + self.day_offset_s) / HOUR) % 24
        return 1.0 + 0.4 * math.cos(2 * math.pi * (hour - 6) / 24)

    def _next_arrival(self, jt: str, t: float) -> None:
        rate = self.rates[jt]
        bursty = jt in ("eval", "debug")
        while True:
            t += self.rng.exponential(1.0 / (rate * (1.4 if bursty else 1.0)))
            if not bursty or self.rng.random() * 1.4 < self._diurnal(t):
                break
        self._push(float(math.ceil(t)), ARRIVAL, jt)

    def _warm_start(self) -> None:
        """Pre-training campaigns and SFT jobs already queued at the anchor.

        Pre-training is a closed loop: each campaign (a fixed node count) submits its next
        job a little after the previous one ends, so those few big jobs steadily hold
        about ``pretrain_load`` of the train partition."""
        cap = len(self.part_nodes[TRAIN]) * self.gpn
        held, tries = 0, 0
        while cap and self.c.pretrain_load > 0 and held < 0.85 * self.c.pretrain_load * cap:
            nodes = int(self.rng.choice(self.factory.pretrain_nodes))
            tries += 1
            if held + nodes * self.gpn > 1.25 * self.c.pretrain_load * cap and tries < 50:
                continue
            self._submit("pretrain", 0.0, nodes, 0.5)
            held += nodes * self.gpn
        held = 0
        while "sft" in self.rates and held < 0.8 * self.c.sft_load * cap:
            held += self._submit("sft", 0.0, 0, 0.5).gpus

    def _submit(self, jt: str, t: float, nodes: int = 0, done_frac: float = 0.0,
                rng: np.random.Generator | None = None) -> Job:
        """A new job of type ``jt`` at ``t`` (``done_frac``: up to this share of its work
        was done before the anchor, for jobs of the warm start)."""
        spec = FATES[self.c.fates][jt]
        d = self.factory.draw(rng or self.rng, jt, nodes)
        if done_frac:
            d["work_s"] = float(round(d["work_s"] * (1 - self.rng.uniform(0, done_frac))))
        seq = len(self.jobs)
        part = spec.partition if len(self.part_nodes[spec.partition]) else 1 - spec.partition
        job = Job(seq=seq, job_id=str(JOB_ID_BASE + seq), jtype=spec, partition=part,
                  submit_s=t, limit_s=spec.limit_s, remaining_s=d["work_s"], eligible_s=t, **d)
        self.jobs.append(job)
        self.queue[part].append(job)  # arrivals come in time order: the tail is right
        return job

    # --- the event loop -----------------------------------------------------------
    def _push(self, t: float, kind: int, payload) -> None:
        self.order += 1
        heapq.heappush(self.heap, (t, kind, self.order, payload))

    def advance(self, t: float) -> None:
        """Simulate every event strictly before ``t`` seconds."""
        while self.heap and self.heap[0][0] < t:
            now = self.heap[0][0]
            dirty = set()
            while self.heap and self.heap[0][0] == now:
                _, kind, _, payload = heapq.heappop(self.heap)
                if kind == END:
                    dirty.add(self._end_run(payload, now))
                elif kind == REPAIR:
                    node = payload
                    if now >= self.down_until[node]:
                        self.up[node] = True
                        dirty.add(int(self.topo.node_partition[node]))
                elif kind == ELIGIBLE:
                    dirty.add(payload)
                elif kind == DRAIN:
                    dirty |= self._drain(*payload)
                elif kind == BURST:
                    dirty |= self._burst(now, payload)
                elif isinstance(payload, tuple):  # the next job of a campaign
                    dirty.add(self._submit(payload[0], now, payload[1]).partition)
                else:
                    dirty.add(self._submit(payload, now).partition)
                    self._next_arrival(payload, now)
            self.now = now
            for part in sorted(dirty):
                self._schedule(part, now)
        self.now = max(self.now, t)

    def _drain(self, nodes: tuple[int, ...], until: float) -> set[int]:
        """Nothing new starts on ``nodes`` until ``until`` (maintenance; confounders.py)."""
        for node in nodes:
            self.up[node] = False
            self.down_until[node] = max(self.down_until[node], until)
            self._push(until, REPAIR, node)
        return set()

    def _burst(self, now: float, share: float) -> set[int]:
        """SFT and evaluation jobs asking for ``share`` of each partition's idle GPUs."""
        rng = self.confounders.burst_rng
        for part, jt in ((TRAIN, "sft"), (EVAL, "eval")):
            idle = int(self.free_count[self.part_nodes[part]].sum())
            asked = 0
            while idle and asked < share * idle:
                asked += self._submit(jt, now, rng=rng).gpus
        return {TRAIN, EVAL}

    # --- scheduling ---------------------------------------------------------------
    def _fit(self, job: Job, avoid: np.ndarray | None = None):
        """Nodes and global GPU indices for ``job`` now (never on nodes in ``avoid``, a
        boolean mask over all nodes), or None if it does not fit."""
        nodes = self.part_nodes[job.partition]
        ok = self.up[nodes] if avoid is None else self.up[nodes] & ~avoid[nodes]
        if job.nodes > 1 or job.gpus == self.gpn:
            cand = nodes[ok & (self.free_count[nodes] == self.gpn)]
            if len(cand) < job.nodes:
                return None
            chosen = self._along_tree(cand, job.nodes)
            gpus = (chosen[:, None] * self.gpn + np.arange(self.gpn)).ravel()
            return chosen, gpus
        fc = self.free_count[nodes]
        ok &= fc >= job.gpus
        if not ok.any():
            return None
        cand = nodes[ok]
        node = int(cand[np.argmin(fc[ok])])  # best fit keeps whole nodes free
        idx = np.flatnonzero(self.free[node])[: job.gpus]
        return np.array([node]), node * self.gpn + idx

    def _along_tree(self, cand: np.ndarray, n: int) -> np.ndarray:
        """``n`` of the free nodes ``cand`` placed along the network tree, as Slurm's
        topology/tree plugin does on a best-effort basis: within one rack if one has
        ``n`` free (the fullest such rack, best fit), else within one zone (the fullest
        that fits), taking racks with the most free nodes first; else over the zones
        with the most free nodes. Fragmentation follows from what is free, not chance
        (issue 15)."""
        rack = self.topo.node_rack[cand]
        racks, per_rack = np.unique(rack, return_counts=True)
        fits = per_rack >= n
        if fits.any():
            best = racks[fits][np.argmin(per_rack[fits])]
            return cand[rack == best][:n]
        zone = self.topo.rack_zone[rack]
        zones, per_zone = np.unique(zone, return_counts=True)
        fits = per_zone >= n
        if fits.any():
            keep = zone == zones[fits][np.argmin(per_zone[fits])]
            cand, rack, zone = cand[keep], rack[keep], zone[keep]
            racks, per_rack = np.unique(rack, return_counts=True)
        rack_free = per_rack[np.searchsorted(racks, rack)]
        zones, per_zone = np.unique(zone, return_counts=True)
        zone_free = per_zone[np.searchsorted(zones, zone)]
        order = np.lexsort((cand, rack, -rack_free, zone, -zone_free))
        return cand[order][:n]

    def _reserve(self, job: Job, now: float) -> tuple[float, np.ndarray]:
        """The blocked head job's reservation: its earliest start judging by the end of
        the runs in its way, and the nodes it will take then (a mask over all nodes)."""
        nodes = self.part_nodes[job.partition]
        nodes = nodes[self.up[nodes]]
        mask = np.zeros(self.c.n_nodes, dtype=bool)
        if len(nodes) < job.nodes:
            return math.inf, mask
        bu = np.maximum(self.busy_until[nodes], now)
        order = np.argsort(bu, kind="stable")[: job.nodes]
        mask[nodes[order]] = True
        return max(float(bu[order[-1]]), job.eligible_s), mask

    def _schedule(self, part: int, now: float) -> None:
        """FIFO with EASY backfill: once a job is blocked it holds a reservation, and a
        later job may start only on other nodes or if its time limit ends before it."""
        queue = self.queue[part]
        if not queue:
            return
        shadow, reserved, keep, started = None, None, [], 0
        pn = self.part_nodes[part]
        free_gpus = int(self.free_count[pn][self.up[pn]].sum())
        for i, job in enumerate(queue):
            if i >= BF_MAX_JOBS or free_gpus == 0:
                keep.extend(queue[i:])
                break
            fit = None
            if job.eligible_s <= now and job.gpus <= free_gpus:
                if shadow is None:
                    fit = self._fit(job)
                else:
                    fit = self._fit(job, None if now + job.limit_s <= shadow else reserved)
            if fit is not None:
                self._start_run(job, fit, now)
                free_gpus -= job.gpus
                started += 1
                continue
            if shadow is None:
                shadow, reserved = self._reserve(job, now)
            keep.append(job)
        if started:
            self.queue[part] = keep

    def _start_run(self, job: Job, fit, now: float) -> None:
        nodes, gpus = fit
        run = Run(run_id=len(self.runs), job=job, index=len(job.runs), start_s=now,
                  nodes=nodes, gpus=gpus, limit_end_s=now + job.limit_s,
                  done_s=job.work_s - job.remaining_s)
        job.runs.append(run)
        self.runs.append(run)
        planned = job.remaining_s if job.jtype.requeue else job.work_s
        fault = draw_fate(self.rng, self.c, job, run, self.inc.node_hazard, planned)
        names = self.topo.node_names
        if run.reason is not None:
            r, gi = run.reason, (fault[1] if fault else int(gpus[0]))
            run.reason = r.log.format(node=names[run.failed_node if run.failed_node >= 0
                                                 else int(nodes[0])],
                                      gpu=int(gi % self.gpn))
        if fault:
            self._add_xids(run, *fault)
            if fault[0].repair:
                self.repair_after[run.run_id] = run.failed_node
        self.free[gpus // self.gpn, gpus % self.gpn] = False
        for n in nodes:
            self.free_count[n] -= int((gpus // self.gpn == n).sum())
            self.node_runs[n][run.run_id] = run.end_s
            self.busy_until[n] = max(self.busy_until[n], run.end_s)
        self.allocs.add(gpus, run.run_id, run.start_s, run.end_s)
        self._push(run.end_s, END, run)

    def _add_xids(self, run: Run, reason, gpu: int) -> None:
        """The driver's XIDs for a GPU fault, logged a little before the run dies, and the
        lost node of a fault that takes the node down."""
        node = gpu // self.gpn
        if not reason.xids:  # a host or network cause: no XID, maybe a lost node
            if reason.node_fail:
                self.lost.append((run.end_s, node))
            return
        ts = float(max(run.start_s + 1, run.end_s - round(self.rng.uniform(20, 180))))
        hold = math.inf if reason.repair else ts + self.c.xid_hold_h * HOUR
        hits = [(ts, gpu, reason.xids[0])]
        hits += [(ts + 1 + i, gpu, code) for i, code in enumerate(reason.xids[1:])]
        if reason.xids[0] == 74:  # an NVLink fault shows on both ends of the link
            peers = run.gpus[(run.gpus // self.gpn == node) & (run.gpus != gpu)]
            if len(peers):
                hits.append((ts, int(peers[self.rng.integers(len(peers))]), 74))
        idx = self.run_xids.setdefault(run.run_id, [])
        for t, g, code in hits:
            idx.append(len(self.xids))
            self.xids.append((t, int(g), int(code), run.run_id))
            self.xid_reset.append(hold)
        if reason.node_fail:
            self.lost.append((run.end_s, node))

    def _end_run(self, run: Run, now: float) -> int:
        gpus, job, gpn = run.gpus, run.job, self.gpn
        self.free[gpus // gpn, gpus % gpn] = True
        for n in run.nodes:
            self.free_count[n] += int((gpus // gpn == n).sum())
            runs_n = self.node_runs[n]
            del runs_n[run.run_id]
            self.busy_until[n] = max(runs_n.values(), default=0.0)
        node = self.repair_after.pop(run.run_id, None)
        if node is not None:
            others = list(self.node_runs[node].values())
            until = max([now, *others]) + self.c.node_repair_h * HOUR
            self.down_until[node] = max(self.down_until[node], until)
            self.up[node] = False
            self.repairs.append((node, now, until))
            self._push(until, REPAIR, node)
            for i in self.run_xids.get(run.run_id, ()):
                self.xid_reset[i] = until
        if run.requeue:
            if job.jtype.name in ("pretrain", "sft"):
                ckpt = self.c.checkpoint_interval_h * HOUR
                saved = math.floor((now - run.start_s) / ckpt) * ckpt
                job.remaining_s = max(60.0, job.remaining_s - saved)
            job.eligible_s = now + round(self.c.restart_overhead_min * 60)
            bisect.insort(self.queue[job.partition], job, key=lambda j: (j.submit_s, j.seq))
            self._push(job.eligible_s, ELIGIBLE, job.partition)
        else:
            job.done = True
            if job.jtype.name == "pretrain":
                gap = float(round(self.rng.uniform(0.1, 1.5) * HOUR))
                self._push(now + gap, ARRIVAL, ("pretrain", job.nodes))
        return job.partition
