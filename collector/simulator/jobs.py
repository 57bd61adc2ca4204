"""Jobs of an LLM cluster shaped like Acme's (NSDI'24): what is submitted and how runs end.

Four job types: many short evaluation jobs (1-8 GPUs, minutes to an hour), debug jobs
(1-8 GPUs, minutes), SFT jobs (8-64 GPUs on the demo, hours) and a few pre-training jobs
(a sixth to two thirds of the train partition, days) that hold most GPU time. A run's fate
is drawn when it starts: script and framework errors come early, infrastructure faults
arrive at a rate per node-day (so they hit the big, long runs), some runs are cancelled or
time out. All times are seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import failures as F
from .config import SimConfig

HOUR = 3600.0
DAY = 86400.0

USER_NAMES = (
    "alice bob chen dana emil fatima gao hiro ines jamal kai lena mohan nora oleg priya qiang"
    " rosa sven tara umar vera wei xena yusuf zoe arjun bea carlos dmitri elif farid grace"
    " hana ivan jun kofi luca mei nikhil"
).split()
TEAMS = ("llm-pretrain", "alignment", "evaluation", "multimodal", "research")
TEAM_OF_TYPE = {
    "pretrain": ("llm-pretrain",),
    "sft": ("alignment", "multimodal"),
    "eval": ("evaluation", "research", "alignment"),
    "debug": TEAMS,
}
BENCHES = "mmlu gsm8k humaneval arc hellaswag truthfulqa mbpp bbh ceval math".split()


@dataclass(frozen=True)
class JobType:
    """Static traits of a job type (probabilities are per run)."""

    name: str
    code: int  # telemetry state code, 1..4 (0 is idle)
    partition: int  # topology.TRAIN or topology.EVAL
    p_framework: float
    p_script: float  # first run only
    p_cancel: float
    p_timeout: float
    requeue: bool  # requeued after infrastructure and framework failures
    limit_s: float  # Slurm time limit


TYPES = {
    "pretrain": JobType("pretrain", 1, 0, 0.08, 0.10, 0.0, 0.0, True, 14 * DAY),
    "sft": JobType("sft", 2, 0, 0.12, 0.16, 0.03, 0.04, True, 24 * HOUR),
    "eval": JobType("eval", 3, 1, 0.15, 0.18, 0.05, 0.02, False, 2 * HOUR),
    "debug": JobType("debug", 4, 0, 0.20, 0.24, 0.10, 0.02, False, 1 * HOUR),
}
# Fitted to Acme's outcomes (NSDI'24: ~50-54 % of GPU jobs completed, 6-7.5 % cancelled,
# 40-43 % failed, failures ~73 % script errors, mostly early): script errors are the
# commonest end of a small job; pre-training campaigns are mostly stopped by their users
# (CANCELLED: 61-66 % of GPU time), framework errors are rarer than script errors.
REALISTIC_TYPES = {
    "pretrain": JobType("pretrain", 1, 0, 0.10, 0.03, 0.75, 0.0, True, 14 * DAY),
    "sft": JobType("sft", 2, 0, 0.12, 0.22, 0.10, 0.0, True, 24 * HOUR),
    "eval": JobType("eval", 3, 1, 0.12, 0.33, 0.10, 0.002, False, 2 * HOUR),
    "debug": JobType("debug", 4, 0, 0.14, 0.36, 0.10, 0.01, False, 1 * HOUR),
}
FATES = {"demo": TYPES, "realistic": REALISTIC_TYPES}  # SimConfig.fates -> job types


class Job:
    """One submitted job; ``runs`` holds its attempts in order."""

    __slots__ = (
        "seq", "job_id", "name", "user", "account", "jtype", "partition", "submit_s", "gpus",
        "nodes", "limit_s", "work_s", "remaining_s", "runs", "eligible_s", "level", "mem_frac",
        "done",
    )

    def __init__(self, **kw):
        self.runs: list[Run] = []
        self.done = False
        for k, v in kw.items():
            setattr(self, k, v)


class Run:
    """One attempt of a job on a fixed set of GPUs; its end is known when it starts."""

    __slots__ = (
        "run_id", "job", "index", "start_s", "end_s", "state", "exit_code", "signal", "reason",
        "failed_node", "category", "nodes", "gpus", "limit_end_s", "requeue", "done_s",
    )

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def pick(rng: np.random.Generator, values, probs):
    return values[int(rng.choice(len(values), p=probs))]


class JobFactory:
    """Draws job sizes, lengths, names and users for a cluster of a given size."""

    def __init__(self, config: SimConfig, train_nodes: int, eval_nodes: int):
        self.c = config
        g = config.gpus_per_node
        p = max(1, train_nodes)
        lo, hi = max(1, math.ceil(p / 8)), max(1, (2 * p) // 3)
        sizes = [2**k for k in range(0, 20) if lo <= 2**k <= hi] or [max(1, hi)]
        self.pretrain_nodes = sizes[-3:]
        self.pretrain_probs = np.array([0.45, 0.35, 0.2][: len(self.pretrain_nodes)])
        self.pretrain_probs /= self.pretrain_probs.sum()
        self.sft_nodes = [n for n in (1, 2, 4, 8) if n <= max(1, p // 4)]
        sp = np.array([0.3, 0.3, 0.25, 0.15][: len(self.sft_nodes)])
        self.sft_probs = sp / sp.sum()
        self.small_gpus = [n for n in (1, 2, 4, 8) if n <= g] or [g]
        names = USER_NAMES[: max(len(TEAMS), config.users)]
        self.team_users = {t: [u for i, u in enumerate(names) if i % len(TEAMS) == k]
                           for k, t in enumerate(TEAMS)}
        self.g = g
        self.counter = 0

    def draw(self, rng: np.random.Generator, jtype: str, nodes: int = 0) -> dict:
        """Size, length and identity of a new job of type ``jtype`` (pre-training: of
        ``nodes`` nodes if given)."""
        g = self.g
        if jtype == "pretrain":
            nodes = nodes or int(pick(rng, self.pretrain_nodes, self.pretrain_probs))
            work = rng.lognormal(math.log(self.c.pretrain_work_h * HOUR), 0.5)
            work = float(np.clip(work, 6 * HOUR, 5 * DAY))
            name = f"pt-{pick(rng, ['llama', 'moe', 'qwen', 'intern'], None)}-{nodes * g}g"
            gpus, level = nodes * g, rng.uniform(*self.c.pretrain_level)
            mem = rng.uniform(0.86, 0.96)
        elif jtype == "sft":
            nodes = int(pick(rng, self.sft_nodes, self.sft_probs))
            work = float(np.clip(rng.lognormal(math.log(3 * HOUR), 0.6), 0.5 * HOUR, 16 * HOUR))
            name = f"sft-{pick(rng, ['chat', 'code', 'math', 'vision', 'tool'], None)}"
            gpus, level, mem = nodes * g, rng.uniform(*self.c.sft_level), rng.uniform(0.6, 0.92)
        else:
            sizes = self.small_gpus
            probs = np.array([0.45, 0.2, 0.15, 0.2][: len(sizes)])
            gpus = int(pick(rng, sizes, probs / probs.sum()))
            nodes = 1
            if jtype == "eval":
                work = float(np.clip(rng.lognormal(math.log(12 * 60), 0.8), 60, 70 * 60))
                name = f"eval-{pick(rng, BENCHES, None)}-ckpt{int(rng.integers(1, 400)) * 500}"
                level, mem = rng.uniform(*self.c.eval_level), rng.uniform(0.25, 0.75)
            else:
                work = float(np.clip(rng.lognormal(math.log(8 * 60), 0.8), 60, 45 * 60))
                name = f"debug-{pick(rng, ['nccl', 'loader', 'kernel', 'ckpt', 'tp'], None)}"
                level, mem = rng.uniform(*self.c.debug_level), rng.uniform(0.05, 0.5)
        user = pick(rng, self.team_users[pick(rng, TEAM_OF_TYPE[jtype], None)] or ["root"], None)
        team = next(t for t, us in self.team_users.items() if user in us)
        return dict(name=name, user=user, account=team, gpus=gpus, nodes=nodes,
                    work_s=float(round(work)), level=float(level), mem_frac=float(mem))


def draw_fate(rng, c: SimConfig, job: Job, run: Run, hazard: np.ndarray, planned_s: float):
    """Decide how ``run`` ends: sets end_s, state, exit_code, signal, reason, failed_node,
    category and requeue on it, and returns (reason, gpu) of a fault that leaves XIDs, a
    lost node or a repair behind (the faulty GPU's global index), else None."""
    jt: JobType = job.jtype
    cands: list[tuple[float, str, F.Reason | None]] = []
    limit = job.limit_s
    if rng.random() < jt.p_timeout and jt.name != "pretrain":
        planned_s = limit + 60.0  # a hung job: runs into its time limit
    cands.append((min(planned_s, limit), "COMPLETED" if planned_s <= limit else "TIMEOUT", None))
    node_days = float(hazard[run.nodes].sum()) / 1000.0 / DAY  # per 1,000 node-days
    rate = c.infra_failures_per_1000_node_days * node_days
    if rate > 0:
        reasons = F.hardware_reasons(c, job.partition)
        cands.append((rng.exponential(1 / rate), "FAIL", pick(rng, reasons, F.weights(reasons))))
    if c.network_per_1000_node_days > 0 and len(run.nodes) > 1:
        cands.append((rng.exponential(1 / (c.network_per_1000_node_days * node_days)),
                      "FAIL", pick(rng, F.COLLECTIVE, F.weights(F.COLLECTIVE))))
    if c.startup_infra_p > 0 and rng.random() < c.startup_infra_p:
        t = min(rng.lognormal(math.log(120), 0.8), planned_s * rng.uniform(0.05, 0.6))
        cands.append((t, "FAIL", pick(rng, F.STARTUP, F.weights(F.STARTUP))))
    if rng.random() < jt.p_framework:
        t = min(rng.lognormal(math.log(6 * 60), 1.0), planned_s * rng.uniform(0.1, 0.9))
        if jt.requeue and c.late_framework:  # loss spikes, OOM on a long batch: any time
            t = planned_s * rng.uniform(0.02, 1.0)
        cands.append((t, "FAIL", pick(rng, F.FRAMEWORK_REASONS, F.weights(F.FRAMEWORK_REASONS))))
    if run.index == 0 and rng.random() < jt.p_script:
        t = min(rng.lognormal(math.log(90), 0.8), planned_s * rng.uniform(0.05, 0.5))
        cands.append((t, "FAIL", pick(rng, F.SCRIPT_REASONS, F.weights(F.SCRIPT_REASONS))))
    if rng.random() < jt.p_cancel:
        cands.append((rng.uniform(0, planned_s), "CANCELLED", None))
    dur, kind, reason = min(cands, key=lambda x: x[0])
    dur = max(10.0, float(round(dur)))
    run.end_s = run.start_s + dur
    run.exit_code, run.signal, run.reason, run.failed_node, run.category = 0, 0, None, -1, None
    run.requeue = False
    if kind != "FAIL":
        run.state = kind
        if kind in ("CANCELLED", "TIMEOUT"):
            run.signal = 15
        return None
    node_w = hazard[run.nodes]
    fnode = int(run.nodes[int(rng.choice(len(run.nodes), p=node_w / node_w.sum()))])
    on_node = run.gpus[run.gpus // c.gpus_per_node == fnode]
    gpu = int(on_node[int(rng.integers(len(on_node)))])
    run.category = reason.category
    run.failed_node = fnode if reason.category == F.INFRA else -1
    run.requeue = (jt.requeue and reason.category != F.SCRIPT
                   and len(job.runs) <= c.max_restarts)
    run.state = "NODE_FAIL" if reason.node_fail else ("REQUEUED" if run.requeue else "FAILED")
    run.exit_code = 0 if reason.node_fail else 1
    run.reason = reason  # formatted by the caller, which knows the names
    return (reason, gpu) if reason.xids or reason.repair or reason.node_fail else None
