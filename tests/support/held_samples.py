"""Fake Prometheus query clients over known samples, for the source's pull and catch-up
tests: ``QueryClient`` (one GPU on a 15-s grid) and ``HeldSamples`` (raw samples at their
scrape times, with raw-range, ``query_range`` and ``/federate`` semantics)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 2, 12, 0)  # naive UTC
MS0 = 1793620800000  # T0 in Unix ms


class QueryClient:
    """Answers instant and range queries with one GPU sampled every 15 s."""

    def __init__(self):
        self.calls: list[str] = []

    def _series(self, times):
        return [{"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "gpu001",
                            "gpu": "0", "UUID": "GPU-1"},
                 "values": [[t, "50"] for t in times]}]

    def custom_query(self, query, params=None):
        self.calls.append("query")
        return self._series([float(params["time"])]) if "GPU_TEMP" in query else []

    def custom_query_range(self, query, start_time, end_time, step):
        self.calls.append("range")
        if "GPU_TEMP" not in query:
            return []
        s, e = int(start_time.timestamp()), int(end_time.timestamp())
        return self._series(list(range(s, e + 1, 15)))


class HeldSamples:
    """Prometheus over the raw samples of one GPU, scraped 0.321 s past each ``scrape_s``
    seconds: a range selector asked at a time answers the raw samples in its window, a
    range query each step's latest sample at or before it (5-minute lookback),
    ``/federate`` the newest sample at ``now``. Sample k has temperature 20 + k % 80 and
    XID 31, then 79 from sample ``xid_from`` on."""

    OFFSET_S = 0.321

    def __init__(self, scrape_s: float = 15.0, xid_from: int = 20):
        self.now = T0
        self.calls: list[str] = []
        self.scrape_s, self.xid_from = scrape_s, xid_from

    def times(self, upto: float) -> list[tuple[int, float]]:
        """(k, Unix seconds) of the samples scraped by ``upto`` (and by now)."""
        out, k = [], 0
        upto = min(upto, self.now.replace(tzinfo=UTC).timestamp())
        while (t := MS0 / 1000 + self.scrape_s * k + self.OFFSET_S) <= upto:
            out.append((k, t))
            k += 1
        return out

    def when(self, k: int) -> datetime:
        return T0 + timedelta(seconds=self.scrape_s * k + self.OFFSET_S)

    def value(self, query: str, k: int) -> int | None:
        if "GPU_TEMP" in query:
            return 20 + k % 80
        return (79 if k >= self.xid_from else 31) if "XID_ERRORS" in query else None

    def _series(self, query, points):
        name = "DCGM_FI_DEV_GPU_TEMP" if "GPU_TEMP" in query else "DCGM_FI_DEV_XID_ERRORS"
        return [{"metric": {"__name__": name, "Hostname": "gpu001", "gpu": "0",
                            "UUID": "GPU-1"},
                 "values": [[t, str(v)] for t, v in points]}] if points else []

    def _latest(self, query, at):
        held = [(t, self.value(query, k)) for k, t in self.times(at) if t > at - 300]
        return held[-1] if held and held[-1][1] is not None else None

    def custom_query(self, query, params=None):
        at = float(params["time"])
        window = re.search(r"\[(\d+)ms\]$", query)
        self.calls.append("raw" if window else "query")
        if self.value(query, 0) is None:
            return []
        if window:
            span = int(window.group(1)) / 1000
            return self._series(query, [(t, self.value(query, k)) for k, t in self.times(at)
                                        if t > at - span])
        latest = self._latest(query, at)
        return self._series(query, [(at, latest[1])] if latest else [])

    def custom_query_range(self, query, start_time, end_time, step):
        self.calls.append("range")
        s, e = start_time.timestamp(), end_time.timestamp()
        steps = [s + 15 * i for i in range(int((e - s) // 15) + 1)]
        return self._series(query, [(t, latest[1]) for t in steps
                                    if (latest := self._latest(query, t))])

    def federate(self, selector):
        latest = self._latest(selector, self.now.replace(tzinfo=UTC).timestamp())
        if latest is None:
            return ""
        name = "DCGM_FI_DEV_GPU_TEMP" if "GPU_TEMP" in selector else "DCGM_FI_DEV_XID_ERRORS"
        return (f'{name}{{Hostname="gpu001",gpu="0",UUID="GPU-1",job="dcgm"}} '
                f"{latest[1]} {round(latest[0] * 1000)}\n")
