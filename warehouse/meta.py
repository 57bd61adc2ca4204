"""Key-value facts the service keeps in the warehouse (table ``meta``)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

#: the simulator profile a simulated warehouse was made with (issue 16): written by
#: ``gpulens simulate`` and by the simulated source's first start
SIMULATOR_PROFILE_KEY = "simulator.profile"


def get(cur: duckdb.DuckDBPyConnection, key: str) -> str | None:
    """The stored value of ``key``, or None."""
    row = cur.execute("SELECT value FROM meta WHERE key = $1", [key]).fetchone()
    return None if row is None else row[0]


def put(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    """Store ``value`` under ``key`` (writer thread only)."""
    con.execute(
        "INSERT INTO meta VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def latest_sample_ts(cur: duckdb.DuckDBPyConnection):
    """Timestamp of the newest sample ever stored, or None on an empty warehouse: also
    ``gpu_latest``'s, which retention does not touch, so a source silent for longer
    than ``retention.raw_days`` still resumes where it stopped (issue 17)."""
    return cur.execute("SELECT greatest((SELECT max(ts) FROM gpu_samples), "
                       "(SELECT max(ts) FROM gpu_latest))").fetchone()[0]


def latest_per_gpu(cur: duckdb.DuckDBPyConnection):
    """Each GPU's newest stored sample time, an Arrow table (``node``, ``gpu_index``,
    ``ts``) from ``gpu_latest``: where a Prometheus source's catch-up starts per GPU after
    a restart (collector/catchup.py:one_per_step)."""
    got = cur.execute("SELECT node, gpu_index, ts FROM gpu_latest").fetchnumpy()
    return pa.table({"node": pa.array(got["node"], pa.string()),
                     "gpu_index": pa.array(got["gpu_index"], pa.int16()),
                     "ts": pa.array(got["ts"], pa.timestamp("us"))})


def memory_limit(cur: duckdb.DuckDBPyConnection) -> str:
    """DuckDB's memory_limit of the warehouse as DuckDB prints it, e.g. '1.0 GiB'."""
    return cur.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def simulator_profile(cur: duckdb.DuckDBPyConnection) -> str | None:
    """The simulator profile the warehouse was simulated with (``demo``, ``realistic``),
    None for a warehouse of a real cluster."""
    return get(cur, SIMULATOR_PROFILE_KEY)
