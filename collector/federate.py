"""Prometheus's ``/federate`` as the live pull: current samples in the exposition text format.

``GET /federate?match[]=<selector>`` answers with the newest sample of every matching
series, in the text format dcgm-exporter itself speaks, read from its raw bytes by
:mod:`collector.federate_text` (promtext's rows, faster) - far cheaper than decoding the
query API's JSON (docs/performance.md has the measured figures). The query API stays
for catch-up and history (range queries, :mod:`collector.prometheus`).

Semantics, as a federating Prometheus with ``honor_labels: true`` would read it: the
answer's own labels win - ``instance`` and ``job`` are the scraped exporter's, never the
federated server's, so a node falls back to the exporter's host, not Prometheus's - and
each sample keeps the timestamp the answer carries (the scrape time, ms), so one scrape
read twice is one row (the ingest skips a stored ``(ts, node, gpu_index)``). A line
without a timestamp takes the pull's time. One row per GPU per pull: its fields'
newest time, values folded as on the exporter path (:func:`collector.dcgm.fill_grid`).

Transport: one request per DCGM field (the selectors of
:func:`collector.prometheus.field_queries`), a few at a time, each answer read in its
worker thread as it arrives (:func:`collector.federate_text.scan`: numpy and pyarrow
release the GIL, so reading overlaps fetching and uses both cores), then the label sets
of all answers are deduplicated and checked once (:func:`collector.federate_text.assemble`).
A :class:`collector.federate_text.LabelMemo` kept by the source from pull to pull spares
the next pull of the same series most of that work, and the reading of the sets
(:func:`parse_federate`), with the same rows (issue 17).
Small answers also stay under VictoriaMetrics' ``-search.maxFederateSeries``
(1,000,000 series per request by default). Thanos Query and Mimir have no ``/federate``:
a 404 or 405 raises :class:`FederateUnsupported`, and the source falls back to queries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pyarrow as pa

from collector.dcgm import (
    DCGM_MAX_NUM_DEVICES,
    FIELDS,
    GPU_INDEX,
    _label_sets,  # the exporter path's per-label-set reading (gpu, UUID, host, MIG)
    build_samples,
    fill_grid,
    instance_rows,
)
from collector.federate_text import LabelMemo, assemble, scan
from collector.nodenames import NodeNames, host_of
from collector.promtext import label_values
from gpulens.settings import default
from warehouse.clock import naive_utc
from warehouse.schema import SCHEMAS

__all__ = ["AHEAD", "BAD_TIME", "NO_NODE", "FederateUnsupported", "LabelMemo",
           "federate_via", "parse_federate", "pull"]

NO_NODE = "series: no node (no Hostname, hostname or instance label)"
BAD_TIME = "series: time not a Unix time"
AHEAD = "series: time after the pull"
_MAX_EPOCH_MS = 10**14  # 1970 to 5138, as the query path accepts
_SPLIT_SETS = 20_000  # label sets from which they are read in parallel
_FID = {n: i for i, f in enumerate(FIELDS) for n in f.names}
_RANK = {n: r for f in FIELDS for r, n in enumerate(f.names)}


class FederateUnsupported(RuntimeError):
    """The server has no ``/federate`` endpoint (Thanos Query, Mimir, Cortex)."""


def federate_via(client, *, timeout_s: float | None = None,
                 gzip: bool = default("prometheus.federate_gzip")
                 ) -> Callable[[str], bytes]:
    """A GET of ``/federate`` for one selector over ``client``'s HTTP session.

    ``client`` is a ``prometheus_api_client.PrometheusConnect`` (as made by
    :func:`collector.prometheus.connect`): its session, TLS settings, headers and auth are
    reused, so the pull authenticates as the queries do. ``gzip`` False asks for the
    answer uncompressed: Prometheus then spends no CPU compressing it and gpulens none
    inflating it (4,096 GPUs from a real Prometheus: 1.3-1.4 s less per pull), at many
    times the bytes on the wire (32x for the benchmark's text). Returns the answer's
    body (bytes: :func:`collector.federate_text.scan` reads them undecoded); raises
    :class:`FederateUnsupported` on 404/405, ``requests.HTTPError`` on
    another non-200.
    """
    session, url = client._session, client.url.rstrip("/") + "/federate"
    timeout = timeout_s if timeout_s is not None else getattr(client, "_timeout", None)
    headers = {**(client.headers or {}), "Accept-Encoding": "gzip" if gzip else "identity"}

    def get(selector: str) -> bytes:
        # stream, then one read: requests' .content gathers 10-KB chunks, which cost
        # ~0.3 s of CPU per 100 MB (issue 17: 412 MB per pull at 100,000 GPUs)
        with session.get(url, params={"match[]": selector}, headers=headers,
                         auth=client.auth, timeout=timeout, stream=True) as resp:
            if resp.status_code in (404, 405):
                raise FederateUnsupported(f"{url}: HTTP {resp.status_code} (no /federate "
                                          "endpoint; set prometheus.pull = \"query\")")
            resp.raise_for_status()
            return resp.raw.read(decode_content=True)

    return get


def pull(get: Callable[[str], str | bytes], selectors: Sequence[str], *,
         workers: int = default("prometheus.federate_workers"),
         counts: Counter | None = None, memo: LabelMemo | None = None) -> pa.Table:
    """Every selector's ``/federate`` answer (``get(selector)`` -> text or bytes), parsed.

    Requests run ``workers`` at a time; each answer is read where it arrived
    (:func:`collector.federate_text.scan`), then all are assembled: the rows
    :func:`collector.promtext.parse_texts_lenient` gives, a bad line costing that line,
    counted in ``counts`` as ``"line: <why>"``. Returns the lines,
    :data:`collector.promtext.SCHEMA`, in selector order. Any request's failure raises
    (the whole pull failed). ``memo``, kept from pull to pull, spares deduplicating
    the label sets again where they are the previous pull's (:class:`LabelMemo`).
    """
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(selectors)))) as ex:
        answers = list(ex.map(lambda sel: scan(sel, get(sel), memo), selectors))
    return assemble(answers, counts, memo)


def _label_sets_split(uniq: pa.Array, parts: int = 2) -> dict[str, object]:
    """:func:`collector.dcgm._label_sets` of ``uniq`` read in ``parts`` slices at once:
    its regexes release the GIL, so on two cores 100,000 GPUs' sets take about half
    the time (issue 17)."""
    if parts < 2 or len(uniq) < _SPLIT_SETS:
        return _label_sets(uniq)
    bounds = np.linspace(0, len(uniq), parts + 1).astype(int)
    with ThreadPoolExecutor(max_workers=parts) as ex:
        done = list(ex.map(_label_sets, [uniq.slice(a, b - a)
                                         for a, b in zip(bounds[:-1], bounds[1:], strict=True)]))
    return {k: (np.concatenate([d[k] for d in done]) if isinstance(done[0][k], np.ndarray)
                else [x for d in done for x in d[k]]) for k in done[0]}


def _node_per_set(uniq: pa.Array, host: list, node_label: str, names: NodeNames
                  ) -> list[str | None]:
    """Each label set's node: ``node_label`` as is, else ``Hostname``/``hostname``, else
    the host of ``instance``, mapped by ``names`` (each distinct host once)."""
    hosts = pd.Series(host, dtype=object)
    missing = hosts.isna() | (hosts == "")
    if missing.any():
        instance = pd.Series(label_values(uniq, "instance").to_pylist(), dtype=object)
        hosts = hosts.where(~missing, instance.map(
            {i: host_of(i) for i in instance[missing].dropna().unique()}))
    distinct = hosts.dropna().unique()
    nodes = hosts.map({h: names(h) for h in distinct if h})
    if node_label:
        given = pd.Series(label_values(uniq, node_label).to_pylist(), dtype=object)
        nodes = given.where(given.notna() & (given != ""), nodes)
    return nodes.where(nodes.notna() & (nodes != ""), None).tolist()


def _read_sets(labels: pa.Array, relevant: np.ndarray, node_label: str, names: NodeNames,
               memo: LabelMemo) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, pd.Index]:
    """The ``relevant`` label sets of ``labels`` read: each set's index among them
    (-1 where not relevant), their :func:`collector.dcgm._label_sets` (lists as object
    arrays), and each one's node as a code into the distinct nodes (-1 where none).
    Sets ``memo`` read last time (the same naming) are not read again."""
    uniq = labels if relevant.all() else labels.filter(pa.array(relevant))  # no copy kept
    set_of = np.full(len(relevant), -1, np.int64)
    set_of[relevant] = np.arange(len(uniq))

    def read(some: pa.Array) -> dict[str, np.ndarray]:
        sets = _label_sets_split(some)
        node = _node_per_set(some, sets["host"], node_label, names)
        return {k: np.array(v, object) if isinstance(v, list) else v
                for k, v in (sets | {"node": node}).items()}

    sets = memo.per_set(uniq, (node_label, names.strip_domain, names.regex, names.replace),
                        read)
    codes, node_uniq = pd.factorize(pd.Series(sets["node"], dtype=object))  # None -> -1
    return set_of, sets, codes, node_uniq


def parse_federate(
    lines: pa.Table,
    pulled: datetime,
    *,
    interval_s: float = default("collect.interval_s"),
    node_label: str = "",
    names: NodeNames | None = None,
    counts: Counter | None = None,
    max_skew_s: float = 300.0,
    memo: LabelMemo | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Samples rows and MIG instance rows (``mig_samples``) from parsed ``/federate``
    lines (:data:`collector.promtext.SCHEMA`, e.g. from :func:`pull`).

    ``memo`` (the one :func:`pull` was given) keeps the reading of the label sets
    (GPU, UUID, node, MIG instance: 0.65 s of CPU at 100,000 GPUs) while the next
    pull's sets are the same, in content and order.

    ``pulled`` is the pull's time (naive UTC), the ``ts`` of lines without a timestamp.
    One row per ``(node, gpu_index)``, stamped with the newest timestamp of its lines.
    Lines of other metrics, and series without a ``gpu`` label (NVSwitch, CPU), are
    ignored; a ``gpu`` label that is no index 0-31 costs its line (counted under
    :data:`collector.dcgm.GPU_INDEX`), as does a series naming no node
    (:data:`NO_NODE`), a time that is no Unix time (:data:`BAD_TIME`) or more than
    ``max_skew_s`` seconds after ``pulled`` (:data:`AHEAD`); blank and impossible values
    are NULL (counted as on the exporter path). Node names as
    :func:`collector.promjson.read_results` gives them.
    """
    counts = Counter() if counts is None else counts
    names = names or NodeNames()
    empty = SCHEMAS["samples"].empty_table(), SCHEMAS["mig_samples"].empty_table()
    if lines.num_rows == 0:
        return empty
    name = lines["name"].combine_chunks()
    labels = lines["labels"].combine_chunks()
    dict_names = name.dictionary.to_pylist()
    fid = np.array([_FID.get(n, -1) for n in dict_names], np.int64)[name.indices.to_numpy()]
    rank = np.array([_RANK.get(n, 0) for n in dict_names], np.int64)[name.indices.to_numpy()]
    lab = labels.indices.to_numpy()
    # Per label set (few: one per GPU, repeated by every field), then spread to lines.
    relevant = np.zeros(len(labels.dictionary), bool)
    relevant[lab[fid >= 0]] = True
    if not relevant.any():
        return empty
    key = (relevant.tobytes(), node_label, names.strip_domain, names.regex, names.replace)
    memo = memo or LabelMemo()
    set_of, sets, codes, node_uniq = memo.derived(
        labels.dictionary, key, lambda: _read_sets(labels.dictionary, relevant, node_label,
                                                   names, memo))
    s = set_of[lab]
    fid_ok = (fid >= 0) & (s >= 0)
    s = np.where(fid_ok, s, 0)
    refused = fid_ok & sets["refused"][s]
    if refused.any():
        counts[GPU_INDEX] += int(refused.sum())
    gpu = sets["gpu"][s]
    nodeless = fid_ok & (gpu >= 0) & (codes[s] < 0)
    if nodeless.any():
        counts[NO_NODE] += int(nodeless.sum())
    stamp = round(naive_utc(pulled).replace(tzinfo=UTC).timestamp() * 1000)
    t_ms = lines["timestamp_ms"].combine_chunks()
    if t_ms.null_count:
        t_ms = t_ms.fill_null(stamp)
    t_ms = t_ms.to_numpy()
    keep = fid_ok & (gpu >= 0) & ~nodeless
    bad_time = keep & ((t_ms < 0) | (t_ms >= _MAX_EPOCH_MS))
    if bad_time.any():
        counts[BAD_TIME] += int(bad_time.sum())
        keep &= ~bad_time
    # A row is stamped with its newest line: one line from the future would carry the
    # whole row out of the plausible range (collector.sanitize), so it costs itself.
    ahead = keep & (t_ms > stamp + max_skew_s * 1000)
    if ahead.any():
        counts[AHEAD] += int(ahead.sum())
        keep &= ~ahead
    if not keep.any():
        return empty
    s, fid, rank, t_ms = s[keep], fid[keep], rank[keep], t_ms[keep]
    value = lines["value"].to_numpy()[keep]
    # Rows: (node, gpu) per label set, so the per-line work is an index lookup.
    set_key = np.where((codes >= 0) & (sets["gpu"] >= 0),
                       codes * DCGM_MAX_NUM_DEVICES + sets["gpu"], -1)
    ukey, set_row = np.unique(set_key, return_inverse=True)
    set_row = set_row.reshape(-1)
    row = set_row[s]
    present = np.bincount(row, minlength=len(ukey)) > 0  # keys that kept a line
    renumber = np.cumsum(present) - 1
    row, set_row, ukey = renumber[row], np.where(present[set_row], renumber[set_row], -1), \
        ukey[present]
    nrows = len(ukey)
    first_set = np.full(nrows, len(set_row), np.int64)  # each row's first label set
    mine = set_row >= 0
    np.minimum.at(first_set, set_row[mine], np.flatnonzero(mine))
    newest = np.full(nrows, np.iinfo(np.int64).min)
    np.maximum.at(newest, row, t_ms)
    ts = newest.astype("datetime64[ms]").astype("datetime64[us]")
    grid = fill_grid(nrows, row, fid, rank, value, inst=sets["inst"][s],
                     weight=sets["weight"][s], slices=sets["slices"][first_set],
                     counts=counts)
    node = list(node_uniq[ukey // DCGM_MAX_NUM_DEVICES])
    gpu_row = (ukey % DCGM_MAX_NUM_DEVICES).astype(np.int16)
    uuid = sets["uuid"][first_set].tolist()
    samples = build_samples(ts, node, gpu_row, uuid, grid, interval_s)
    instances = instance_rows(ts, node, gpu_row, row, fid, sets["inst"][s], value,
                              sets["profile"][s])
    return samples, instances
