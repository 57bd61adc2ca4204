"""The archive of weekly reports: rows of a ``reports`` table, or files in a directory.

The report generator is a later issue; until it creates its ``reports`` table (or writes
files), both functions return empty frames and the Reports page says so. Only the
columns in :data:`COLUMNS` that the table has are read (names from this fixed list,
never from input).
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from warehouse.db import fill, names

COLUMNS = ("week_start", "week_end", "generated_at", "title", "path", "format",
           "size_bytes")
SUFFIXES = (".html", ".pdf", ".md")
_WEEK = re.compile(r"(\d{4})-W(\d{2})")

_TABLE_COLUMNS = """
SELECT column_name FROM information_schema.columns
WHERE table_name = 'reports' AND table_schema = current_schema()
"""


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def list_reports(cur, *, limit: int = 200) -> pd.DataFrame:
    """Rows of the ``reports`` table newest first, in :data:`COLUMNS` (missing ones NULL)."""
    present = {r[0] for r in cur.execute(_TABLE_COLUMNS).fetchall()}
    known = [c for c in COLUMNS if c in present]
    if not known:
        return _empty()
    order = next((c for c in ("week_start", "generated_at") if c in present), known[0])
    sql = fill("SELECT {columns} FROM reports ORDER BY {order} DESC NULLS LAST LIMIT $limit",
               columns=names(known), order=order)  # names from COLUMNS only
    df = cur.execute(sql, {"limit": limit}).df()
    for c in COLUMNS:
        if c not in df:
            df[c] = None
    return df[list(COLUMNS)]


def list_report_files(directory: str | os.PathLike | None, *, limit: int = 200) -> pd.DataFrame:
    """Report files (``*.html``, ``*.pdf``, ``*.md``) in ``directory``, newest first.

    A name holding an ISO week (``2026-W47``) gives ``week_start``; ``generated_at`` is
    the file's modification time (naive UTC). A missing directory gives an empty frame.
    """
    if not directory or not Path(directory).is_dir():
        return _empty()
    rows = []
    for path in Path(directory).iterdir():
        if path.suffix.lower() not in SUFFIXES or not path.is_file():
            continue
        stat = path.stat()
        week = _WEEK.search(path.name)
        rows.append({
            "week_start": (datetime.fromisocalendar(int(week[1]), int(week[2]), 1)
                           if week else None),
            "week_end": None,
            "generated_at": datetime.fromtimestamp(stat.st_mtime, UTC).replace(tzinfo=None),
            "title": path.stem, "path": str(path), "format": path.suffix.lstrip(".").lower(),
            "size_bytes": stat.st_size,
        })
    if not rows:
        return _empty()
    df = pd.DataFrame(rows).sort_values("generated_at", ascending=False)
    return df.head(limit).reset_index(drop=True)[list(COLUMNS)]
