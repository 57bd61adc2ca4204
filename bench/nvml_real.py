"""The NVML collector on a real GPU: idle, under load, cooling; direct and through the agent.

    python bench/nvml_real.py [--idle 10] [--load 40] [--cool 15] [--interval 1]

Needs an NVIDIA driver (and PyTorch or CuPy for the load phase; without either the load
phase is idle too). Every ``--interval`` seconds it reads every GPU twice: with
``NvmlSource`` directly (source ``nvml``) and by scraping a ``gpulens agent`` on a free
local port with ``DcgmScrapeSource`` (source ``dcgm``, the exporter's text). Both batches
go into one on-disk warehouse, under the node names ``direct`` and ``agent``, and the
figures are read back from it:

- how long one NVML read of every GPU takes (ms) and one agent scrape + parse;
- mean utilisation (%), power (W), temperature (C) and SM clock (MHz) per phase;
- the GPU's energy counter (J) against the integral of its power readings over the
  loaded window: two independent measures of the same energy, which should agree within
  a few per cent (the power reading is an average over NVML's own ~25-100 ms window);
- columns the direct path fills and the agent path leaves empty (or the reverse).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.agent import Agent  # noqa: E402
from collector.nvml import NvmlSource  # noqa: E402
from collector.scrape import DcgmScrapeSource  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.export import export_parquet  # noqa: E402

BURN = """
import sys, time
secs = float(sys.argv[1])
try:
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = lambda: a @ a
    sync = torch.cuda.synchronize
except Exception:
    import cupy
    a = cupy.random.rand(8192, 8192, dtype=cupy.float32)
    mm = lambda: a @ a
    sync = cupy.cuda.runtime.deviceSynchronize
end = time.time() + secs
while time.time() < end:
    for _ in range(20):
        mm()
    sync()
"""

COLUMNS = ["util_pct", "mem_util_pct", "sm_active_pct", "mem_used_mib", "power_w", "energy_j",
           "temp_c", "mem_temp_c", "sm_clock_mhz", "throttle_thermal", "throttle_power",
           "ecc_sbe_volatile", "ecc_dbe_volatile", "xid_last"]


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=float, default=10.0, help="seconds idle first")
    ap.add_argument("--load", type=float, default=40.0, help="seconds of matrix products")
    ap.add_argument("--cool", type=float, default=15.0, help="seconds idle after")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between reads")
    args = ap.parse_args()

    direct = NvmlSource("direct", interval_s=args.interval)
    agent = Agent(NvmlSource("agent", interval_s=args.interval), host="127.0.0.1", port=0)
    url = agent.start()
    scrape = DcgmScrapeSource(url.split("//")[1].split("/")[0], interval_s=args.interval)
    print(f"driver {direct.reader.driver_version}, {len(direct.reader.handles)} GPU(s); "
          f"agent at {url}")
    tmp = tempfile.mkdtemp()
    wh = Warehouse(Path(tmp) / "gpu.duckdb")
    wh.ingest_all(direct.topology())  # the inventory (model, power limit, memory)

    phases, read_ms, scrape_ms = [], [], []
    burner = None
    plan = [("idle", args.idle), ("load", args.load), ("cool", args.cool)]
    for phase, secs in plan:
        if phase == "load":
            burner = subprocess.Popen([sys.executable, "-c", BURN, str(secs)])
        end = time.monotonic() + secs
        while time.monotonic() < end:
            tick = time.monotonic()
            ts = now().replace(microsecond=(now().microsecond // 1000) * 1000)
            t0 = time.perf_counter()
            batches = direct.collect(ts)
            read_ms.append(1000 * (time.perf_counter() - t0))
            agent.read_once()
            t0 = time.perf_counter()
            scraped = scrape.collect(ts)
            scrape_ms.append(1000 * (time.perf_counter() - t0))
            wh.ingest_all(dict(batches))
            wh.ingest_all(dict(scraped))
            phases.append((ts, phase))
            time.sleep(max(0.0, args.interval - (time.monotonic() - tick)))
        if burner is not None and phase == "load":
            rc = burner.wait()
            print(f"load process exited {rc}")
            burner = None
    last = dict(direct.collect(now()))["samples"].to_pandas()
    agent.stop()
    direct.close()
    export_parquet(wh.reader(), Path(tmp) / "export", since=phases[0][0], until=now())
    wh.close()
    raw = pd.read_parquet(Path(tmp) / "export" / "gpu_samples").drop(columns="date")
    raw = raw.merge(pd.DataFrame(phases, columns=["ts", "phase"]).astype(
        {"ts": raw["ts"].dtype}), on="ts", how="left")
    print(f"\n{len(raw)} warehouse rows ({raw['node'].value_counts().to_dict()})")
    print(f"NVML read of every GPU: median {statistics.median(read_ms):.1f} ms, "
          f"max {max(read_ms):.1f} ms ({len(read_ms)} reads)")
    print(f"agent scrape + parse: median {statistics.median(scrape_ms):.1f} ms")
    print(f"last direct reading of GPU 0: { {k: last.iloc[0][k] for k in COLUMNS} }")
    return report(raw)


def report(raw: pd.DataFrame) -> int:
    """Print the per-phase means, the energy cross-check and the column parity."""
    print(f"\n{'node':<7} {'phase':<5} {'util %':>7} {'power W':>8} {'temp C':>7} "
          f"{'HBM C':>6} {'SM MHz':>7} {'thermal thr.':>12}")
    for (node, phase), g in raw.groupby(["node", "phase"], sort=False):
        print(f"{node:<7} {phase:<5} {g.util_pct.mean():7.1f} {g.power_w.mean():8.1f} "
              f"{g.temp_c.mean():7.1f} {g.mem_temp_c.mean():6.1f} {g.sm_clock_mhz.mean():7.0f}"
              f" {g.throttle_thermal.astype(float).mean():12.2f}")
    for node, g in raw.groupby("node"):
        for gpu, s in g.sort_values("ts").groupby("gpu_index"):
            s = s.dropna(subset=["energy_j", "power_w"])
            if len(s) < 3 or s["energy_j"].iloc[-1] <= s["energy_j"].iloc[0]:
                print(f"{node} GPU {gpu}: the energy counter did not advance")
                continue
            dt = s["ts"].diff().dt.total_seconds().iloc[1:]
            trapezoid = float((dt * (s["power_w"].iloc[1:].values
                                     + s["power_w"].iloc[:-1].values) / 2).sum())
            counter = float(s["energy_j"].iloc[-1] - s["energy_j"].iloc[0])
            print(f"{node} GPU {gpu}: energy counter {counter / 1000:.2f} kJ, integral of "
                  f"power {trapezoid / 1000:.2f} kJ, ratio {trapezoid / counter:.3f}")
    d = raw[raw.node == "direct"][COLUMNS].notna().mean()
    a = raw[raw.node == "agent"][COLUMNS].notna().mean()
    diff = [(c, d[c], a[c]) for c in COLUMNS if (d[c] > 0) != (a[c] > 0)]
    print("\ncolumns filled on one path only:",
          ", ".join(f"{c} (direct {x:.0%}, agent {y:.0%})" for c, x, y in diff) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
