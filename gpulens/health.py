"""What /healthz reports: per source its last success, last error, lag and skipped
ticks; the history backfill's progress."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from gpulens.settings import default

STALE_TICKS = 3  # a source is stale after this many collection intervals without success


@dataclass
class SourceHealth:
    last_success: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None
    last_duration_s: float | None = None  # seconds the last cycle took
    rows: int = 0  # rows delivered in the last successful cycle
    skipped_ticks: int = 0  # ticks not collected because a cycle ran past them
    last_skipped_at: datetime | None = None


@dataclass
class Health:
    """Thread-safe record of the service's sources and background work."""

    sources: dict[str, SourceHealth] = field(default_factory=dict)
    backfill: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def success(self, name: str, at: datetime, duration_s: float, rows: int) -> None:
        with self._lock:
            h = self.sources.setdefault(name, SourceHealth())
            h.last_success, h.last_duration_s, h.rows = at, duration_s, rows

    def error(self, name: str, at: datetime, message: str) -> None:
        with self._lock:
            h = self.sources.setdefault(name, SourceHealth())
            h.last_error, h.last_error_at = message, at

    def skipped(self, name: str, at: datetime, ticks: int) -> None:
        """``ticks`` collection ticks of source ``name`` were skipped (the cycle before
        ran more than a whole interval past them)."""
        with self._lock:
            h = self.sources.setdefault(name, SourceHealth())
            h.skipped_ticks += ticks
            h.last_skipped_at = at

    def set_backfill(self, **state) -> None:
        with self._lock:
            self.backfill.update(state)

    def report(self, now: datetime, stale_after_s: float | dict[str, float]) -> dict:
        """The /healthz document (JSON-ready). ``status`` is ok, degraded or starting:
        degraded when a source has no success within ``stale_after_s`` seconds (one
        number, or one per source name; a source not in it: the largest) (that
        source's own ``status`` says so; the others go on) or the history backfill
        failed. ``failing``: the source's latest cycle failed."""
        if isinstance(stale_after_s, dict):
            per_source, stale_after_s = stale_after_s, max(
                stale_after_s.values(),
                default=STALE_TICKS * default("collect.interval_s"))
        else:
            per_source = {}
        with self._lock:
            sources = {}
            status = "ok" if self.sources else "starting"
            for name, h in self.sources.items():
                lag = None if h.last_success is None else (now - h.last_success).total_seconds()
                stale = lag is None or lag > per_source.get(name, stale_after_s)
                if stale:
                    status = "degraded"
                sources[name] = {
                    "status": "degraded" if stale else "ok",
                    "failing": h.last_error_at is not None and (
                        h.last_success is None or h.last_error_at >= h.last_success),
                    "last_success": _iso(h.last_success),
                    "last_error": h.last_error,
                    "last_error_at": _iso(h.last_error_at),
                    "lag_s": None if lag is None else round(lag, 3),
                    "last_cycle_s": h.last_duration_s,
                    "rows": h.rows,
                    "skipped_ticks": h.skipped_ticks,
                    "last_skipped_at": _iso(h.last_skipped_at),
                }
            if self.backfill.get("state") == "failed":
                status = "degraded"
            return {"status": status, "sources": sources, "backfill": dict(self.backfill)}


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat() + "Z"
