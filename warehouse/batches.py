"""Normalising ingest batches to the warehouse's column contract (no SQL here).

A batch arrives as a ``pyarrow.Table`` or a ``pandas.DataFrame``. It leaves as a
``pyarrow.Table`` with exactly the kind's schema: missing nullable columns filled with
NULL, types cast, zone-aware timestamps converted to naive UTC. Bad input raises
``BatchError`` naming the kind, the column and what is expected.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.schema import KEYS, SCHEMAS


class BatchError(ValueError):
    """A batch does not fit its kind's column contract."""


def normalise(kind: str, batch) -> pa.Table:
    """Return ``batch`` as a table of exactly ``SCHEMAS[kind]``."""
    if kind not in SCHEMAS:
        raise BatchError(f"unknown batch kind {kind!r}; expected one of {sorted(SCHEMAS)}")
    schema = SCHEMAS[kind]
    table = _to_arrow(kind, batch)
    unknown = [c for c in table.column_names if schema.get_field_index(c) < 0]
    if unknown:
        raise BatchError(
            f"{kind} batch has unknown column(s) {unknown}; expected columns of {schema.names}"
        )
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(_cast(kind, field, table.column(field.name)))
        else:
            columns.append(pa.nulls(table.num_rows, type=field.type))
    out = pa.Table.from_arrays(columns, schema=schema)
    for key in KEYS[kind]:
        if kind == "events" and key == "gpu_index":
            continue  # node-wide events have no GPU
        if out.column(key).null_count:
            raise BatchError(f"{kind} batch has NULL in key column {key!r}; every row needs one")
    return out


def _to_arrow(kind: str, batch) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(batch, pd.DataFrame):
        return pa.Table.from_pandas(batch, preserve_index=False)
    raise BatchError(
        f"{kind} batch is a {type(batch).__name__}; pass a pyarrow.Table or pandas.DataFrame"
    )


def _cast(kind: str, field: pa.Field, column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type) and column.type.tz is not None:
        column = pc.cast(column, pa.timestamp(column.type.unit, tz="UTC"))
        column = pa.chunked_array(
            [c.view(pa.timestamp(column.type.unit)) for c in column.chunks],
            type=pa.timestamp(column.type.unit),
        )
    if column.type == field.type:
        return column
    try:
        return pc.cast(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BatchError(
            f"{kind} batch column {field.name!r} has type {column.type}, "
            f"which cannot be read as {field.type}: {exc}"
        ) from None
