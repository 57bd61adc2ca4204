"""Job energy from the GPUs' energy counters against the integral of sampled power (issue 21).

    python bench/energy.py [--minutes 90] [--interval 15] [--seed 1]

No recorded time series of a real GPU is in the repository (tests/fixtures/nvml holds
single NVML snapshots), so the trace is built from what those recordings and the real
H100 run of docs/collectors.md measured: an H100 idles at 70.6 W
(h100_real_idle.json) and sits at its 700 W limit under bf16 matrix products
(698.1 W, h100_real_load.json). Per job, a training-like load alternates compute
(~698 W) with communication and data-loading stalls (~250-400 W) of a few seconds,
with ramps; the true power is known at 10 ms, so the GPU's energy counter (NVML's
total energy, mJ) is the exact integral: the ground truth. gpulens samples it every
``--interval`` seconds as NVML does: ``power_w`` is a ~100 ms average at the sample
time, ``energy_j`` the counter. Both go through the warehouse (ingest, rollups), and each
job's GPU energy is read with ``warehouse.queries.energy.job_energy`` (the counter deltas
of the minute tier) and, for comparison, as the integral of the sampled power (what the
minute tier computed before issue 21). Prints per job both against the counter, and
the same jobs read from the 1-hour tier alone (``resolution="hour"``: the counter's
energy of each GPU-hour shared by the allocation's seconds, what a job's energy is once
the minute tier is gone: "counter, hourly-scaled").

Then the simulator's ground truth: ``--sim-hours`` of a simulated rack (collector/
simulator: the energy counter is the exact integral of the power it reports), each whole
run's GPU energy (runs of at least 30 min) against its counter over its allocation
(interpolated at the allocation's ends), from the minute tier and from the hour tier.
Ends with one line per check: measured / target / met (target: within 2 % of the
counter, issue 21); exit 1 if one is not met.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # ahead of bench/

from bench.common import print_table  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.analytics import Options  # noqa: E402
from warehouse.queries import energy as qe  # noqa: E402
from warehouse.queries import energy_method as qm  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "nvml"
T0 = datetime(2026, 11, 22, 12, 0)
DT = 0.01  # s, resolution of the true power


def _recorded_w(name: str) -> float:
    doc = json.loads((FIXTURES / name).read_text())
    return doc["devices"][0]["nvmlDeviceGetPowerUsage"] / 1000.0


def true_power(seconds: int, rng: np.random.Generator, idle_w: float, load_w: float):
    """Power (W) every DT s: idle, then steps of compute at ``load_w`` and stalls."""
    n = int(seconds / DT)
    p = np.full(n, idle_w)
    i = int(60 / DT)  # a minute idle before the job's work starts
    while i < n - int(60 / DT):
        busy = int(rng.uniform(1.5, 8.0) / DT)
        stall = int(rng.uniform(0.3, 4.0) / DT)
        p[i:i + busy] = load_w - rng.uniform(0, 3)
        p[i + busy:i + busy + stall] = rng.uniform(250, 400)
        i += busy + stall
    ramp = int(0.5 / DT)  # the GPU's power follows its load over ~0.5 s
    kernel = np.ones(ramp) / ramp
    return np.convolve(p, kernel, mode="same")


def samples(power: np.ndarray, interval_s: float, node: str, gpu: int) -> pd.DataFrame:
    """What NVML reports every ``interval_s``: a 100 ms mean power and the counter."""
    energy = np.concatenate([[0.0], np.cumsum(power) * DT])  # J at each DT boundary
    idx = np.arange(int(interval_s / DT), len(power), int(interval_s / DT))
    window = int(0.1 / DT)
    pw = np.array([power[max(0, k - window):k].mean() for k in idx])
    ts = [T0 + timedelta(seconds=k * DT) for k in idx]
    return pd.DataFrame({"ts": ts, "node": node, "gpu_index": gpu,
                         "gpu_uuid": f"GPU-{node}-{gpu}", "power_w": pw,
                         "energy_j": 47_346.135 + energy[idx], "interval_s": interval_s})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=90, help="minutes of each GPU's trace")
    ap.add_argument("--interval", type=float, default=15.0, help="sampling interval, s")
    ap.add_argument("--jobs", type=int, default=4, help="jobs, one GPU each")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sim-hours", type=float, default=12.0,
                    help="hours of the simulated rack (0: skip the simulator)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    idle_w, load_w = _recorded_w("h100_real_idle.json"), _recorded_w("h100_real_load.json")
    secs = args.minutes * 60
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(str(Path(tmp) / "energy.duckdb"))
        truth, frames, jobs, runs, allocs = {}, [], [], [], []
        for j in range(args.jobs):
            power = true_power(secs, rng, idle_w, load_w)
            s = samples(power, args.interval, "h100-0", j)
            frames.append(s)
            # the job holds the GPU from its first to its last whole sample after 0:10
            start = T0 + timedelta(minutes=10)
            end = T0 + timedelta(seconds=secs - 600)
            lo, hi = ((start - T0).total_seconds(), (end - T0).total_seconds())
            truth[f"J{j}"] = power[int(lo / DT):int(hi / DT)].sum() * DT / 3.6e6
            inside = s[(s.ts > start) & (s.ts <= end)]
            jobs.append({"job_id": f"J{j}", "name": f"bench-{j}", "user_name": "bench",
                         "partition": "h100", "gpus": 1, "state": "COMPLETED",
                         "submit_ts": start, "start_ts": start, "end_ts": end})
            runs.append({"job_id": f"J{j}", "run_index": 0, "start_ts": start,
                         "end_ts": end, "state": "COMPLETED"})
            allocs.append({"job_id": f"J{j}", "run_index": 0, "node": "h100-0",
                           "gpu_index": j, "start_ts": start, "end_ts": end})
            truth[f"J{j}"] = (truth[f"J{j}"],
                              (inside.power_w * inside.interval_s).sum() / 3.6e6)
        wh.ingest("samples", pd.concat(frames, ignore_index=True)).result()
        for kind, rows in (("jobs", jobs), ("runs", runs), ("allocations", allocs)):
            wh.ingest(kind, pd.DataFrame(rows)).result()
        wh.rollup().result()
        opts = Options(node_overhead_w=0.0, pue=1.0)
        got = qe.job_energy(wh.reader(), start=T0, end=T0 + timedelta(seconds=secs),
                            opts=opts, resolution="minute").set_index("job_id")
        hourly = qe.job_energy(wh.reader(), start=T0, end=T0 + timedelta(seconds=secs),
                               opts=opts, resolution="hour").set_index("job_id")
        wh.close()
    rows, worst = [], {"counter": 0.0, "power": 0.0, "hourly": 0.0}
    for job, (counter_kwh, power_kwh) in truth.items():
        ours = float(got.loc[job, "gpu_kwh"])
        e_ours, e_pow = ours / counter_kwh - 1, power_kwh / counter_kwh - 1
        e_hour = float(hourly.loc[job, "gpu_kwh"]) / counter_kwh - 1
        worst = {"counter": max(worst["counter"], abs(e_ours)),
                 "power": max(worst["power"], abs(e_pow)),
                 "hourly": max(worst["hourly"], abs(e_hour))}
        rows.append((job, f"{counter_kwh * 1000:.1f}", f"{ours * 1000:.1f}",
                     f"{100 * e_ours:+.2f} %", f"{100 * e_hour:+.2f} %",
                     f"{power_kwh * 1000:.1f}", f"{100 * e_pow:+.2f} %"))
    print(f"H100 trace from the recorded fixtures: idle {idle_w:.1f} W, load {load_w:.1f} W; "
          f"{args.jobs} jobs x {args.minutes - 20} min, sampled every {args.interval:g} s")
    print_table(["job", "counter Wh", "job_energy Wh", "vs counter", "hourly-scaled vs counter",
                 "power integral Wh", "vs counter"], rows)
    print(f"worst: job_energy (counter deltas) {100 * worst['counter']:.2f} %, "
          f"power integral {100 * worst['power']:.2f} % (target: within 2 %)")
    checks = [("H100 fixture trace, energy counter (minute tier)", worst["counter"])]
    if timedelta(minutes=args.minutes - 20) >= MIN_RUN:  # shorter jobs: see MIN_RUN
        checks.append(("H100 fixture trace, counter hourly-scaled (hour tier)",
                       worst["hourly"]))
    if args.sim_hours > 0:
        sim = simulator_truth(args.sim_hours, args.seed)
        checks += [("simulator ground truth, energy counter (minute tier)", sim["minute"]),
                   ("simulator ground truth, counter hourly-scaled (hour tier)", sim["hour"])]
    print()
    print_table(["check (worst run)", "measured", "target", "met"],
                [(name, f"{100 * err:.2f} %", f"{100 * TARGET:.0f} %",
                  "yes" if err <= TARGET else "NO") for name, err in checks])
    return 0 if all(err <= TARGET for _, err in checks) else 1  # NaN (no run): not met


TARGET = 0.02  # within 2 % of the counter (issue 21)
#: Runs held to the target: whole runs (the simulator's: started and ended inside the
#: simulated window) holding their GPUs at least this long. The minute tier splits a
#: minute by overlap, so each end of a run can be off by up to a minute of the difference
#: between its power and the GPU's before or after it (a few-minute run: up to 10 %); the
#: hour tier splits an hour by overlap (a 5-minute job: 8 % on the H100 trace).
MIN_RUN = timedelta(minutes=30)


def counter_truth(samples: pd.DataFrame, allocs: pd.DataFrame) -> pd.Series:
    """kWh per (job_id, run_index): each allocation's GPU energy counter interpolated at
    its ends ``s`` and ``e`` (``samples``: raw ts, node, gpu_index, energy_j in J)."""
    out: dict[tuple[str, int], float] = {}
    for (node, gpu), a in allocs.groupby(["node", "gpu_index"]):
        s = samples[(samples.node == node) & (samples.gpu_index == gpu)].sort_values("ts")
        x = s.ts.to_numpy("datetime64[us]").astype(np.int64)
        for r in a.itertuples():
            lo, hi = (np.datetime64(t, "us").astype(np.int64) for t in (r.s, r.e))
            j = np.interp(hi, x, s.energy_j) - np.interp(lo, x, s.energy_j)
            key = (r.job_id, int(r.run_index))
            out[key] = out.get(key, 0.0) + j / 3.6e6
    return pd.Series(out, dtype=float)


def simulator_truth(hours: float, seed: int) -> dict[str, float]:
    """Worst relative error of run_energy (minute and hour tier) against the simulator's
    counter over each whole run of at least :data:`MIN_RUN`, over ``hours`` of one
    simulated rack."""
    from collector.simulator import Cluster, SimConfig

    start = datetime(2026, 11, 16)
    end = start + timedelta(hours=hours)
    lo, hi = start + timedelta(minutes=10), end - timedelta(minutes=10)  # counter both sides
    cluster = Cluster(SimConfig(racks=1, seed=seed), anchor=start)
    with tempfile.TemporaryDirectory() as tmp, Warehouse(str(Path(tmp) / "s.duckdb")) as wh:
        cluster.backfill(lambda k, t: wh.ingest(k, t).result(), start, end, progress=False)
        wh.rollup().result()
        cur = wh.reader()
        raw = qm.raw_counters(cur)
        allocs = qm.whole_allocations(cur, start=lo, end=hi, min_length=MIN_RUN)
        truth = counter_truth(raw, allocs)
        opts = Options(node_overhead_w=0.0, pue=1.0)
        worst = {}
        for res in ("minute", "hour"):
            got = qe.run_energy(cur, start=start, end=end, opts=opts, resolution=res)
            got = got.set_index(["job_id", "run_index"])["gpu_kwh"]
            err = (got.reindex(truth.index).fillna(0.0) / truth - 1).abs()
            worst[res] = float(err.max()) if len(err) else float("nan")
    print(f"simulator: {hours:g} h of one rack, {len(truth)} whole runs of at least "
          f"{MIN_RUN.total_seconds() / 60:.0f} min ({truth.sum():.1f} kWh by the counter); "
          f"worst error minute tier {100 * worst['minute']:.2f} %, hour tier "
          f"{100 * worst['hour']:.2f} %")
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
