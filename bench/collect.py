"""One collection cycle of a 24,576-GPU fleet (3,072 nodes), from parse to committed rows.

    .venv/bin/python bench/collect.py [--nodes 3072] [--endpoints 256] [--quick]
    .venv/bin/python bench/collect.py --pull-nodes 12500 [--pull-only]

1. exporter text: 3,072 dcgm-exporter texts (collector.wire.render_dcgm) -> the bulk
   parser -> sanitize -> Warehouse.ingest, committed;
2. Prometheus: one query answer (JSON bytes, as Prometheus sends them) per DCGM field
   for the whole fleet -> json.loads -> collector.promjson.parse_results -> sanitize
   -> ingest, committed;
3. direct scrape with HTTP: ``--endpoints`` local HTTP endpoints served from one process
   (8 GPUs each) scraped concurrently by collector.scrape, parsed and ingested; the
   figure gives how many endpoints one gpulens instance scrapes per 15 s.

4. one pull from Prometheus at ``--pull-nodes`` (default 12,500 nodes, 100,000 GPUs;
   issue 17): a local HTTP server answers as Prometheus would, ``/federate`` with each
   field's exposition text (labels, ``instance``/``job``, timestamps) and the query API
   with each field's JSON; the real ``PrometheusSource`` (``collector.prometheus.connect``)
   pulls through both, ``prometheus.pull = "federate"`` and ``"query"``, from the request
   to sanitised rows (the commit is timed apart). Prints both with CPU seconds and the
   machine's load (2 cores shared), the default's as measured / target / met against
   <= 3 s (the other's "n/a": compared only), and whether the faster is
   ``prometheus.pull``'s default. ``/federate`` is timed twice: the next
   pull of the same series (the label sets kept from the last pull, as every 15 s) and
   a pull whose series all look new (``series new``: a restart, a changed fleet).
   ``--pull-mode federate|query`` times one; ``--repeat N`` pulls N times per mode,
   alternating, and counts the fastest.

Prints the figures; the target is under 2 s per cycle for 1 and 2. ``--quick``: 768
nodes (6,144 GPUs), 64 endpoints and a 1,024-node pull. ``--pull-only``: step 4 alone.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_targets  # noqa: E402
from collector.dcgm import FIELDS, DcgmCollector  # noqa: E402
from collector.federate_text import LabelMemo  # noqa: E402
from collector.prometheus import PrometheusSource, connect, field_queries  # noqa: E402
from collector.promjson import parse_results  # noqa: E402
from collector.sanitize import sanitize_samples  # noqa: E402
from collector.scrape import DcgmScrapeSource  # noqa: E402
from collector.wire import render_dcgm  # noqa: E402
from gpulens.settings import default  # noqa: E402
from tests.support.prometheus import Exporters  # noqa: E402
from tests.support.victoria import with_targets  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.schema import SCHEMAS  # noqa: E402

GPUS_PER_NODE = 8
T0 = datetime(2026, 11, 2, 12, 0)
PULL_TARGET_S = 3.0  # one pull of 100,000 GPUs (issue 17)


def fleet(nodes: int, ts: datetime, seed: int = 0) -> pa.Table:
    """Plausible samples for ``nodes`` x 8 GPUs at ``ts``."""
    rng = np.random.default_rng(seed)
    n = nodes * GPUS_PER_NODE
    node = np.repeat([f"gpu{i:05d}" for i in range(nodes)], GPUS_PER_NODE)
    gpu = np.tile(np.arange(GPUS_PER_NODE), nodes)
    util = rng.uniform(0, 100, n).round()
    cols = {
        "ts": pa.array([ts] * n, pa.timestamp("us")), "node": node, "gpu_index": gpu,
        "gpu_uuid": [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(n)],
        "interval_s": np.full(n, 15.0), "util_pct": util, "mem_util_pct": util / 2,
        "sm_active_pct": (util * 0.8).round(2), "mem_used_mib": rng.uniform(0, 81559, n).round(),
        "power_w": (70 + 6 * util).round(3), "energy_j": rng.uniform(1e8, 1e9, n).round(),
        "temp_c": (30 + util / 2).round(), "mem_temp_c": (35 + util / 2).round(),
        "sm_clock_mhz": np.full(n, 1980.0), "throttle_thermal": util > 97,
        "throttle_power": util > 95, "ecc_sbe_volatile": np.zeros(n, np.int64),
        "ecc_dbe_volatile": np.zeros(n, np.int64), "xid_last": np.zeros(n, np.int32),
        "tensor_active_pct": (util * 0.4).round(2), "dram_active_pct": (util * 0.3).round(2),
    }
    return pa.table(cols, schema=SCHEMAS["samples"])


def prometheus_answers(texts: dict[str, str]) -> list[bytes]:
    """One /api/v1/query answer per field, as Prometheus would send it (JSON bytes)."""
    from collector.promtext import parse_labels, parse_texts

    table = parse_texts(texts)
    rows = table.select(["target", "name", "labels", "value"]).to_pylist()
    label_cache: dict[str, dict] = {}
    per_name: dict[str, list] = {}
    t = T0.timestamp()
    for r in rows:
        lab = label_cache.get(r["labels"])
        if lab is None:
            lab = label_cache[r["labels"]] = parse_labels(r["labels"])
        metric = {"__name__": r["name"], **lab, "instance": f"{r['target']}:9400",
                  "job": "dcgm"}
        per_name.setdefault(r["name"], []).append({"metric": metric,
                                                   "value": [t, repr(r["value"])]})
    out = []
    for f in FIELDS:
        result = [s for name in f.names for s in per_name.get(name, [])]
        out.append(json.dumps({"status": "success",
                               "data": {"resultType": "vector", "result": result}}).encode())
    return out


def pull_bodies(texts: dict[str, str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """What Prometheus answers for the fleet's ``texts``: per selector of
    :func:`field_queries` the ``/federate`` text, and per query the JSON answer."""
    ms = round((T0 - datetime(1970, 1, 1)).total_seconds() * 1000)
    stored = with_targets(texts, ms)  # as Prometheus holds them after scraping
    by_name: dict[str, list[str]] = {}
    for line in stored.splitlines(True):
        by_name.setdefault(line[:line.index("{")], []).append(line)
    del stored
    pair = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')
    federate, query = {}, {}
    for q, f in zip(field_queries(), FIELDS, strict=True):
        lines = [x for n in f.names for x in by_name.get(n, [])]
        federate[q] = "".join(f"# TYPE {n} untyped\n" + "".join(by_name.get(n, []))
                              for n in f.names if n in by_name).encode()
        series = []
        for x in lines:  # name{labels} value ms -> the query API's JSON of one series
            head, value, _ = x.rsplit(" ", 2)
            name, labels = head[:-1].split("{", 1)
            as_json = pair.sub(r'"\1":"', labels)
            series.append(f'{{"metric":{{"__name__":"{name}",{as_json}}},'
                          f'"value":[{ms / 1000},"{value}"]}}')
        query[q] = ('{"status":"success","data":{"resultType":"vector","result":['
                    + ",".join(series) + "]}}").encode()
    return federate, query


class FakePrometheus:
    """127.0.0.1 HTTP server answering ``/federate`` and ``/api/v1/query`` from bodies,
    served from a forked process, so that the CPU time measured is gpulens's own."""

    def __init__(self, federate: dict[str, bytes], query: dict[str, bytes]):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, urlsplit

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, body: bytes | None, kind: str) -> None:
                self.send_response(200 if body is not None else 404)
                body = body or b""
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                url = urlsplit(self.path)
                sel = parse_qs(url.query).get("match[]", [""])[0]
                self._send(federate.get(sel) if url.path == "/federate" else None,
                           "text/plain; version=0.0.4")

            def do_POST(self):  # noqa: N802
                size = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(urlsplit(self.path).query) | parse_qs(
                    self.rfile.read(size).decode())
                self._send(query.get(form.get("query", [""])[0]), "application/json")

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self.process = multiprocessing.get_context("fork").Process(
            target=server.serve_forever, daemon=True)
        self.process.start()
        server.socket.close()  # the child listens

    def close(self) -> None:
        self.process.terminate()
        self.process.join()


