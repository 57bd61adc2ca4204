"""Prometheus / Thanos as a telemetry source: one PromQL query per DCGM field per cycle.

For large fleets Prometheus scrapes the exporters and gpulens reads from it. Each cycle
asks one query per field of :data:`collector.dcgm.FIELDS` (a field with several names,
such as the renamed clock-event reasons, is one ``{__name__=~"a|b"}`` query), never one
per GPU, and folds the answers into the same wide samples rows the exporter path makes
(:func:`parse_results` is pure; tests pass literal API answers).

Catch-up: the source remembers the last time it has stored (``cursor``; at start it is
the newest sample in the warehouse). When a cycle finds a gap of more than one step -
gpulens was stopped, or Prometheus was unreachable and the service backed off - it asks
``query_range`` from the cursor on, in chunks of at most ``chunk_s`` seconds per cycle,
until it is level again, so every interval Prometheus still holds reaches the warehouse
(``max_catchup_s`` bounds how far back it looks). Steps are aligned to ``interval_s``,
so a repeated range lands on the same timestamps and the idempotent ingest skips it.

Row identity: ``node`` is the ``node_label`` label when configured, else ``Hostname`` /
``hostname``, else the host part of ``instance``; ``gpu`` and ``UUID``/``uuid`` as in
the exporter path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from collector.dcgm import FIELDS, build_samples, fill_grid, xid_events
from collector.sanitize import DropCounter, sanitize_samples
from warehouse.clock import naive_utc as _naive
from warehouse.schema import SCHEMAS

__all__ = ["PrometheusSource", "field_queries", "parse_results"]


def field_queries(selector: str = "") -> list[str]:
    """One PromQL query per field of ``FIELDS``; ``selector`` adds label matchers.

    ``selector`` is matcher text such as ``job="dcgm",cluster="a"`` (no braces).
    """
    extra = f",{selector.strip().strip('{}')}" if selector.strip().strip("{}") else ""
    out = []
    for f in FIELDS:
        if len(f.names) == 1 and not extra:
            out.append(f.names[0])
        elif len(f.names) == 1:
            out.append(f"{f.names[0]}{{{extra[1:]}}}")
        else:
            out.append(f'{{__name__=~"{"|".join(f.names)}"{extra}}}')
    return out


def _host(instance: str | None) -> str | None:
    if not instance:
        return None
    if instance.startswith("["):  # [ipv6]:port
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def parse_results(
    results: Sequence[list[dict[str, Any]]],
    *,
    interval_s: float = 15.0,
    node_label: str = "",
) -> pa.Table:
    """Samples rows from the ``data.result`` lists of the queries of :func:`field_queries`.

    ``results[j]`` answers field ``FIELDS[j]``: an instant vector (``value: [t, "v"]``)
    or a range matrix (``values: [[t, "v"], ...]``); ``t`` is Unix seconds and becomes
    the row's naive-UTC ``ts``. Series without a numeric ``gpu`` label are ignored.
    """
    rank_of = {n: r for f in FIELDS for r, n in enumerate(f.names)}
    fids: list[int] = []
    ranks: list[int] = []
    nodes: list[str] = []
    gpus: list[int] = []
    uuids: list[str | None] = []
    times: list[float] = []
    values: list[str] = []
    for fid, result in enumerate(results):
        for series in result:
            m = series.get("metric") or {}
            gpu = m.get("gpu")
            if gpu is None or not gpu.isdigit():
                continue
            node = ((node_label and m.get(node_label)) or m.get("Hostname")
                    or m.get("hostname") or _host(m.get("instance")))
            if not node:
                continue
            points = series["values"] if "values" in series else [series["value"]]
            k = len(points)
            nodes += [node] * k
            gpus += [int(gpu)] * k
            uuids += [m.get("UUID") or m.get("uuid")] * k
            fids += [fid] * k
            ranks += [rank_of.get(m.get("__name__", ""), 0)] * k
            for t, v in points:
                times.append(t)
                values.append(v)
    if not values:
        return SCHEMAS["samples"].empty_table()
    t_codes, t_uniq = pd.factorize(np.asarray(times, np.float64))
    n_codes, n_uniq = pd.factorize(pd.Series(nodes, dtype=object))
    gpu_a = np.asarray(gpus, np.int64)
    key = (t_codes.astype(np.int64) * len(n_uniq) + n_codes) * 65536 + gpu_a
    ukey, first, row = np.unique(key, return_index=True, return_inverse=True)
    value = np.asarray(values, dtype=object).astype(np.float64)
    grid = fill_grid(len(ukey), row, np.asarray(fids, np.int64), np.asarray(ranks, np.int64),
                     value)
    seconds = t_uniq[t_codes[first]]
    ts = (seconds * 1e6).round().astype("datetime64[us]")
    node_col = n_uniq[n_codes[first]]
    uuid_arr = np.asarray(uuids, dtype=object)[first]
    return build_samples(ts, list(node_col), gpu_a[first], list(uuid_arr), grid, interval_s)


def _epoch_s(ts: datetime) -> float:
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


class PrometheusSource:
    """Source ``prometheus``: DCGM fields read back from Prometheus or Thanos.

    ``client`` is a ``prometheus_api_client.PrometheusConnect`` (or anything with its
    ``custom_query(query, params)`` and ``custom_query_range(query, start_time,
    end_time, step)``). ``resume_from`` is the newest stored sample time (naive UTC),
    where catch-up starts after a restart.
    """

    name = "prometheus"

    def __init__(
        self,
        client,
        *,
        interval_s: float = 15.0,
        selector: str = "",
        node_label: str = "",
        resume_from: datetime | None = None,
        max_catchup_s: float = 86_400.0,
        chunk_s: float = 900.0,
        now: Callable[[], datetime] | None = None,
    ):
        self.client = client
        self.interval_s = interval_s  # seconds between cycles and between range steps
        self.queries = field_queries(selector)
        self.node_label = node_label
        self.cursor = _naive(resume_from) if resume_from else None
        self.max_catchup_s = max_catchup_s
        self.chunk_s = max(chunk_s, interval_s)
        self.dropped = DropCounter()
        self.xid_state: dict[tuple[str, int], int] = {}
        self.caught_up = True  # False while a gap is still being filled
        self._now = now or (lambda: datetime.now(UTC).replace(tzinfo=None))

    def window(self, ts: datetime) -> tuple[datetime, datetime] | None:
        """The [start, end] to read this cycle at tick ``ts`` (None: nothing new)."""
        ts = _naive(ts)
        step = timedelta(seconds=self.interval_s)
        if self.cursor is None:
            return ts, ts
        start = max(self.cursor + step, ts - timedelta(seconds=self.max_catchup_s))
        if start > ts:
            return None
        epoch = datetime(1970, 1, 1)
        start -= (start - epoch) % step  # align to the step grid
        if start <= self.cursor:
            start += step
        end = min(ts, start + timedelta(seconds=self.chunk_s) - step)
        return start, max(end, start)

    def fetch(self, start: datetime, end: datetime) -> list[list[dict]]:
        """Each field's ``data.result`` over [start, end] (an instant query if equal)."""
        if start == end:
            params = {"time": f"{_epoch_s(start):.3f}"}
            return [self.client.custom_query(q, params=params) for q in self.queries]
        step = f"{self.interval_s:g}s"
        return [self.client.custom_query_range(q, start_time=start.replace(tzinfo=UTC),
                                               end_time=end.replace(tzinfo=UTC), step=step)
                for q in self.queries]

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """Read the next window (the tick, or a chunk of a gap); samples and XID events."""
        win = self.window(ts)
        if win is None:
            return []
        start, end = win
        samples = parse_results(self.fetch(start, end), interval_s=self.interval_s,
                                node_label=self.node_label)
        samples, _ = sanitize_samples(samples, self._now(), counter=self.dropped,
                                      max_age_s=self.max_catchup_s + 3600)
        events = self._xid_events(samples)
        self.cursor = end
        self.caught_up = end >= _naive(ts)
        return [("samples", samples), ("events", events)]

    def _xid_events(self, samples: pa.Table) -> pa.Table:
        """XID events from the last-XID gauge, tick by tick in time order."""
        parts = []
        if samples.num_rows == 0:
            return SCHEMAS["events"].empty_table()
        for t in pc.unique(samples["ts"]).sort().to_pylist():
            rows = samples.filter(pc.equal(samples["ts"], pa.scalar(t, samples["ts"].type)))
            events, self.xid_state = xid_events(self.xid_state, rows, t)
            parts.append(events)
        return pa.concat_tables(parts)


def connect(
    url: str,
    *,
    bearer_token: str = "",
    username: str = "",
    password: str = "",
    ca_file: str = "",
    verify_tls: bool = True,
    timeout_s: float = 30.0,
):
    """A ``PrometheusConnect`` with bearer or basic auth and TLS options.

    ``ca_file`` verifies the server against that CA bundle; ``verify_tls=False`` turns
    verification off (only for testing). Large answers are fetched with POST.
    """
    import requests
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    session = requests.Session()
    session.verify = (ca_file or True) if verify_tls else False
    headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else None
    auth = (username, password) if username else None
    # One quick retry: a longer outage is the service's to back off from, not ours.
    retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[429, 502, 503, 504])
    return PrometheusConnect(url=url.rstrip("/"), headers=headers, auth=auth, retry=retry,
                             session=session, timeout=timeout_s, method="POST")
