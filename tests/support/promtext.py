"""Reading the vectorised parser's output row by row, for tests (slow; no production
code needs it, so it lives here and not in collector/promtext.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from collector.promtext import parse_labels


def to_dicts(table: pa.Table) -> Iterator[tuple[str, str, dict[str, str], float, int | None]]:
    """Rows of a parsed table as ``(target, name, labels dict, value, timestamp_ms)``."""
    for row in table.to_pylist():
        yield (row["target"], row["name"], parse_labels(row["labels"]), row["value"],
               row["timestamp_ms"])