def pull_comparison(nodes: int, wh: Warehouse, modes: tuple[str, ...] = ("federate", "query"),
                    repeat: int = 1) -> bool:
    """Step 4: one pull of ``nodes`` x 8 GPUs through /federate and through queries.

    Each mode pulls ``repeat`` times, the modes alternating; the fastest pull of each
    counts (wall, with its CPU seconds: the 2 cores are shared, so load inflates wall).
    """
    gpus = nodes * GPUS_PER_NODE
    federate, query = pull_bodies(render_dcgm(fleet(nodes, T0, seed=4)))
    server = FakePrometheus(federate, query)
    results: dict[str, tuple[float, float, float]] = {}  # mode -> (wall, cpu, load)
    try:
        sources = {}
        for mode in modes:
            sources[mode] = PrometheusSource(connect(server.url, timeout_s=300),
                                             interval_s=15.0, pull=mode, now=lambda: T0)
            sources[mode].collect(T0 - timedelta(seconds=15))  # warm: connections, imports
        ticks = dict.fromkeys(sources, 0)  # each source's own next interval, so every
        # timed pull is its live pull (a gap would send it to range queries to catch up)
        for k in range(repeat):
            for mode, source in sources.items():
                # /federate: the next pull of the same series (the label sets kept from
                # the last pull, as every 15 s), then one whose series all look new
                for fresh in (False, True) if mode == "federate" else (False,):
                    if fresh:
                        source.labels = LabelMemo()
                    name = f"{mode}, series new" if fresh else mode
                    load = os.getloadavg()[0]
                    cpu0 = time.process_time()
                    took, batches = timed(lambda s=source, t=ticks[mode]: s.collect(
                        T0 + timedelta(seconds=15 * t)))
                    ticks[mode] += 1
                    cpu = time.process_time() - cpu0
                    samples = dict(batches)["samples"]
                    assert samples.num_rows == gpus, (name, samples.num_rows)
                    t_commit = 0.0
                    if k == 0 and not fresh:
                        t_commit = timed(lambda b=batches: [wh.ingest(n, t).result()
                                                            for n, t in b])[0]
                    mb = sum(len(b) for b in (federate if mode == "federate" else query)
                             .values())
                    print(f"  {name:20} pull: {mb / 1e6:,.0f} MB, {samples.num_rows:,} rows: "
                          f"{took:.2f} s wall ({cpu:.2f} s CPU, load {load:.1f})"
                          + (f"; commit {t_commit:.2f} s more" if t_commit else ""))
                    if name not in results or took < results[name][0]:
                        results[name] = (took, cpu, load)
    finally:
        server.close()
    rows = []
    pull = default("prometheus.pull")
    for name, (took, cpu, load) in results.items():
        # the target is the default's (the faster, below); the other mode is compared only
        judged = name.split(",")[0] == pull
        rows.append((f"one pull of {gpus:,} GPUs, {name}", f"{took:.2f} s ({cpu:.2f} s CPU, "
                     f"load {load:.1f})", f"<= {PULL_TARGET_S:g} s" if judged
                     else "not the default", took <= PULL_TARGET_S if judged else None))
    if len(modes) > 1:
        fastest = min(modes, key=lambda m: results[m][0])
        rows.append(("the faster pull is the default", f"{fastest} "
                     f"({max(results[m][0] for m in modes) / results[fastest][0]:.1f}x)",
                     f"prometheus.pull = {pull}", fastest == pull))
    return print_targets(rows, title=f"one Prometheus pull, {gpus:,} GPUs (issue 17)")


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3072)
    ap.add_argument("--endpoints", type=int, default=256)
    ap.add_argument("--pull-nodes", type=int, default=12_500,
                    help="nodes of the Prometheus pull comparison (8 GPUs each)")
    ap.add_argument("--pull-only", action="store_true", help="only the pull comparison")
    ap.add_argument("--pull-mode", choices=("both", "federate", "query"), default="both",
                    help="which pulls to time (both: /federate and the query API)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="pulls per mode, alternating; the fastest counts")
    ap.add_argument("--quick", action="store_true", help="768 nodes, 64 endpoints")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.endpoints = 768, 64
        args.pull_nodes = min(args.pull_nodes, 1024)
    n_gpus = args.nodes * GPUS_PER_NODE
    modes = ("federate", "query") if args.pull_mode == "both" else (args.pull_mode,)
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(Path(tmp) / "bench.duckdb")
        if args.pull_only:
            print(f"one Prometheus pull, {args.pull_nodes:,} nodes:")
            ok = pull_comparison(args.pull_nodes, wh, modes, args.repeat)
            wh.close()
            return 0 if ok else 1
        texts = render_dcgm(fleet(args.nodes, T0))
        lines = sum(t.count("\n") for t in texts.values())
        mb = sum(len(t) for t in texts.values()) / 1e6
        collector = DcgmCollector(15.0)
        warm = collector.collect(texts, T0 - timedelta(seconds=15))
        wh.ingest("samples", warm.samples).result()

        def exporter_cycle():
            r = collector.collect(texts, T0)
            s, _ = sanitize_samples(r.samples, T0)
            wh.ingest("events", r.events).result()
            return wh.ingest("samples", s).result()

        t_text, rows = timed(exporter_cycle)
        print(f"exporter text: {args.nodes} nodes, {n_gpus} GPUs, {lines:,} lines "
              f"({mb:.0f} MB): {t_text:.2f} s parse -> committed ({rows} rows)")

        bodies = prometheus_answers(texts)
        pmb = sum(len(b) for b in bodies) / 1e6
        ts2 = T0 + timedelta(seconds=15)

        def prom_cycle():
            results = [json.loads(b)["data"]["result"] for b in bodies]
            samples = parse_results(results, interval_s=15.0)
            # the answers say T0; stamp the next tick so the rows are new
            samples = samples.set_column(0, "ts", pa.array([ts2] * samples.num_rows,
                                                           pa.timestamp("us")))
            s, _ = sanitize_samples(samples, ts2)
            return wh.ingest("samples", s).result()

        t_json = timed(lambda: [json.loads(b) for b in bodies])[0]
        t_prom, rows = timed(prom_cycle)
        print(f"prometheus: {len(bodies)} query answers, {pmb:.0f} MB JSON: {t_prom:.2f} s "
              f"json -> committed ({rows} rows; json.loads alone {t_json:.2f} s)")

        node_texts = list(texts.values())[: args.endpoints]
        ex = Exporters(args.endpoints, lambda i: node_texts[i % len(node_texts)])
        try:
            src = DcgmScrapeSource(",".join(ex.addresses), interval_s=15.0, workers=64,
                                   now=lambda: T0 + timedelta(seconds=60))
            src.collect(T0 + timedelta(seconds=30))  # warm the connections
            t_http, batches = timed(lambda: src.collect(T0 + timedelta(seconds=45)))
            t_store, rows = timed(lambda: sum(wh.ingest(k, t).result() for k, t in batches))
        finally:
            ex.close()
        total = t_http + t_store
        per_15 = int(args.endpoints * 15.0 / total)
        print(f"direct scrape: {args.endpoints} local HTTP endpoints (8 GPUs each): "
              f"{t_http:.2f} s fetch+parse, {t_store:.2f} s ingest, {total:.2f} s per cycle "
              f"({rows} rows) -> about {per_15:,} endpoints per 15 s on this machine")
        print(f"one Prometheus pull, {args.pull_nodes:,} nodes:")
        pull_comparison(args.pull_nodes, wh, modes, args.repeat)
        wh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
