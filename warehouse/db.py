"""Database helpers every warehouse module shares: transactions, SQL templates, data files.

- :func:`transaction`: ``with transaction(con): ...`` commits when the block ends and
  rolls back (then re-raises) when it raises.
- :func:`fill`: the one way SQL text is composed. A template is a plain string with
  ``{name}`` markers; ``fill(template, name=fragment)`` puts trusted fragments (table and
  column names from this package's allow-lists, other templates) at those markers and
  leaves every other brace alone, so DuckDB's struct and map literals (``{'a': 1}``)
  survive. ``str.format`` and f-strings are not used on SQL: both read every brace.
  Values never go through ``fill``; they travel as parameters (``$name`` / ``?``).
- :func:`shipped` and :func:`read_data_csv`: the CSV files shipped in
  ``warehouse/data/`` (``#`` comment lines name their sources).
- :func:`write_frame`: an upsert over a pandas frame in one transaction.
- :func:`own_cursor`: a cursor of its own on a reader's connection, in UTC.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

_MARKER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@contextmanager
def transaction(con) -> Iterator:
    """BEGIN on ``con``; COMMIT when the block ends, ROLLBACK and re-raise when it raises
    (any exception, KeyboardInterrupt included)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextmanager
def own_cursor(cur) -> Iterator:
    """A cursor of its own on ``cur``'s database, in UTC as ``Warehouse.reader``'s, closed
    when the block ends: for a view registered for one query function, or reads in one
    transaction (``cur`` may hold an unfinished result, and keeps its own state)."""
    own = cur.cursor()
    try:
        own.execute("SET TimeZone = 'UTC'")
        yield own
    finally:
        own.close()


def fill(template: str, **fragments: str) -> str:
    """``template`` with each ``{name}`` marker whose name is given replaced by its
    fragment; markers not given stay for a later ``fill``, other braces are untouched.
    Raises KeyError naming a fragment the template has no marker for (a typo)."""
    found = set(_MARKER.findall(template))
    unknown = set(fragments) - found
    if unknown:
        raise KeyError(f"SQL template has no marker {sorted(unknown)}; it has {sorted(found)}")

    def put(m: re.Match) -> str:
        name = m.group(1)
        return str(fragments[name]) if name in fragments else m.group(0)

    return _MARKER.sub(put, template)


def names(columns) -> str:
    """``a, b, c``: a column list for SQL from names this package declares."""
    return ", ".join(columns)


def insert_sql(table: str, columns, tail: str = "") -> str:
    """``INSERT INTO table (columns) VALUES (?, ...)`` plus ``tail`` (an ON CONFLICT
    clause), for ``executemany`` over rows in the order of ``columns``."""
    return fill("INSERT INTO {table} ({columns}) VALUES ({marks}){tail}", table=table,
                columns=names(columns), marks=names("?" for _ in columns),
                tail=f" {tail}" if tail else "")


def update_from_excluded(columns) -> str:
    """``a = excluded.a, ...``: the SET list of an upsert that takes the new row's values."""
    return names(fill("{c} = excluded.{c}", c=c) for c in columns)


@lru_cache(maxsize=8)
def shipped(name: str) -> str:
    """The text of ``warehouse/data/<name>``."""
    return resources.files("warehouse").joinpath("data", name).read_text()


def streamed_frame(cur, sql: str, params=None) -> pd.DataFrame:
    """``cur.execute(sql, params).df()``, fetched 32,768 rows at a time: the same frame
    (DuckDB's own conversion, chunk by chunk) without DuckDB's whole result held beside
    it. A text column NULL throughout a chunk comes from it as ``object``; it takes the
    type the other chunks gave, as ``.df()`` does. For a large read in the writer's
    refreshes: an hour of the multi-node runs' minutes at 24,576 GPUs (2.3 M rows, a 183
    MiB frame) took the process ~690 MiB above its base through ``.df()``, ~375 MiB so
    (issue 17)."""
    result = cur.execute(sql, params)
    parts = [result.fetch_df_chunk(_CHUNK_VECTORS)]
    while len(parts[-1]):
        parts.append(result.fetch_df_chunk(_CHUNK_VECTORS))
    if len(parts) <= 2:  # the rows in one chunk or none: the frame as it came
        return parts[0]
    parts.pop()
    frame = pd.concat(parts, ignore_index=True)
    generic = np.dtype(object)
    for col in frame.columns[frame.dtypes == generic]:
        typed = next((p[col].dtype for p in parts if p[col].dtype != generic), None)
        if typed is not None:
            frame[col] = frame[col].astype(typed)
    return frame


#: DuckDB vectors (2,048 rows each) per chunk of :func:`streamed_frame`.
_CHUNK_VECTORS = 16


def read_data_csv(text: str) -> pd.DataFrame:
    """A data CSV as strings (empty cells stay ``""``), skipping blank and ``#`` lines."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return pd.read_csv(io.StringIO("\n".join(lines)), dtype=str, keep_default_na=False)


def write_frame(con, sql: str, name: str, frame: pd.DataFrame) -> int:
    """Run ``sql`` (an upsert reading the view ``name``) over ``frame`` in one
    transaction on the writer's connection; return the rows in the frame."""
    con.register(name, frame)
    try:
        with transaction(con):
            con.execute(sql)
    finally:
        con.unregister(name)
    return len(frame)
