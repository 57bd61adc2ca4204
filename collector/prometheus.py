"""Any Prometheus-API store (Prometheus, VictoriaMetrics, Thanos, Mimir) as a telemetry source.

For large fleets Prometheus scrapes the exporters and gpulens reads from it. A cycle
without a gap reads the newest samples through ``/federate`` (``pull="federate"``, the
default: the exposition text, :mod:`collector.federate`) or asks one instant query per
field of :data:`collector.dcgm.FIELDS` (``pull="query"``; a field with several names,
such as the renamed clock-event reasons, is one ``{__name__=~"a|b"}`` selector), never
one per GPU; a server without ``/federate`` (Thanos, Mimir) turns the source to queries.
Both fold into the same wide samples rows the exporter path makes (the query API's
answers are read by :mod:`collector.promjson`, which is pure; tests pass literal API
answers).

Catch-up: the source remembers the last time it has stored (``cursor``; at start it is
the newest sample in the warehouse). When a cycle finds a gap of more than one step -
gpulens was stopped, or Prometheus was unreachable and the service backed off - it reads
from the cursor on, in chunks of at most ``chunk_s`` seconds per cycle, until it is level
again, so every interval Prometheus still holds reaches the warehouse (``max_catchup_s``
bounds how far back it looks). Under ``pull="query"`` a chunk is a ``query_range`` whose
steps are aligned to ``interval_s``, as the instant queries are, so a repeated range
lands on the same timestamps and the idempotent ingest skips it. Under
``pull="federate"`` a chunk is Prometheus's raw samples (``q[span]``), at their scrape
times as the pulls store them: a step would hold the sample before it, which a pull has
already stored at its own time, so it would count twice.

Row identity: ``node`` is the ``node_label`` label when configured, else ``Hostname`` /
``hostname``, else the host part of ``instance``, mapped to scheduler names as on every
path (:mod:`collector.nodenames`); ``gpu`` and ``UUID``/``uuid`` as in the exporter
path. What is refused, and how it is counted, is listed in docs/collectors.md.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from collector.catchup import newest_seen, one_per_step
from collector.dcgm import (
    FIELDS,
    xid_events,
)
from collector.federate import (
    FederateUnsupported,
    LabelMemo,
    parse_federate,
)
from collector.federate import federate_via as _federate_via
from collector.federate import pull as _federate_pull
from collector.nodenames import NodeNames
from collector.promjson import read_results
from collector.sanitize import DropCounter, sanitize_samples
from gpulens.settings import default
from warehouse.clock import naive_utc as _naive
from warehouse.schema import SCHEMAS

log = logging.getLogger(__name__)

__all__ = ["PrometheusSource", "field_queries"]


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


def _epoch_s(ts: datetime) -> float:
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


class PrometheusSource:
    """Source ``prometheus``: DCGM fields read back from Prometheus or Thanos.

    ``client`` is a ``prometheus_api_client.PrometheusConnect`` (or anything with its
    ``custom_query(query, params)`` and ``custom_query_range(query, start_time,
    end_time, step)``). ``resume_from`` is the newest stored sample time (naive UTC),
    where catch-up starts after a restart; ``seen`` each GPU's (``node``, ``gpu_index``,
    ``ts``), which a gap read back under federate starts after (:func:`one_per_step`).

    ``pull`` says how a cycle without a gap reads: ``"federate"`` GETs ``/federate``
    (:mod:`collector.federate`; ``federate(selector) -> text or bytes`` is the transport, by
    default over ``client``'s session), ``"query"`` asks one instant query per field.
    A server without ``/federate`` (Thanos, Mimir) turns the source to ``"query"`` for
    good, logged once. A gap is filled with ``query_range`` steps under ``"query"`` and
    with raw samples at their scrape times under ``"federate"`` (:meth:`fetch_raw`).
    """

    name = "prometheus"

    def __init__(
        self,
        client,
        *,
        interval_s: float = default("collect.interval_s"),
        selector: str = "",
        node_label: str = "",
        names: NodeNames | None = None,
        resume_from: datetime | None = None,
        seen: pa.Table | None = None,
        max_catchup_s: float = 86_400.0,
        chunk_s: float = 900.0,
        now: Callable[[], datetime] | None = None,
        pull: str = default("prometheus.pull"),
        federate: Callable[[str], str | bytes] | None = None,
        federate_workers: int = default("prometheus.federate_workers"),
        federate_gzip: bool = default("prometheus.federate_gzip"),
    ):
        if pull not in ("federate", "query"):
            raise ValueError(f"pull must be 'federate' or 'query', not {pull!r}")
        self.client = client
        self.pull = pull
        self.federate = federate or (_federate_via(client, gzip=federate_gzip)
                                     if pull == "federate" else None)
        self.federate_workers = federate_workers
        self.labels = LabelMemo()  # one pull's label sets, reused by the next (issue 17)
        self.interval_s = interval_s  # seconds between cycles and between range steps
        self.queries = field_queries(selector)
        self.node_label = node_label
        self.names = names or NodeNames()
        self.cursor = _naive(resume_from) if resume_from else None
        self.max_catchup_s = max_catchup_s
        self.chunk_s = max(chunk_s, interval_s)
        self.dropped = DropCounter()
        self.xid_state: dict[tuple[str, int], int] = {}
        self.caught_up = True  # False while a gap is still being filled
        #: Under federate, each GPU's newest stored sample time (node, gpu_index, ts): a
        #: gap's raw samples start after it (:func:`one_per_step`)
        self.seen: pa.Table | None = seen
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

    def fetch_raw(self, after: datetime, end: datetime) -> list[list[dict]]:
        """Each field's raw samples in (``after``, ``end``] (to the millisecond), at their
        scrape times: the range selector ``q[span]`` asked at ``end``, which Prometheus
        answers unaligned. Both ends are rounded once, so chunks meet exactly."""
        end_ms = round(_epoch_s(end) * 1000)
        span_ms = max(1, end_ms - round(_epoch_s(after) * 1000))
        params = {"time": f"{end_ms // 1000}.{end_ms % 1000:03d}"}
        return [self.client.custom_query(f"{q}[{span_ms}ms]", params=params)
                for q in self.queries]

    def _fetch_gap(self, start: datetime, end: datetime, ts: datetime) -> list[list[dict]]:
        """A chunk of a gap under federate: Prometheus's raw samples, at their scrape times
        as the pulls store them (a step of ``query_range`` would hold the sample before
        it, which a pull may have stored at its own time). From the step before the
        chunk's first, which the last pull may have read past; the last chunk up to now,
        as a pull would read, for a scrape since the tick. :func:`one_per_step` then
        keeps what pulls at each tick would have stored."""
        after = start - timedelta(seconds=self.interval_s)
        upto = max(end, self._now()) if end >= _naive(ts) else end
        return self.fetch_raw(after, upto)

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """Read the next window (the tick, or a chunk of a gap); samples and XID events."""
        win = self.window(ts)
        if win is None:
            return []
        start, end = win
        counts: Counter = Counter()
        # a gap's last step is read back too: a pull would miss the samples before it
        live = end - start < timedelta(seconds=self.interval_s) and self.caught_up
        federated = live and self.pull == "federate" and self._federate(end, counts)
        if federated:
            samples, instances = federated
        else:
            raw = self.pull == "federate"
            answers = self._fetch_gap(start, end, ts) if raw else self.fetch(start, end)
            samples, instances = read_results(
                answers, interval_s=self.interval_s,
                node_label=self.node_label, names=self.names, counts=counts)
            if raw:
                samples, instances = one_per_step(samples, instances, self.interval_s,
                                                  self.seen)
        self.dropped.add(counts)
        now = self._now()
        samples, _ = sanitize_samples(samples, now, counter=self.dropped,
                                      max_age_s=self.max_catchup_s + 3600)
        instances, _ = sanitize_samples(instances, now, counter=self.dropped,
                                        max_age_s=self.max_catchup_s + 3600)
        events = self._xid_events(samples)
        if self.pull == "federate" and samples.num_rows:
            self.seen = newest_seen(self.seen, samples)
        self.cursor = end
        self.caught_up = end >= _naive(ts)
        return [("samples", samples), ("mig_samples", instances), ("events", events)]

    def _federate(self, pulled: datetime, counts: Counter) -> tuple[pa.Table, pa.Table] | None:
        """Samples and MIG rows of one ``/federate`` pull; None where the server has no
        ``/federate`` (the source turns to queries, logged once)."""
        try:
            lines = _federate_pull(self.federate, self.queries, workers=self.federate_workers,
                                   counts=counts, memo=self.labels)
        except FederateUnsupported as exc:
            log.warning("prometheus: %s; reading with queries from now on", exc)
            self.pull = "query"
            return None
        return parse_federate(lines, pulled, interval_s=self.interval_s,
                              node_label=self.node_label, names=self.names, counts=counts,
                              memo=self.labels)

    def _xid_events(self, samples: pa.Table) -> pa.Table:
        """XID events from the last-XID gauge, each GPU's samples oldest first, each event
        at its sample's time (a pull's scrape time, a range step, or a raw sample's)."""
        if samples.num_rows == 0:
            return SCHEMAS["events"].empty_table()
        order = pc.sort_indices(samples, sort_keys=[("ts", "ascending")])  # stable
        events, self.xid_state = xid_events(self.xid_state, samples.take(order), None)
        return events


def connect(
    url: str,
    *,
    bearer_token: str = "",
    username: str = "",
    password: str = "",
    ca_file: str = "",
    verify_tls: bool = True,
    timeout_s: float = default("prometheus.timeout_s"),
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
