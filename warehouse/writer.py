"""The single writer: one thread owns the write connection; others queue work for it.

DuckDB allows one writing process; inside it, serialising writes through one thread
keeps transactions short and ordered. ``submit(fn)`` returns a Future that resolves
with ``fn(con)``'s result after ``fn`` returned, i.e. after its transaction committed:
a resolved ingest Future is an acknowledgement that the batch is durable.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import duckdb

log = logging.getLogger(__name__)

_STOP = object()


class WriterClosed(RuntimeError):
    """Work was submitted after the writer was closed."""


class Writer:
    """A queue and the one thread that runs writes on its connection, in order."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, max_queue: int = 256):
        self._con = con
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gpulens-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[duckdb.DuckDBPyConnection], Any]) -> Future:
        """Queue ``fn(con)`` for the writer thread. Blocks while the queue is full."""
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise WriterClosed("the warehouse writer is closed; no more writes are accepted")
        self._queue.put((fn, fut))
        return fut

    def pending(self) -> int:
        """Work items queued and not yet started."""
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued item, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put((_STOP, None))
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            fn, fut = self._queue.get()
            if fn is _STOP:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(self._con))
            except BaseException as exc:  # handed to the submitter, never kills the writer
                log.debug("write failed: %s", exc)
                fut.set_exception(exc)
