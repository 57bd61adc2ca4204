"""The single writer: one thread owns the write connection; others queue work for it.

DuckDB allows one writing process; inside it, serialising writes through one thread
keeps transactions short and ordered. ``submit(fn)`` returns a Future that resolves
with ``fn(con)``'s result after ``fn`` returned, i.e. after its transaction committed:
a resolved ingest Future is an acknowledgement that the batch is durable.

Live collection must keep its rhythm while the writer is busy with analytics, rollups
or a history backfill (issue 12). So work is queued ``urgent`` (a live collection batch)
or not (everything else): the writer takes urgent work first, in order, and long
maintenance work calls :func:`yield_to_urgent` between its transactions, where the
writer runs the urgent work queued meanwhile. A collection batch so waits for at most one
step of maintenance (one slice of a refresh), never for a whole refresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import duckdb

from gpulens.memory import release_free_memory

log = logging.getLogger(__name__)

#: A step of maintenance this long (seconds) or longer is followed by
#: :func:`~gpulens.memory.release_free_memory`, so the next step, or the live cycle,
#: does not start on what it freed (issue 17).
LONG_WORK_S = 1.0

_local = threading.local()  # .writer: the Writer whose thread this is


class WriterClosed(RuntimeError):
    """Work was submitted after the writer was closed."""


def yield_to_urgent() -> None:
    """Run the urgent work queued now, if called on a writer thread; elsewhere nothing.

    Long maintenance work (rollups, the analytics refresh) calls this between two of its
    transactions, never inside one: the urgent work runs on the same connection.
    """
    writer = getattr(_local, "writer", None)
    if writer is not None:
        writer._step_done()


class Writer:
    """A queue and the one thread that runs writes on its connection: urgent work first,
    each class in the order submitted."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, max_queue: int = 256):
        self._con = con
        self._max_queue = max_queue
        self._urgent: deque = deque()
        self._normal: deque = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._stop = False
        self._in_urgent = False  # running urgent work: no nested yields
        self._steps = 0  # maintenance steps finished (items and yield points)
        self.urgent_wait_max_s = 0.0  # longest wait of urgent work, seconds
        self.urgent_wait_last_s = 0.0  # wait of the latest urgent work, seconds
        self.urgent_steps_max = 0  # most maintenance steps urgent work waited through
        self._thread = threading.Thread(target=self._run, name="gpulens-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[duckdb.DuckDBPyConnection], Any], *,
               urgent: bool = False) -> Future:
        """Queue ``fn(con)`` for the writer thread. Blocks while the queue is full
        (``max_queue`` items). ``urgent``: live collection, run before other work; only
        urgent work counts against its bound, so a queue full of maintenance or bulk
        imports never holds a live batch back."""
        fut: Future = Future()
        with self._cond:
            while not self._closed and (len(self._urgent) if urgent else self.pending()) \
                    >= self._max_queue:
                self._cond.wait()
            if self._closed:
                raise WriterClosed("the warehouse writer is closed; no more writes are accepted")
            item = [fn, fut, time.monotonic(), self._steps]  # a list: run, it drops fn
            (self._urgent if urgent else self._normal).append(item)
            self._cond.notify_all()
        return fut

    def pending(self) -> int:
        """Work items queued and not yet started."""
        return len(self._urgent) + len(self._normal)

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued item, then stop the thread."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _take(self, urgent_only: bool):
        """The next item to run, or None (urgent_only: none urgent queued; else: stopping
        with an empty queue)."""
        with self._cond:
            while True:
                queue = self._urgent or (None if urgent_only else self._normal)
                if queue:
                    item = queue.popleft()
                    self._cond.notify_all()  # room in the queue
                    return item, queue is self._urgent
                if urgent_only or self._stop:
                    return None
                self._cond.wait()

    def _execute(self, item: list, urgent: bool) -> None:
        fn, fut, queued_at, steps_at = item
        item[0] = None  # the work's closure (an ingest's table) is freed once it returned
        if urgent:
            waited = time.monotonic() - queued_at
            self.urgent_wait_last_s = waited
            self.urgent_wait_max_s = max(self.urgent_wait_max_s, waited)
            self.urgent_steps_max = max(self.urgent_steps_max, self._steps - steps_at)
        if not fut.set_running_or_notify_cancel():
            return
        try:
            result = fn(self._con)
            fn = None  # before the submitter wakes: its next step finds the closure freed
            fut.set_result(result)
        except BaseException as exc:  # handed to the submitter, never kills the writer
            log.debug("write failed: %s", exc)
            fut.set_exception(exc)

    def _step_done(self) -> None:
        """A step of maintenance work ended: run the urgent work waiting."""
        if self._in_urgent:
            return
        self._steps += 1
        self._in_urgent = True
        try:
            while (taken := self._take(urgent_only=True)) is not None:
                self._execute(*taken)
        finally:
            self._in_urgent = False

    def _run(self) -> None:
        _local.writer = self
        while (taken := self._take(urgent_only=False)) is not None:
            item, urgent = taken
            if urgent:
                self._in_urgent = True
            started = time.monotonic()
            try:
                self._execute(item, urgent)
            finally:
                self._in_urgent = False
            if not urgent:
                self._steps += 1
                if time.monotonic() - started >= LONG_WORK_S:
                    release_free_memory()
