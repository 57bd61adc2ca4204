"""What the console says while the service writes history: a line when it starts, one per
day of history written, and one when it is done (INFO log lines, sentences).

    progress = HistoryProgress(missing)        # [(start, end), ...], naive UTC
    progress.written_until(range_index, ts)    # every row before ts of that range is stored
    progress.done()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

log = logging.getLogger("gpulens.history")

DAY_S = 86400.0


def _days(seconds: float) -> str:
    days = seconds / DAY_S
    return "1 day" if days == 1 else f"{days:.3g} days"


class HistoryProgress:
    """Counts the seconds of history written across ``ranges`` and logs each whole day."""

    def __init__(self, ranges: list[tuple[datetime, datetime]], *,
                 clock: Callable[[], float] = time.monotonic, logger=log):
        self.ranges = list(ranges)
        self.total_s = sum((b - a).total_seconds() for a, b in self.ranges)
        self.clock, self.log = clock, logger
        self.started = clock()
        self.days_said = 0
        self.log.info("writing %s of history (%s to %s UTC) in the background; the "
                      "dashboard fills in as it goes", _days(self.total_s),
                      _fmt(self.ranges[0][0]), _fmt(self.ranges[-1][1]))

    def written_until(self, index: int, ts: datetime) -> None:
        """Every row of ``ranges[index]`` before ``ts`` is stored (earlier ranges whole)."""
        done = sum((b - a).total_seconds() for a, b in self.ranges[:index])
        a, b = self.ranges[index]
        done += (min(max(ts, a), b) - a).total_seconds()
        whole = int(done // DAY_S)
        if whole > self.days_said:
            self.days_said = whole
            self.log.info("history: %d of %s written (up to %s UTC)", whole,
                          _days(self.total_s), _fmt(ts))

    def done(self) -> None:
        self.log.info("history done: %s written in %.0f s; its failures are classified "
                      "and every page shows it", _days(self.total_s),
                      self.clock() - self.started)


def _fmt(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M")
