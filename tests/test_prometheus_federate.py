"""The /federate pull (issue 17): a real Prometheus 2.42 answer, the same rows as the query
API, bad lines costing only themselves, and the source's choice between federate, query
and catch-up."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collector.federate as federate
from collector.dcgm import FIELDS, GPU_INDEX
from collector.federate import (
    AHEAD,
    BAD_TIME,
    NO_NODE,
    FederateUnsupported,
    LabelMemo,
    parse_federate,
    pull,
)
from collector.nodenames import NodeNames
from collector.prometheus import PrometheusSource, field_queries
from collector.promjson import read_results
from collector.promtext import label_values, parse_labels, parse_texts
from collector.wire import render_dcgm
from tests.support.held_samples import MS0, T0, HeldSamples, QueryClient
from tests.support.victoria import with_targets
from warehouse.schema import SCHEMAS

FIXTURE = Path(__file__).parent / "fixtures" / "prometheus" / "federate-2.42.txt"
VALUES = [c for c in SCHEMAS["samples"].names if c not in ("ts", "interval_s")]


def read(text: str, pulled: datetime = T0, **kw) -> tuple[pa.Table, Counter]:
    counts: Counter = Counter()
    samples, _ = parse_federate(pull(lambda s: text, ["all"], counts=counts), pulled,
                                counts=counts, **kw)
    return samples, counts


def as_query_results(text: str) -> list[list[dict]]:
    """The query API's answer (one ``data.result`` per field) holding ``text``'s samples."""
    rows = parse_texts({"t": text}).to_pylist()
    field_of = {n: j for j, f in enumerate(FIELDS) for n in f.names}
    out: list[list[dict]] = [[] for _ in FIELDS]
    for r in rows:
        if r["name"] in field_of:
            out[field_of[r["name"]]].append({
                "metric": {"__name__": r["name"], **parse_labels(r["labels"])},
                "value": [r["timestamp_ms"] / 1000, repr(r["value"])]})
    return out


def by_gpu(table: pa.Table) -> dict[tuple[str, int], dict]:
    return {(r["node"], r["gpu_index"]): {c: r[c] for c in VALUES}
            for r in table.to_pylist()}


def fleet(nodes: int = 2, gpus: int = 2, seed: int = 0) -> pa.Table:
    rows = [{"ts": T0, "node": f"gpu{n:03d}", "gpu_index": g, "gpu_uuid": f"GPU-{n}-{g}",
             "interval_s": 15.0, "util_pct": float((n * 7 + g * 13 + seed) % 101),
             "power_w": 100.0 + n + g / 4, "energy_j": 1e6 + n, "temp_c": 40.0 + g,
             "mem_used_mib": 1024.0 * g, "sm_active_pct": 12.5, "throttle_thermal": g == 1,
             "throttle_power": False, "xid_last": 0, "ecc_dbe_volatile": n}
            for n in range(nodes) for g in range(gpus)]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["samples"])


def test_reads_a_real_prometheus_answer_as_the_query_api_does():
    """The fixture is Prometheus 2.42's /federate answer (fixtures/prometheus/README.md);
    every value agrees with the query path's reading of the same samples, and each row
    keeps the scrape's own time."""
    text = FIXTURE.read_text()
    samples, counts = read(text, pulled=datetime(2026, 11, 23, 2, 0))
    assert counts == Counter()
    assert samples.num_rows == 4
    query = read_results(as_query_results(text))[0]
    assert by_gpu(samples) == by_gpu(query)
    times = {(r["node"], r["ts"]) for r in samples.to_pylist()}
    assert times == {(r["node"], r["ts"]) for r in query.to_pylist()}
    ms = {int(m) for m in re.findall(r" (\d{13})$", text, re.M)}
    assert {int(t.replace(tzinfo=UTC).timestamp() * 1000) for _, t in times} == ms


