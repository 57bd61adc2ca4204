"""Scrape dcgm-exporter endpoints directly: concurrent HTTP, then the bulk parser.

Transport only: :func:`fetch_all` GETs every target's ``/metrics`` concurrently from a
thread pool over one requests session (collector/http.py), each with a timeout;
the texts then go through :class:`collector.dcgm.DcgmCollector` (the vectorised parser)
in one call. One bad thing costs one thing (issue 12): a bad line costs that line, a
bad value that value (NULL), both counted per reason in ``source.dropped``; a target
that times out, refuses, answers non-200 or yields no GPU row is down in
``source.status`` with the reason (both shown in /healthz); the others are stored.
Only when every target fails does ``collect`` raise, so the service backs the source
off and shows the error in /healthz.

``gpulens agent`` serves the same format from NVML, so a node without dcgm-exporter is
scraped the same way.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import requests

from collector.dcgm import DcgmCollector
from collector.file_sd import Target, TargetFile
from collector.http import session
from collector.nodenames import NodeNames
from collector.sanitize import DropCounter, sanitize_samples
from gpulens.settings import default

__all__ = ["DcgmScrapeSource", "Fetched", "TargetStatus", "fetch_all"]

HEADERS = {"User-Agent": "gpulens-scraper", "Accept": "text/plain;version=0.0.4",
           "Accept-Encoding": "gzip"}
DEFAULT_TIMEOUT_S: float = default("dcgm.timeout_s")  # seconds
DEFAULT_WORKERS: int = default("dcgm.workers")


@dataclass(frozen=True)
class Fetched:
    """The outcome of one GET: ``text`` on success, else ``error``; ``duration_s`` s."""

    target: Target
    text: str | None
    error: str | None
    duration_s: float


@dataclass
class TargetStatus:
    """Per-target state shown by the source (``source.status[key]``)."""

    url: str
    up: bool = False
    last_success: datetime | None = None
    last_error: str | None = None
    duration_s: float | None = None  # seconds the last scrape took


def _reason(exc: requests.RequestException) -> str:
    """``Kind: cause`` of a failed GET, without requests' wrapping ("Max retries ...")."""
    cause = exc.args[0] if exc.args else exc
    cause = getattr(cause, "reason", None) or cause
    return f"{type(exc).__name__}: {cause}"


def _fetch(http: requests.Session, target: Target, timeout_s: float) -> Fetched:
    """GET one target; connecting and each read wait ``timeout_s`` seconds at most."""
    started = time.perf_counter()
    try:
        resp = http.get(target.url, timeout=timeout_s)
    except requests.RequestException as exc:
        return Fetched(target, None, _reason(exc), time.perf_counter() - started)
    took = time.perf_counter() - started
    if resp.status_code != 200:
        return Fetched(target, None, f"HTTP {resp.status_code}", took)
    return Fetched(target, resp.content.decode("utf-8", "replace"), None, took)


def fetch_all(
    targets: list[Target],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int = DEFAULT_WORKERS,
    http: requests.Session | None = None,
) -> list[Fetched]:
    """GET every target concurrently; each finishes within ``timeout_s`` seconds."""
    if not targets:
        return []
    http = http or session(hosts=workers, headers=HEADERS)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as ex:
        return list(ex.map(lambda t: _fetch(http, t, timeout_s), targets))


class DcgmScrapeSource:
    """Source ``dcgm``: scrape dcgm-exporter (or ``gpulens agent``) endpoints."""

    def __init__(
        self,
        targets: str,
        *,
        interval_s: float = default("collect.interval_s"),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: int = DEFAULT_WORKERS,
        ca_file: str | None = None,
        name: str = "dcgm",
        names: NodeNames | None = None,
        now=None,
    ):
        self.name = name
        self.interval_s = interval_s  # seconds between scrapes
        self.timeout_s = timeout_s
        self.workers = workers
        self.target_file = TargetFile(targets)
        self.dcgm = DcgmCollector(interval_s, names)
        self.dropped = DropCounter()
        self.status: dict[str, TargetStatus] = {}
        self._http = session(hosts=workers, ca_file=ca_file, headers=HEADERS)
        self._now = now or (lambda: datetime.now(UTC).replace(tzinfo=None))

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """Scrape every target once; samples and XID events stamped ``ts``."""
        targets = self.target_file.targets()
        if not targets:
            raise RuntimeError(f"{self.name}: no scrape targets configured")
        fetched = fetch_all(targets, timeout_s=self.timeout_s, workers=self.workers,
                            http=self._http)
        texts = {f.target.key: f.text for f in fetched if f.text is not None}
        nodes = {f.target.key: f.target.node for f in fetched if f.target.node}
        result = self.dcgm.collect(texts, ts, nodes)
        self.dropped.add(result.dropped)
        errors = {f.target.key: f.error for f in fetched if f.error} | result.errors
        now = self._now()
        for f in fetched:
            st = self.status.setdefault(f.target.key, TargetStatus(f.target.url))
            st.duration_s = f.duration_s
            if f.target.key in errors:
                st.up, st.last_error = False, errors[f.target.key]
            else:
                st.up, st.last_success = True, now
        if len(errors) == len(targets):
            first = next(iter(errors.items()))
            raise RuntimeError(
                f"all {len(targets)} targets failed; {first[0]}: {first[1]}")
        samples, _ = sanitize_samples(result.samples, now, counter=self.dropped)
        instances, _ = sanitize_samples(result.instances, now, counter=self.dropped)
        return [("samples", samples), ("mig_samples", instances), ("events", result.events)]

