"""Numbered schema migrations, applied in order and recorded.

Migrations are the files ``warehouse/migrations/NNN_name.sql``. Each is applied once,
inside a transaction, and recorded in ``schema_migrations``. A database whose recorded
version is newer than the newest migration this code knows was written by a newer
gpulens: it is refused, never altered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import duckdb

from warehouse.db import transaction

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


class SchemaTooNew(RuntimeError):
    """The database was written by a newer version of gpulens."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    """Every migration shipped with this version of gpulens, in order."""
    found = []
    for entry in resources.files("warehouse").joinpath("migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..N without gaps, found {versions}")
    return found


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The newest migration recorded in the database (0 for an empty database)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP)"
    )
    # fetchall, not fetchone: a result left unread keeps the connection's read transaction
    # open, and an old open reader makes every later CHECKPOINT fail
    rows = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()
    return int(rows[0][0])


def migrate(con: duckdb.DuckDBPyConnection, path: str = "") -> list[int]:
    """Apply the missing migrations; return the versions applied.

    Raises SchemaTooNew, naming the file, if the database is newer than this code.
    """
    migrations = available()
    have = current_version(con)
    newest = migrations[-1].version if migrations else 0
    if have > newest:
        raise SchemaTooNew(
            f"database {path or '(memory)'} has schema version {have}, but this gpulens "
            f"knows versions up to {newest}: it was written by a newer gpulens. "
            "Upgrade gpulens, or point --db at another file; the database was not changed."
        )
    applied = []
    for mig in migrations:
        if mig.version <= have:
            continue
        with transaction(con):
            con.execute(mig.sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)",
                [mig.version, mig.name],
            )
        applied.append(mig.version)
    return applied
