"""gpulens side by side with Prometheus: same samples, same questions, same machine.

    .venv/bin/python bench/vs_prometheus.py [--racks 16] [--days 30] [--interval 60]
                                            [--repeat 5] [--quick] [--workdir /tmp]

1. The simulator (collector.simulator, ``SimConfig(racks=16)`` = 1,024 GPUs) generates
   ``--days`` of telemetry every ``--interval`` seconds. gpulens loads it through its
   bulk path hour by hour (Warehouse.ingest, the rollup job, then the retention job with
   the service's default ``retention.*``, so it holds what a running service holds: raw
   samples of the last ``retention.raw_days`` only); only the columns Prometheus also
   gets are kept (GPU temperature, power, utilisation, the energy counter).
2. The same rows (all of them, from a second DuckDB file kept for this) are written as
   dcgm-exporter series (labels gpu, Hostname, rack) in
   OpenMetrics text (warehouse.export.write_openmetrics), one file per 486-h block
   period, and backfilled with ``promtool tsdb create-blocks-from openmetrics
   --max-block-duration=486h`` (the block size a Prometheus keeping a year compacts to);
   then ``/usr/bin/prometheus`` serves them on a free local port, compaction off.
3. Five questions are asked both ways: PromQL over the HTTP API, and the functions of
   bench/questions.py. The answers must agree (tolerances printed)
   before anything is timed; then each runs ``--repeat`` times after one warm-up run and
   the medians are compared. Storage on disk for the same data is printed too.

The default is 60-s sampling (44 M samples per metric over 30 days at 1,024 GPUs): at
15 s the OpenMetrics text alone would be ~57 GB and promtool would run for most of an
hour on two cores. ``--interval 15`` runs the full rate where there is time and disk.
``--quick``: 128 GPUs x 7 days at 15 s, a couple of minutes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import questions as bq  # noqa: E402
from bench.common import (  # noqa: E402
    dir_bytes,
    free_port,
    human_bytes,
    machine,
    median,
    ms,
    print_table,
    print_targets,
    repeat,
    timed,
    work_parent,
)
from collector.simulator import Cluster, SimConfig  # noqa: E402
from warehouse import Retention, Warehouse  # noqa: E402
from warehouse.export import write_openmetrics  # noqa: E402

END = datetime(2026, 11, 16)  # a Monday, 00:00 UTC: the end of the simulated history
BLOCK_S = 486 * 3600  # promtool/Prometheus block range (ExponentialBlockRanges(2h, ., 3))
COLUMNS = ["ts", "node", "gpu_index", "gpu_uuid", "interval_s", "util_pct", "power_w",
           "energy_j", "temp_c"]
METRICS = ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL",
           "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
EPS = 0.001  # Prometheus ranges are closed [t - r, t]: evaluate 1 ms early -> [start, end)

#: Issue 17's speed targets, Prometheus's time over gpulens's on the same run: the live
#: questions (the last hour, now) at least as fast, the historical ones (7 and 30 days)
#: at least 30x faster.
LIVE, HISTORICAL = 1.0, 30.0


# --- loading ---------------------------------------------------------------------------
def load_gpulens(wh: Warehouse, source: Warehouse, cluster: Cluster, start: datetime,
                 end: datetime, keep: Retention) -> dict:
    """Simulate hour by hour; ingest each hour into gpulens (timed apart from the
    simulation), roll it up and apply the retention ``keep`` at the hour's end, as the
    service's rollup and hourly retention jobs do, so the file holds what a service
    with these settings holds after the days simulated. ``source`` gets the same raw
    rows, kept whole: Prometheus is given them (:func:`load_prometheus`)."""
    for w in (wh, source):
        w.ingest_all(cluster.topology())
    sim_s = ingest_s = rollup_s = retention_s = 0.0
    rows, t = 0, start
    while t < end:
        e = min(t + timedelta(hours=1), end)
        s, chunk = timed(lambda: cluster.samples(t, e).select(COLUMNS))  # noqa: B023
        sim_s += s
        s, n = timed(lambda: wh.ingest("samples", chunk).result())  # noqa: B023
        ingest_s += s
        source.ingest("samples", chunk).result()
        rollup_s += timed(lambda: wh.rollup().result())[0]
        retention_s += timed(lambda: wh.apply_retention(e, keep).result())[0]  # noqa: B023
        rows += n
        t = e
    wh.checkpoint().result()
    return {"rows": rows, "simulate_s": sim_s, "ingest_s": ingest_s, "rollup_s": rollup_s,
            "retention_s": retention_s}


def load_prometheus(wh: Warehouse, start: datetime, end: datetime, work: Path,
                    blocks: Path) -> dict:
    """OpenMetrics text per block period -> promtool blocks in ``blocks``."""
    blocks.mkdir(parents=True, exist_ok=True)
    text_s = promtool_s = 0.0
    lines = text_bytes = 0
    lo = int(start.timestamp()) if start.tzinfo else int((start - datetime(1970, 1, 1))
                                                         .total_seconds())
    hi = lo + int((end - start).total_seconds())
    edge = lo
    while edge < hi:
        nxt = min(hi, (edge // BLOCK_S + 1) * BLOCK_S)
        a, b = datetime(1970, 1, 1) + timedelta(seconds=edge), \
            datetime(1970, 1, 1) + timedelta(seconds=nxt)
        path = work / f"om-{edge}.txt"
        s, n = timed(lambda: write_openmetrics(wh.reader(), path, start=a, end=b,  # noqa: B023
                                               metrics=METRICS))
        text_s += s
        lines += n
        text_bytes += path.stat().st_size
        cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q",
               f"--max-block-duration={BLOCK_S // 3600}h", str(path), str(blocks)]
        s, proc = timed(lambda: subprocess.run(cmd, capture_output=True, text=True))  # noqa: B023
        promtool_s += s
        path.unlink()
        if proc.returncode != 0:
            raise RuntimeError(f"promtool failed: {proc.stderr[-2000:]}")
        edge = nxt
    return {"lines": lines, "text_bytes": text_bytes, "text_s": text_s,
            "promtool_s": promtool_s}


class Prometheus:
    """/usr/bin/prometheus on ``blocks``, compaction off, on a free 127.0.0.1 port."""

    def __init__(self, blocks: Path, work: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = requests.Session()  # one kept-alive connection for every query
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")  # scrapes nothing
        self.log = open(work / "prometheus.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={blocks}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=3650d",
             # min = max block duration: the backfilled blocks stay as they are
             "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h",
             "--query.max-samples=1000000000", "--query.timeout=10m"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            try:
                if self.http.get(self.base + "/-/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start; see {work}/prometheus.log")
            time.sleep(0.2)

    def query(self, expr: str, t: float | None = None, *, start: float | None = None,
              end: float | None = None, step: float | None = None) -> list[dict]:
        params = {"query": expr}
        if step is None:
            path, params["time"] = "/api/v1/query", repr(t)
        else:
            path = "/api/v1/query_range"
            params.update(start=repr(start), end=repr(end), step=repr(step))
        doc = self.http.post(self.base + path, data=params, timeout=900).json()
        if doc.get("status") != "success":
            raise RuntimeError(f"{expr}: {doc}")
        return doc["data"]["result"]

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# --- the questions ---------------------------------------------------------------------
def epoch(t: datetime) -> float:
    return (t - datetime(1970, 1, 1)).total_seconds()


def from_epoch(s: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=round(s))


def matrix(result: list[dict], label: str, shift_s: float, name: str) -> pd.DataFrame:
    rows = [(r["metric"].get(label), from_epoch(float(t) + EPS - shift_s), float(v))
            for r in result for t, v in r["values"]]
    return pd.DataFrame(rows, columns=[label, "ts", name])


def vector(result: list[dict], labels: list[str], name: str) -> pd.DataFrame:
    rows = [(*(r["metric"].get(k) for k in labels), float(r["value"][1])) for r in result]
    return pd.DataFrame(rows, columns=[*labels, name])


def questions(wh: Warehouse, prom: Prometheus, start: datetime, end: datetime,
              interval_s: float, days: int) -> list[dict]:
    """Each question: name, gpulens(), prometheus() -> comparable frames, check(a, b)."""
    week = max(start, end - timedelta(days=7))
    t_end = epoch(end) - EPS
    span = f"{days}d"

    def close(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], col: str, rel: float,
              abs_: float = 0.0) -> str:
        m = a.merge(b, on=keys, how="outer", suffixes=("_g", "_p"), indicator=True)
        if (m["_merge"] != "both").any():
            return f"rows differ: {(m['_merge'] != 'both').sum()} of {len(m)} unmatched"
        err = (m[col + "_g"] - m[col + "_p"]).abs()
        lim = abs_ + rel * m[col + "_p"].abs()
        bad = int((err > lim).sum())
        worst = float((err / m[col + "_p"].abs().clip(lower=1e-9)).max())
        return ("" if bad == 0 else f"{bad} of {len(m)} values outside tolerance; ") + \
            f"{len(m)} values, worst relative difference {worst:.1e}"

    q = []
    q.append(dict(
        name=f"GPU-hours by rack per day, {days} d", tol="0.01 %", speedup=HISTORICAL,
        gpulens=lambda: bq.gpu_hours_by_rack_day(wh.reader(), start=start, end=end)
        .rename(columns={"day": "ts"}),
        prometheus=lambda: matrix(prom.query(
            f"sum by (rack) (sum_over_time(DCGM_FI_DEV_GPU_UTIL[1d])) * {interval_s} / 100"
            " / 3600", start=epoch(start) + 86400 - EPS, end=t_end, step=86400),
            "rack", 86400, "gpu_h"),
        check=lambda a, b: close(a, b, ["rack", "ts"], "gpu_h", 1e-4)))
    q.append(dict(
        name="hourly p95 GPU temperature per rack, 7 d", tol="0.01 C", speedup=HISTORICAL,
        gpulens=lambda: bq.rack_temp_p95_hourly(wh.reader(), start=week, end=end),
        prometheus=lambda: matrix(prom.query(
            "quantile by (rack) (0.95, max_over_time(DCGM_FI_DEV_GPU_TEMP[1h]))",
            start=epoch(week) + 3600 - EPS, end=t_end, step=3600), "rack", 3600, "p95_c"),
        check=lambda a, b: close(a, b, ["rack", "ts"], "p95_c", 0.0, 0.01)))
    q.append(dict(
        name=f"energy per rack, {days} d (kWh)", tol="0.1 %", speedup=HISTORICAL,
        gpulens=lambda: bq.energy_by_rack(wh.reader(), start=start, end=end),
        prometheus=lambda: vector(prom.query(
            f"sum by (rack) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{span}])) / 3.6e9",
            t_end), ["rack"], "energy_kwh"),
        check=lambda a, b: close(a, b, ["rack"], "energy_kwh", 1e-3)))
    q.append(dict(
        name="mean utilisation per node, last hour", tol="0.001 points", speedup=LIVE,
        gpulens=lambda: bq.node_util_last_hour(wh.reader(), now=end),
        prometheus=lambda: vector(prom.query(
            "avg by (Hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))", t_end),
            ["Hostname"], "util_pct").rename(columns={"Hostname": "node"}),
        check=lambda a, b: close(a, b, ["node"], "util_pct", 0.0, 1e-3)))
    q.append(dict(
        name="10 hottest GPUs now", tol="same temperatures", speedup=LIVE,
        gpulens=lambda: bq.hottest_gpus(wh.reader(), now=end, limit=10),
        prometheus=lambda: vector(prom.query("topk(10, DCGM_FI_DEV_GPU_TEMP)", t_end),
                                  ["Hostname", "gpu"], "temp_c"),
        check=lambda a, b: "" if sorted(a["temp_c"].astype(float)) == sorted(b["temp_c"])
        and len(a) == 10 else f"temperatures differ: {sorted(a['temp_c'])} vs "
                              f"{sorted(b['temp_c'])}"))
    return q


# --- storage -----------------------------------------------------------------------
TIER_NAMES = {"gpu_samples": "raw", "gpu_samples_1m": "1-minute",
              "gpu_nodes_1m": "1-minute per node", "gpu_nodes_5m": "5-minute per node",
              "gpu_samples_1h": "1-hour"}


def storage_rows(wh: Warehouse, prom_bytes: int, samples: float) -> tuple[list, list]:
    """The storage table (tier, rows, bytes, bytes per sample) and the target rows
    (measure, measured, target, met) for ``samples`` samples of one metric each.

    A tier's bytes are the DuckDB blocks its column segments use (bench/questions.py
    ``storage``, after a CHECKPOINT). The file also holds the other tables and free
    blocks: blocks a bulk load wrote and DuckDB later rewrote (its optimistic writes of
    large appends, partial row groups), which it reuses for later writes but does not
    return to the file system. The target (issue 17) is on the whole file; the bytes in
    use are printed beside it.
    """
    cur = wh.reader()
    tiers = bq.storage(cur)
    block, used, free = cur.execute(
        "SELECT block_size, used_blocks, free_blocks FROM pragma_database_size() "
        "WHERE database_name = current_database()").fetchall()[0]
    file_bytes = wh.size_bytes()
    table = []
    for t in tiers.itertuples():
        table.append((f"{TIER_NAMES.get(t.table, t.table)} ({t.table})", f"{t.rows:,}",
                      human_bytes(t.bytes), f"{t.bytes / samples:.2f}"))
    other = used * block - int(tiers["bytes"].sum())
    table.append(("other tables", "", human_bytes(max(other, 0)),
                  f"{max(other, 0) / samples:.2f}"))
    table.append(("free blocks", "", human_bytes(free * block), f"{free * block / samples:.2f}"))
    table.append(("gpulens, the whole file", "", human_bytes(file_bytes),
                  f"{file_bytes / samples:.2f}"))
    table.append(("Prometheus, TSDB blocks", "", human_bytes(prom_bytes),
                  f"{prom_bytes / samples:.2f}"))
    target = prom_bytes / samples
    targets = [(label, f"{b / samples:.2f} B", f"<= {target:.2f} B (Prometheus)",
                "met" if b <= prom_bytes else "NOT met")
               for label, b in (("bytes per sample, all tiers, file", file_bytes),
                                ("bytes per sample, all tiers, blocks in use", used * block))]
    return table, targets


def storage_report(wh: Warehouse, prom_bytes: int, samples: float) -> None:
    """Print :func:`storage_rows`."""
    table, targets = storage_rows(wh, prom_bytes, samples)
    print(f"\nstorage for the same data, per sample of one metric ({samples / 1e6:,.1f} M "
          "samples; gpulens: one DuckDB file, after CHECKPOINT)")
    print_table(["tier", "rows", "on disk", "B/sample"], table, align="lrrr")
    print()
    print_table(["measure", "measured", "target", "met"], targets, align="lrrl")


def run(args) -> int:
    start = END - timedelta(days=args.days)
    config = SimConfig(racks=args.racks, interval_s=args.interval)
    per_metric = config.n_gpus * args.days * 86400 / args.interval
    print(f"machine: {machine()}")
    print(f"data: {config.n_gpus:,} GPUs x {args.days} days every {args.interval:g} s = "
          f"{per_metric / 1e6:,.1f} M samples per metric; {len(METRICS)} metrics "
          f"({', '.join(m.removeprefix('DCGM_FI_DEV_') for m in METRICS)}) in both systems")
    workdir = Path(tempfile.mkdtemp(prefix="gpulens-vs-prom-", dir=work_parent(args.workdir)))
    prom = None
    wh = Warehouse(workdir / "gpulens.duckdb")
    source = Warehouse(workdir / "source.duckdb")
    keep = Retention()  # the service's defaults (retention.*)
    print(f"gpulens keeps raw samples {keep.raw_days:g} days, 1-minute rollups "
          f"{keep.minute_days:g}, 1-hour {keep.hour_days:g} (the service's defaults, applied "
          "after each simulated hour as its hourly retention job does)")
    try:
        cluster = Cluster(config, anchor=start)
        g = load_gpulens(wh, source, cluster, start, END, keep)
        print(f"gpulens load: {g['rows']:,} rows; simulate {g['simulate_s']:.0f} s (not "
              f"counted), ingest {g['ingest_s']:.1f} s ({g['rows'] / g['ingest_s'] / 1e6:.2f} "
              f"M rows/s), rollup {g['rollup_s']:.1f} s, retention {g['retention_s']:.1f} s")
        p = load_prometheus(source, start, END, workdir, workdir / "prometheus")
        source.close()
        (workdir / "source.duckdb").unlink()
        print(f"Prometheus load: {p['lines']:,} OpenMetrics lines "
              f"({human_bytes(p['text_bytes'])}) written in {p['text_s']:.0f} s, promtool "
              f"backfill {p['promtool_s']:.0f} s")
        prom = Prometheus(workdir / "prometheus", workdir)
        qs = questions(wh, prom, start, END, args.interval, args.days)
        failed = []
        for item in qs:  # agreement first
            verdict = item["check"](item["gpulens"](), item["prometheus"]())
            ok = not verdict.startswith(("rows differ", "temperatures")) and \
                "outside" not in verdict
            print(f"  agree? {'yes' if ok else 'NO '}  {item['name']} (tolerance "
                  f"{item['tol']}): {verdict or 'identical'}")
            if not ok:
                failed.append(item["name"])
        if failed:
            print(f"answers differ for {failed}: not timing")
            return 1
        rows, targets = [], []
        for item in qs:
            tg = median(repeat(item["gpulens"], args.repeat))
            tp = median(repeat(item["prometheus"], args.repeat))
            rows.append((item["name"], ms(tg), ms(tp), f"{tp / tg:,.1f}x"))
            targets.append((f"{item['name']}: Prometheus / gpulens", f"{tp / tg:,.1f}x",
                            f">= {item['speedup']:g}x", tp / tg >= item["speedup"]))
        print(f"\nmedian of {args.repeat} runs after a warm-up run (machine shared with "
              "other work: medians, not best runs)")
        print_table(["question", "gpulens", "Prometheus", "Prometheus / gpulens"], rows)
        print_targets(targets, "targets: live questions at least as fast as Prometheus, "
                      "historical ones at least 30x faster")
        wh.checkpoint().result()
        storage_report(wh, dir_bytes(workdir / "prometheus"), per_metric * len(METRICS))
        wh.close()
        return 0
    finally:
        wh.close()
        source.close()
        if prom is not None:
            prom.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--racks", type=int, default=16, help="racks of 64 GPUs (16: 1,024)")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--interval", type=float, default=60.0, help="sampling period, seconds")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", default=None, help="where the temporary files go")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse and blocks")
    ap.add_argument("--quick", action="store_true", help="128 GPUs x 7 days at 15 s")
    args = ap.parse_args(argv)
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        print("prometheus and promtool are needed: apt-get install -y prometheus")
        return 2
    if args.quick:
        args.racks, args.days, args.interval, args.repeat = 2, 7, 15.0, 3
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