def test_a_fleet_reads_the_same_through_federate_and_query():
    samples = fleet(3, 4)
    text = with_targets(render_dcgm(samples), MS0)
    got, counts = read(text)
    assert counts == Counter()
    assert by_gpu(got) == by_gpu(samples.set_column(
        samples.schema.get_field_index("interval_s"), "interval_s",
        pa.array([15.0] * samples.num_rows, pa.float32())))
    assert set(got["ts"].to_pylist()) == {T0}
    assert by_gpu(got) == by_gpu(read_results(as_query_results(text))[0])


def test_each_gpu_one_row_at_its_newest_time_and_untimed_lines_take_the_pull():
    texts = render_dcgm(fleet(2, 1))
    a = with_targets({"gpu000": texts["gpu000"]}, MS0)
    b = with_targets({"gpu001": texts["gpu001"]}, MS0 + 7_250)
    # one field of gpu000 from an older scrape (a second job scraping it late)
    older = a.splitlines(True)[0].replace(f" {MS0}\n", f" {MS0 - 15_000}\n")
    untimed = with_targets({"gpu002": render_dcgm(fleet(3, 1))["gpu002"]}, MS0)
    untimed = untimed.replace(f" {MS0}\n", "\n")
    got, counts = read(older + a + b + untimed, pulled=T0 + timedelta(seconds=20))
    ts = {r["node"]: r["ts"] for r in got.to_pylist()}
    assert ts == {"gpu000": T0, "gpu001": T0 + timedelta(seconds=7.25),
                  "gpu002": T0 + timedelta(seconds=20)}
    assert got.num_rows == 3 and counts == Counter()


def test_honor_labels_node_from_the_exporter_not_the_server():
    """Without Hostname the node is the host of the answer's own ``instance`` label (the
    exporter's); ``node_label`` names it as is; a series naming no node is counted."""
    text = with_targets(render_dcgm(fleet(1, 1)), MS0)
    text = text.replace('Hostname="gpu000",', "").replace("gpu000:9400", "10.1.2.3:9400")
    got, _ = read(text)
    assert got["node"].to_pylist() == ["10.1.2.3"]
    assert read(text, node_label="job")[0]["node"].to_pylist() == ["dcgm"]
    nameless = re.sub(r',instance="[^"]*"', "", text)
    got, counts = read(nameless)
    assert got.num_rows == 0 and counts[NO_NODE] == text.count("\n")


def test_label_sets_read_in_slices_read_as_one(monkeypatch):
    """Issue 17: at 100,000 GPUs the label sets are read in two slices at once; real
    exporter texts (MIG instances, Kubernetes pods, H100s) give the same rows either way."""
    fixtures = Path(__file__).parent / "fixtures" / "dcgm"
    texts = {f"n{i}": (fixtures / name).read_text() for i, name in enumerate(
        ["mig_a100_gr_active.txt", "mig_a30_issue317.txt", "h100_k8s.txt"])}
    texts |= render_dcgm(fleet(nodes=5, gpus=8))
    text = with_targets(texts, MS0)
    whole, counts = read(text)
    monkeypatch.setattr(federate, "_SPLIT_SETS", 1)
    for parts in (2, 3):
        monkeypatch.setattr(federate._label_sets_split, "__defaults__", (parts,))
        sliced, sliced_counts = read(text)
        assert sliced.to_pylist() == whole.to_pylist()
        assert sliced_counts == counts
    assert whole.num_rows > 40  # the fleet's 40 GPUs and the fixtures'


