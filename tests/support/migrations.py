"""A warehouse as an older gpulens left it: the migrations before one, applied and
recorded as :func:`warehouse.migrate.migrate` does, so a test can fill it and then
migrate it to now."""

from __future__ import annotations

import duckdb

from warehouse.migrate import available, current_version


def migrated_before(con: duckdb.DuckDBPyConnection, name: str) -> int:
    """Apply to ``con`` every migration before the one named ``name``; returns that
    migration's version."""
    ours = next(m.version for m in available() if m.name == name)
    current_version(con)  # creates schema_migrations
    for mig in available()[:ours - 1]:
        con.execute(mig.sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)",
                    [mig.version, mig.name])
    return ours
