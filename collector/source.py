"""What the service expects of a source (the simulator, a scraper, a Slurm reader...)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class Source(Protocol):
    """A source of batches, collected on its own schedule.

    ``collect(ts)`` returns ``(kind, table)`` pairs for ``Warehouse.ingest`` (kinds of
    ``warehouse.schema.SCHEMAS``). It may raise: the service records the error, backs the
    source off, and keeps every other source running. Optional extras the service uses
    when present: ``topology() -> dict[kind, table]`` (written once at start),
    ``history(ingest, start, end, progress=..., on_chunk=...)`` and ``live_start`` (bulk
    history; ``on_chunk(ts)`` says every row before ``ts`` is written, so the service
    can persist its progress and resume after a kill). For /healthz: ``dropped``
    (collector.sanitize.DropCounter: what the source refused, per reason), ``status``
    (target -> collector.scrape.TargetStatus) or ``targets_down`` (target -> reason).
    """

    name: str
    interval_s: float  # seconds between collection cycles

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]: ...