def test_a_bad_line_costs_that_line_only():
    good = with_targets(render_dcgm(fleet(2, 2)), MS0)
    lines = good.splitlines(True)
    temp = next(i for i, x in enumerate(lines) if x.startswith("DCGM_FI_DEV_GPU_TEMP{")
                and 'Hostname="gpu001"' in x and 'gpu="1"' in x)
    broken = list(lines)
    broken[temp] = broken[temp].replace(" 41.0 ", " 4x1 ").replace(" 41 ", " 4x1 ")
    broken.insert(3, "garbage line here\n")
    broken.insert(5, 'DCGM_FI_DEV_GPU_TEMP{gpu="77",Hostname="gpu009"} 50 1793620800000\n')
    broken.insert(7, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu008"} 50 99999999999999999\n')
    broken.insert(9, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="gpu000"} 5 1893456000000\n')  # 2030
    broken.append('DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="gpu001"')  # cut off
    got, counts = read("".join(broken))
    want = by_gpu(read(good)[0])
    want[("gpu001", 1)]["temp_c"] = None
    assert by_gpu(got) == want
    assert counts == Counter({"line: invalid number": 2,  # "4x1", and "line" of garbage
                              "line: truncated (no line feed after the last line)": 1,
                              GPU_INDEX: 1, BAD_TIME: 1, AHEAD: 1})


# A line the parser must survive: exposition-looking junk around the real lines.
_JUNK = st.text(st.sampled_from('DCGM_FI_DEV_GPU_TEMP{}gpu="0",Hostname=1 .e+-#\\\n\t'),
                max_size=80)


@given(junk=st.lists(_JUNK, max_size=6), where=st.lists(st.integers(0, 10_000), max_size=6))
def test_junk_lines_never_cost_good_rows(junk, where):
    """Property: any text may come back; the pull never raises, and rows of GPUs whose
    lines are intact keep their values (junk that happens to be a valid line may only add
    values to a GPU, never remove one)."""
    good = with_targets(render_dcgm(fleet(2, 1)), MS0)
    lines = good.splitlines(True)
    for j, pos in zip(junk, where, strict=False):
        lines.insert(pos % (len(lines) + 1), j if j.endswith("\n") else j + "\n")
    got, _ = read("".join(lines))
    want = by_gpu(read(good)[0])
    have = by_gpu(got)
    for key, row in want.items():
        assert key in have
        for col, v in row.items():
            if v is not None and col not in ("gpu_uuid",):
                assert have[key][col] is not None


@given(st.text(max_size=400))
def test_any_text_is_read_without_raising(text):
    """Property: whatever a server answers, the pull gives a samples table or nothing."""
    got, counts = read(text)
    assert got.schema == SCHEMAS["samples"]
    assert all(isinstance(n, int) and n > 0 for n in counts.values())


_VALUE = st.text(st.sampled_from('ab,="\\ gpu\n'), max_size=12)


@given(values=st.lists(_VALUE, min_size=1, max_size=4), gpu=st.none() | _VALUE)
def test_label_values_reads_valid_sets_exactly(values, gpu):
    """Property (issue 17's faster label search): for valid label sets whose values hold
    lookalikes (``,gpu=`` at a value's end, escaped quotes), the value of ``gpu`` is the
    one the scalar parser reads."""
    def esc(v):
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    pairs = [f'l{i}="{esc(v)}"' for i, v in enumerate(values)]
    if gpu is not None:
        pairs.insert(len(pairs) // 2, f'gpu="{esc(gpu)}"')
    raw = ",".join(pairs)
    assert label_values(pa.array([raw]), "gpu").to_pylist() == [parse_labels(raw).get("gpu")]


def test_a_value_ending_in_a_lookalike_is_not_the_label():
    raw = 'pod="a,gpu=",gpu="3"'
    assert label_values(pa.array([raw, 'pod="x,gpu="']), "gpu").to_pylist() == ["3", None]


def test_source_pulls_federate_live_and_catches_up_with_the_raw_samples():
    """A gap under federate is read as Prometheus's raw samples, at their scrape times:
    every sample once. A range query's step holds the sample before it, which the last
    pull had already stored at its own time, so it was stored twice."""
    held = HeldSamples()
    src = PrometheusSource(held, interval_s=15, resume_from=T0 + timedelta(seconds=15),
                           federate=held.federate, now=lambda: held.now, chunk_s=300)
    stored: dict[datetime, float] = {}
    events = []

    def cycle(tick: datetime) -> None:
        held.now = tick + timedelta(seconds=0.5)
        batch = dict(src.collect(tick))
        for ts, temp in zip(batch["samples"]["ts"].to_pylist(),
                            batch["samples"]["temp_c"].to_pylist(), strict=True):
            assert stored.setdefault(ts, temp) == temp  # met twice: the same sample
        events.extend(batch["events"].to_pylist())

    cycle(T0 + timedelta(seconds=30))  # a pull half a second on: sample 2, scraped since
    assert held.calls == [] and list(stored) == [held.when(2)]
    assert src.cursor == T0 + timedelta(seconds=30) and src.caught_up
    # a gap of 10 minutes: read back in 300-s chunks, then federate again
    gap = T0 + timedelta(minutes=10, seconds=15)
    cycles = 0
    while True:
        cycle(gap)
        cycles += 1
        if src.caught_up:
            break
    cycle(gap + timedelta(seconds=15))  # a pull again
    assert sorted(stored.values()) == [20.0 + k for k in range(2, 43)]  # none twice
    assert sorted(stored) == [held.when(k) for k in range(2, 43)]  # none lost
    assert cycles == 2 and "range" not in held.calls and "raw" in held.calls
    # the XID the gauge took at sample 20 is one event, at that sample's time
    assert [(e["ts"], e["code"]) for e in events] == [(held.when(20), 79)]


def _run(held: HeldSamples, src: PrometheusSource, ticks: list[datetime], late_s: float = 0.5):
    """Collect at each tick (``late_s`` after it by the wall clock; a tick named twice is
    read until caught up): the samples stored by (ts, node, gpu) and the events."""
    stored, events = {}, []
    for tick in ticks:
        while True:
            held.now = tick + timedelta(seconds=late_s)
            batch = dict(src.collect(tick))
            for r in batch["samples"].to_pylist():
                stored.setdefault((r["ts"], r["node"], r["gpu_index"]), r)
            events += [(e["ts"], e["code"]) for e in batch["events"].to_pylist()]
            if src.caught_up:
                break
    return stored, events


def test_a_gap_scraped_more_often_than_pulled_keeps_one_sample_per_step():
    """Prometheus scrapes every 15 s, gpulens pulls every 60 s (docs/scaling.md): each
    row stands for 60 s in the rollups, so a gap read back keeps per GPU the newest raw
    sample of each minute, as a pull at each tick would have; every raw sample (four a
    minute) counted the gap's minutes four times over."""
    held = HeldSamples(scrape_s=15)
    src = PrometheusSource(held, interval_s=60, resume_from=T0 + timedelta(minutes=1),
                           federate=held.federate, now=lambda: held.now, chunk_s=300)
    ticks = [T0 + timedelta(minutes=m) for m in (2, 3, 4, 20, 21, 22)]  # a gap at 20
    stored, _ = _run(held, src, ticks)
    minutes = Counter(-(-(ts - T0) // timedelta(minutes=1)) for ts, _, _ in stored)
    assert sorted(minutes) == list(range(3, 24)) and set(minutes.values()) == {1}
    raw = {held.when(k) for k in range(0, 23 * 4)}
    assert {ts for ts, _, _ in stored} <= raw  # each a sample, at its scrape time
    assert "raw" in held.calls


def test_a_gap_after_a_late_pull_does_not_report_an_old_xid_again():
    """A pull 40 s late (a first cycle, a slow one) stores the sample scraped 30 s past
    its tick; the gap after it read back from the tick the older samples too, and their
    gauge walked the XID back (79 to 31) and forward again: two more events."""
    held = HeldSamples(scrape_s=15, xid_from=13)  # XID 79 from T0 + 3:15
    src = PrometheusSource(held, interval_s=60, resume_from=T0 + timedelta(minutes=1),
                           federate=held.federate, now=lambda: held.now, chunk_s=900)
    _, before = _run(held, src, [T0 + timedelta(minutes=2)])
    _, late = _run(held, src, [T0 + timedelta(minutes=3)], late_s=40.5)
    _, gap = _run(held, src, [T0 + timedelta(minutes=10)])
    assert before + late + gap == [(held.when(14), 79)]  # the sample the late pull read


def test_a_gap_under_queries_is_read_with_range_queries_on_the_step_grid():
    held = HeldSamples()
    held.now = T0 + timedelta(minutes=10, seconds=15.5)
    src = PrometheusSource(held, interval_s=15, resume_from=T0 + timedelta(seconds=30),
                           pull="query", now=lambda: T0 + timedelta(hours=1), chunk_s=300)
    seen = []
    while True:
        seen += dict(src.collect(T0 + timedelta(minutes=10, seconds=15)))["samples"][
            "ts"].to_pylist()
        if src.caught_up:
            break
    assert set(held.calls) == {"range"}
    assert seen == [T0 + timedelta(seconds=15 * k) for k in range(3, 42)]


def test_a_server_without_federate_is_read_with_queries():
    client = QueryClient()

    def federate(selector):
        raise FederateUnsupported("http://thanos:10902/federate: HTTP 404")

    src = PrometheusSource(client, interval_s=15, federate=federate, now=lambda: T0)
    b = dict(src.collect(T0))
    assert src.pull == "query" and client.calls == ["query"] * len(FIELDS)
    assert b["samples"]["temp_c"].to_pylist() == [50.0]


def test_pull_must_be_named():
    with pytest.raises(ValueError, match="federate"):
        PrometheusSource(QueryClient(), pull="remote_read")


def test_a_404_from_the_server_turns_the_source_to_queries():
    """Over HTTP, as Thanos Query answers: /federate is 404, queries work."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from collector.prometheus import connect

    answer = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "gpu001", "gpu": "0"},
         "value": [MS0 / 1000, "55"]}]}}).encode()
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            paths.append(self.path.split("?")[0])
            ok = self.path.startswith("/api/v1/query") and "GPU_TEMP" in self.path
            body = answer if ok else b'{"status":"success","data":{"result":[]}}'
            if self.path.startswith("/federate"):
                body = b"404 page not found"
            self.send_response(404 if self.path.startswith("/federate") else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        src = PrometheusSource(connect(f"http://127.0.0.1:{server.server_address[1]}"),
                               interval_s=15, now=lambda: T0)
        b = dict(src.collect(T0))
    finally:
        server.shutdown()
        server.server_close()
    assert src.pull == "query"
    assert paths.count("/federate") >= 1 and paths.count("/api/v1/query") == len(FIELDS)
    assert b["samples"]["temp_c"].to_pylist() == [55.0]


@pytest.mark.parametrize("setting, pull", [("", "federate"), ('pull = "query"\n', "query")])
def test_serve_wires_the_pull_setting(tmp_path, setting, pull):
    from gpulens.config import load
    from gpulens.sources import build_sources
    from warehouse import Warehouse

    cfg = tmp_path / "gpulens.toml"
    cfg.write_text('[collect]\nsource = "prometheus"\n[prometheus]\nurl = "http://127.0.0.1:1"\n'
                   f"federate_workers = 2\n{setting}")
    wh = Warehouse(":memory:")
    try:
        (source,) = build_sources(load(cfg, env={}), wh, now=T0)
    finally:
        wh.close()
    assert source.pull == pull and source.federate_workers == 2
    assert (source.federate is not None) == (pull == "federate")


def test_a_restarted_service_reads_a_gap_back_after_each_gpus_newest_sample(tmp_path):
    """After a restart the source knows each GPU's newest stored sample (``gpu_latest``),
    so the step it fell in is not stored a second time from the raw samples."""
    from gpulens.config import load
    from gpulens.sources import build_sources
    from warehouse import Warehouse

    cfg = tmp_path / "gpulens.toml"
    cfg.write_text('[collect]\nsource = "prometheus"\ninterval_s = 60\n'
                   '[prometheus]\nurl = "http://127.0.0.1:1"\n')
    held = HeldSamples(scrape_s=15)
    first = PrometheusSource(held, interval_s=60, resume_from=T0 + timedelta(minutes=1),
                             federate=held.federate, now=lambda: held.now)
    wh = Warehouse(":memory:")
    try:
        held.now = T0 + timedelta(minutes=2, seconds=0.5)
        for kind, table in first.collect(T0 + timedelta(minutes=2)):
            wh.ingest(kind, table).result()  # sample 2:00.321
        (source,) = build_sources(load(cfg, env={}), wh, now=T0)
    finally:
        wh.close()
    assert source.seen.to_pylist() == [{"node": "gpu001", "gpu_index": 0,
                                        "ts": held.when(8)}]
    source.client, source.federate, source._now = held, held.federate, lambda: held.now
    stored, _ = _run(held, source, [T0 + timedelta(minutes=6)])
    # 3:45, 4:45, 5:45 and 6:00: the minute to 3:00 had its row, 2:00.321, not also 2:45
    assert sorted(ts for ts, _, _ in stored) == [held.when(4 * m - 1) for m in range(4, 7)] + [
        held.when(24)]


@pytest.mark.parametrize("gzip", [False, True])
def test_federate_asks_uncompressed_unless_told(gzip):
    """Over HTTP: Accept-Encoding identity by default (no CPU spent on gzip at either
    end), gzip with prometheus.federate_gzip; the answer is read either way."""
    import gzip as gz
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from collector.prometheus import connect

    text = with_targets(render_dcgm(fleet(1, 2)), MS0).encode()
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            enc = self.headers.get("Accept-Encoding", "")
            asked.append(enc)
            body = text if "GPU_TEMP" in self.path else b""
            self.send_response(200)
            if "gzip" in enc:
                body = gz.compress(body)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        src = PrometheusSource(connect(f"http://127.0.0.1:{server.server_address[1]}"),
                               interval_s=15, now=lambda: T0, federate_gzip=gzip)
        b = dict(src.collect(T0))
    finally:
        server.shutdown()
        server.server_close()
    assert set(asked) == {"gzip" if gzip else "identity"} and len(asked) == len(FIELDS)
    assert b["samples"]["temp_c"].to_pylist() == [40.0, 41.0]


def test_label_sets_kept_from_the_last_pull_read_each_pull_as_a_fresh_reading():
    """Issue 17: the source keeps one pull's label sets and their reading (GPU, UUID,
    node, MIG instance) for the next; every pull, whether the series stayed, changed
    or the node naming changed, gives the rows and counts a fresh reading gives."""
    fixtures = Path(__file__).parent / "fixtures" / "dcgm"
    texts = {"mig": (fixtures / "mig_a100_gr_active.txt").read_text()}
    texts |= render_dcgm(fleet(nodes=3, gpus=4))
    first = with_targets(texts, MS0)
    later = first.replace(f" {MS0}\n", f" {MS0 + 15_000}\n")
    renamed = later.replace('Hostname="gpu001"', 'Hostname="gpu001.example.org"')
    lost_gpu = later.replace('gpu="2"', 'gpu="x"')
    reordered = "".join(reversed(later.splitlines(True)))
    more = later + with_targets({"gpu009": render_dcgm(fleet(nodes=10, gpus=2))["gpu009"]},
                                MS0)
    pulls = [(first, {}), (later, {}), (first, {}), (renamed, {}), (renamed, {}),
             (renamed, {"names": NodeNames(strip_domain=True)}), (lost_gpu, {}),
             (lost_gpu, {"node_label": "job"}), (later, {}), (reordered, {}), (more, {}),
             (more, {"names": NodeNames(strip_domain=True)})]
    memo = LabelMemo()
    for text, kw in pulls:
        counts: Counter = Counter()
        lines = pull(lambda s, t=text: t, ["all"], counts=counts, memo=memo)
        samples, instances = parse_federate(lines, T0 + timedelta(seconds=30),
                                            counts=counts, memo=memo, **kw)
        want_counts: Counter = Counter()
        want = parse_federate(pull(lambda s, t=text: t, ["all"], counts=want_counts),
                              T0 + timedelta(seconds=30), counts=want_counts, **kw)
        assert samples.to_pylist() == want[0].to_pylist()
        assert instances.to_pylist() == want[1].to_pylist()
        assert counts == want_counts
    # the sets of later, first (later's labels), renamed, lost_gpu and more twice; their
    # reading where the naming stayed too
    assert (memo.reused["sets"], memo.reused["derived"]) == (6, 3)
    # read again, set by set, where the naming was the last reading's: renamed (all but
    # gpu001's 4 GPUs), reordered and more (all of later's)
    lines = parse_texts({"t": later}).filter(pc.is_in(
        pc.field("name"), pa.array([n for f in FIELDS for n in f.names])))
    n_sets = len(pc.unique(lines["labels"].combine_chunks().dictionary.take(
        lines["labels"].combine_chunks().indices)))
    assert memo.reused["per set"] == 3 * n_sets - 4


def test_the_source_keeps_the_label_sets_between_pulls():
    text = with_targets(render_dcgm(fleet(2, 2)), MS0)
    answers = {q: "".join(x for x in text.splitlines(True) if x.startswith(q + "{"))
               for q in field_queries()}  # one metric per answer, as Prometheus
    src = PrometheusSource(QueryClient(), interval_s=15, resume_from=T0,
                           federate=answers.get, now=lambda: T0 + timedelta(minutes=1))
    a = dict(src.collect(T0 + timedelta(seconds=15)))["samples"]
    b = dict(src.collect(T0 + timedelta(seconds=30)))["samples"]
    assert src.labels.reused == Counter(sets=1, derived=1,
                                        lengths=sum(map(bool, answers.values())))
    assert a.drop(["ts"]).to_pylist() == b.drop(["ts"]).to_pylist()
    assert a.num_rows == 4


@st.composite
def fleet_pulls(draw) -> list[str]:
    """Pulls of a small fleet's answer: lines moved, dropped, a host renamed, a GPU
    index or UUID changed, a node added - as a fleet changes between pulls."""
    base = with_targets(render_dcgm(fleet(nodes=3, gpus=2, seed=draw(st.integers(0, 9)))),
                        MS0).splitlines(True)
    out = ["".join(base)]
    for _ in range(draw(st.integers(1, 4))):
        lines = out[-1].splitlines(True)
        op = draw(st.sampled_from(["same", "move", "drop", "rename", "gpu", "uuid", "add"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "move":
            lines.insert(draw(st.integers(0, len(lines) - 1)), lines.pop(i))
        elif op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "rename":
            lines = [x.replace("gpu001", draw(st.sampled_from(["gpu001.a.b", "gpu007"])))
                     for x in lines]
        elif op == "gpu":
            lines[i] = re.sub(r'gpu="\d+"', draw(st.sampled_from(['gpu="5"', 'gpu="x"'])),
                              lines[i])
        elif op == "uuid":
            lines[i] = re.sub(r'UUID="[^"]*"', 'UUID="GPU-new"', lines[i])
        elif op == "add":
            lines += with_targets({"gpu009": render_dcgm(fleet(10, 1))["gpu009"]},
                                  MS0).splitlines(True)
        out.append("".join(lines))
    return out


@pytest.mark.property
@given(fleet_pulls(), st.sampled_from([{}, {"names": NodeNames(strip_domain=True)}]))
def test_property_pulls_through_the_kept_label_sets_read_as_fresh(texts, kw):
    memo = LabelMemo()
    for text in texts:
        counts: Counter = Counter()
        got = parse_federate(pull(lambda s, t=text: t, ["all"], counts=counts, memo=memo),
                             T0, counts=counts, memo=memo, **kw)
        want_counts: Counter = Counter()
        want = parse_federate(pull(lambda s, t=text: t, ["all"], counts=want_counts), T0,
                              counts=want_counts, **kw)
        assert [t.to_pylist() for t in got] == [t.to_pylist() for t in want]
        assert counts == want_counts
