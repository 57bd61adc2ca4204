"""The warehouse: one DuckDB file, one writer thread, a read cursor per thread.

    wh = Warehouse("gpulens.duckdb")
    wh.ingest("samples", table).result()      # acknowledged = committed
    df = queries.fleet_now(wh.reader(), now)  # any thread
    wh.close()                                # flush, checkpoint, close
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path

import duckdb

from warehouse import rollups
from warehouse.batches import normalise
from warehouse.db import fill
from warehouse.ingest import write_batch
from warehouse.migrate import migrate
from warehouse.writer import Writer

log = logging.getLogger(__name__)


#: Block size of a warehouse file this process creates (bytes; DuckDB's default is 256
#: KiB, and an existing file keeps the size it was made with). Every table, tier and
#: column segment rounds up to whole blocks, and a checkpoint frees a rewritten row
#: group's blocks for the next one: on 128 GPUs x 7 days (issue 17, docs/performance.md)
#: the file was 43.7 MiB with 64 KiB blocks against 50.0 MiB with 256 KiB (small
#: tables 1.1 against 3.8 MiB, the 1-minute tier 21.3 against 23.2), and scans of the
#: tiers took the same CPU time.
BLOCK_SIZE_B = 64 * 1024


def _create(path: str) -> None:
    """Create an empty warehouse file with :data:`BLOCK_SIZE_B` blocks. Done by a
    connection of its own: the service's connections then open the file with DuckDB's
    default configuration, so another connection to it in this process is not refused
    for a different one."""
    duckdb.connect(path, config={"default_block_size": str(BLOCK_SIZE_B)}).close()


class WarehouseLocked(RuntimeError):
    """Another process holds the database file open."""


class Warehouse:
    """The gpulens warehouse on one DuckDB file (``":memory:"`` for tests)."""

    def __init__(self, path: str | os.PathLike = ":memory:", *, threads: int | None = None,
                 memory_limit_mb: float | None = None):
        """``memory_limit_mb``: DuckDB's memory_limit in MiB (None or 0: DuckDB's default,
        80 % of RAM). Set with SET, not the connect config, so that another connection to
        the same file in this process is not refused for a different configuration."""
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        config = {"threads": threads} if threads else {}
        try:
            if self.path != ":memory:" and not Path(self.path).exists():
                _create(self.path)
            self._root = duckdb.connect(self.path, config=config)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise WarehouseLocked(
                    f"database {self.path} is open in another process (a running "
                    "`gpulens serve`?). Stop that process, use its HTTP API, or pass "
                    "another --db."
                ) from None
            raise
        self._root.execute("SET TimeZone = 'UTC'")
        # Large appends (a bulk batch over one row group, ~123k rows) go through the WAL
        # instead of being written to the file before commit: DuckDB rewrote those
        # optimistic blocks at the checkpoint and kept the old ones as free blocks, a
        # third of the file after a bulk load (issue 17: 48.8 against 37 MiB for 2 days
        # of 128 GPUs; ingest +25 %, rollup -25 %; docs/performance.md).
        self._root.execute("SET enable_optimistic_write = false")
        if memory_limit_mb:
            self._root.execute(fill("SET memory_limit = '{mb}MiB'",
                                    mb=f"{float(memory_limit_mb):g}"))
        self._migrate()
        self._cursor_lock = threading.Lock()
        self._writer = Writer(self._root.cursor())
        self._closed = False

    def _migrate(self) -> None:
        """Apply the schema migrations on a cursor of their own, closed at once.

        A result left unread keeps its connection's read transaction open, and the root
        connection runs nothing after this: such an old reader made every later
        CHECKPOINT fail ("other write transactions active") once rows had been updated
        in place, and the WAL grew without bound. Closing the cursor ends it.
        """
        cur = self._root.cursor()
        try:
            cur.execute("SET TimeZone = 'UTC'")
            migrate(cur, self.path)
        finally:
            cur.close()

    # -- writes -----------------------------------------------------------------------
    def ingest(self, kind: str, batch, *, urgent: bool = False) -> Future:
        """Queue a columnar batch of ``kind`` (see warehouse.schema) for writing.

        The batch is checked here, in the caller's thread: a bad batch raises
        ``BatchError`` at once and nothing is written. The returned Future resolves to
        the number of rows in the batch once its transaction has committed (an upserted
        batch of more than ~100,000 rows: its transactions, one per slice of whole jobs,
        ``warehouse.ingest.upsert_slices``; if one fails, the Future raises and the
        slices before it stay written).
        Delivering the same batch again changes nothing. ``urgent``: a live collection
        batch, written before queued maintenance and between the steps of running
        maintenance (see warehouse/writer.py).
        """
        table = normalise(kind, batch)
        return self._writer.submit(lambda con: write_batch(con, kind, table), urgent=urgent)

    def ingest_all(self, batches) -> int:
        """Ingest a mapping of kind -> batch and wait for all; return the rows written."""
        futures = [self.ingest(kind, batch) for kind, batch in batches.items()]
        return sum(f.result() for f in futures)

    def write(self, fn, *, urgent: bool = False) -> Future:
        """Run ``fn(con)`` on the writer thread. ``urgent``: paging-path work (alert state,
        the outbox) that must not wait behind a long maintenance job, run like a live
        collection batch (see ``warehouse.writer``)."""
        return self._writer.submit(fn, urgent=urgent)

    def rollup(self) -> Future:
        """Roll pending raw samples up into the 1-minute and 1-hour tiers."""
        return self._writer.submit(rollups.rollup)

    def apply_retention(self, now: datetime, keep: rollups.Retention,
                        keep_raw_from: datetime | None = None) -> Future:
        """Delete rows older than each tier's retention (raw samples from
        ``keep_raw_from`` on stay: :func:`warehouse.rollups.apply_retention`)."""
        return self._writer.submit(
            lambda con: rollups.apply_retention(con, now, keep, keep_raw_from))

    def checkpoint(self) -> Future:
        """Fold the write-ahead log into the database file."""
        return self._writer.submit(lambda con: con.execute("CHECKPOINT"))

    def pending_writes(self) -> int:
        """Writes queued and not yet started."""
        return self._writer.pending()

    def urgent_waits(self) -> dict:
        """How long live collection batches waited for the writer: the latest and the
        longest wait (seconds) and the most maintenance steps one waited through."""
        w = self._writer
        return {"last_s": round(w.urgent_wait_last_s, 3), "max_s": round(w.urgent_wait_max_s, 3),
                "max_steps": w.urgent_steps_max}

    # -- reads ------------------------------------------------------------------------
    def reader(self) -> duckdb.DuckDBPyConnection:
        """A fresh read cursor: use it for one query function, then drop it.

        It sees every committed write. A cursor keeps its last result, and with it a
        transaction, open until its next statement; a long-lived cursor per web thread
        would so block DuckDB's checkpoints (and let the WAL grow). A fresh cursor costs
        about 0.1 ms, and dropping it ends its transaction.
        """
        if self._closed:
            raise RuntimeError(f"the warehouse {self.path} is closed")
        with self._cursor_lock:
            cur = self._root.cursor()
        cur.execute("SET TimeZone = 'UTC'")
        return cur

    def size_bytes(self) -> int:
        """Bytes on disk of the database file and its write-ahead log."""
        if self.path == ":memory:":
            return 0
        return sum(
            os.path.getsize(p) for p in (self.path, self.path + ".wal") if os.path.exists(p)
        )

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        """Finish queued writes, checkpoint, and close the file."""
        if self._closed:
            return
        self._closed = True
        self._checkpoint_at_close()
        self._writer.close()
        self._root.close()

    def _checkpoint_at_close(self, patience_s: float = 5.0) -> None:
        """Fold the WAL into the file, waiting briefly for readers still in a query.

        DuckDB refuses a checkpoint while another transaction is active (a web request
        racing the shutdown). Those end within milliseconds, so retry for a while; if
        one does not, skip: every acknowledged write is in the WAL, replayed at the
        next open. (FORCE CHECKPOINT would wait without limit.)
        """
        deadline = time.monotonic() + patience_s
        while True:
            try:
                self.checkpoint().result()
                return
            except duckdb.TransactionException as exc:
                if time.monotonic() > deadline:
                    log.warning("checkpoint at close skipped (the WAL keeps every write): %s",
                                exc)
                    return
                time.sleep(0.05)
            except Exception as exc:  # closing must go on: the WAL still holds every commit
                log.warning("checkpoint at close failed: %s", exc)
                return

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
