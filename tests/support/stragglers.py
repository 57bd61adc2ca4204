"""The stragglers' test warehouse (issue 15): the demo cluster simulated from 30 minutes
before live start to 100 minutes after, written through ingest and the 1-minute rollup.
Its live straggler runs from 2 minutes after live start to about 85 minutes after."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from collector.simulator import Cluster, SimConfig

ANCHOR = datetime(2026, 11, 2)
LIVE = ANCHOR + timedelta(days=1)
MIN = timedelta(minutes=1)
END = LIVE + 100 * MIN


def cluster() -> Cluster:
    return Cluster(SimConfig(), ANCHOR, LIVE)


def seed(path: Path, sim: Cluster | None = None) -> Path:
    """Write the warehouse file at ``path`` (no analytics refresh yet)."""
    from warehouse import Warehouse

    sim = sim or cluster()
    w = Warehouse(str(path))
    try:
        sim.backfill(lambda k, t: w.ingest(k, t).result(), LIVE - 30 * MIN, END,
                     progress=False)
        w.rollup().result()
    finally:
        w.close()
    return path


def store_run(wh, job_id: str, gpus: list, slow: dict) -> None:
    """One run of ``job_id`` (run 0): ``gpus`` lists its allocations as (node, GPU index,
    start, end), each GPU's minutes in ``gpu_samples_1m`` at 1980 MHz, 600 W and 80 % SM
    activity but where ``slow[(node, gpu_index)]`` maps a minute to its clock (MHz)."""
    wh.ingest("allocations", pd.DataFrame(
        [{"job_id": job_id, "run_index": 0, "node": n, "gpu_index": g, "start_ts": a,
          "end_ts": b} for n, g, a, b in gpus])).result()
    rows = pd.DataFrame(
        [{"ts": ts, "node": n, "gpu_index": g,
          "sm_clock_mhz_avg": slow.get((n, g), {}).get(ts, 1980.0), "power_w_avg": 600.0,
          "sm_active_pct_avg": 80.0}
         for n, g, a, b in gpus for ts in pd.date_range(a, b, freq="1min", inclusive="left")])
    rows["gpu_index"] = rows.gpu_index.astype("int16")

    def write(con):
        con.register("run_minutes", rows)
        try:
            con.execute("INSERT INTO gpu_samples_1m BY NAME SELECT * FROM run_minutes")
        finally:
            con.unregister("run_minutes")
    wh.write(write).result()


def forget_stragglers(wh) -> None:
    """Delete every episode and the refresh's ledger: the next refresh is a first one."""
    from warehouse.stragglers import LEDGER_KEY

    wh.write(lambda con: con.execute(
        "DELETE FROM stragglers; DELETE FROM meta WHERE key = ?", [LEDGER_KEY])).result()
