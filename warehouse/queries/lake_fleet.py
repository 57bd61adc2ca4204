"""The fleet view's reading of the lake (issue 18): each cluster's Parquet as a warehouse.

The lake is what ``gpulens export parquet`` and the service's lake export write
(warehouse/export.py): ``LAKE/<table>/cluster=NAME/date=YYYY-MM-DD/*.parquet``, and
``LAKE/<table>/cluster=NAME/<table>.parquet`` for the topology tables.

:func:`open_cluster` gives one cluster an in-memory DuckDB with the warehouse's schema
(the migrations applied), in which every table the lake holds for that cluster is a
view over its files (``read_parquet`` with ``hive_partitioning``) with the warehouse's
columns and types: a column an older export lacks reads NULL, so does a value that does
not convert to the column's type, and a table the lake lacks stays empty. The
single-cluster query functions (``warehouse.queries.*``) then run on it unchanged, so
a figure of the fleet view is computed by the very function its single-cluster page
calls (one definition per figure; docs/scaling.md). Analytics settings are not in the
lake: the fleet view applies its own (``Options``).

DuckDB cannot prepare a view ("this type of statement can't be prepared"), so a view's
file pattern is a quoted SQL string literal, as export.py's COPY targets are; a cluster
name must pass :func:`gpulens.settings.core.cluster_name_ok` before it is put in a
pattern. Every other statement here takes parameters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pandas as pd

from gpulens.settings.core import cluster_name_ok
from warehouse import run_nodes
from warehouse.analytics import Options
from warehouse.db import fill, names
from warehouse.export import PARTITIONED, WHOLE
from warehouse.migrate import migrate
from warehouse.queries import energy as qe
from warehouse.queries import failures as qf
from warehouse.queries import goodput as qg
from warehouse.queries import weekly as qw

#: Tables the fleet view's figures cannot do without: a cluster with activity always has
#: rows in them, so a lake without them was exported with fewer tables (``lake.tables``)
#: and the figures reading them would count nothing. (``checkpoints``, ``node_power``,
#: ``pue`` and ``carbon_intensity`` are read too, but may rightly be empty.)
REQUIRED_TABLES = ("gpu_samples_1h", "gpu_energy_1h", "jobs", "job_runs", "allocations",
                   "nodes", "gpus")
#: Partition columns the hive layout adds to every row; never warehouse columns.
HIVE_COLUMNS = ("cluster", "date")
#: How every file set is read: partition values as text (a cluster named ``2026`` stays
#: a name), files of older exports with fewer columns by name.
READ_OPTIONS = "hive_partitioning = true, hive_types_autocast = false, union_by_name = true"

_CLUSTERS_SQL = """
SELECT DISTINCT regexp_extract(file, '[/\\\\]cluster=([^/\\\\]+)[/\\\\]', 1) AS cluster
FROM glob($pattern) ORDER BY 1
"""

_TABLES_SQL = """
SELECT DISTINCT regexp_extract(file, '([^/\\\\]+)[/\\\\]cluster=[^/\\\\]+[/\\\\]', 1) AS t
FROM glob($pattern) WHERE file LIKE '%.parquet'
"""

_SCHEMA_SQL = """
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = 'main' AND table_name = $table ORDER BY ordinal_position
"""

_VIEW_SQL = """
CREATE OR REPLACE VIEW {table} AS SELECT {columns}
FROM read_parquet({pattern}, {options})
"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _root(lake: str) -> str:
    return str(lake).rstrip("/\\") or "/"


def clusters(lake: str) -> list[str]:
    """The clusters with at least one file in ``lake`` (a folder, or an object-store URL
    DuckDB can glob), sorted; names that are no valid ``cluster.name`` are skipped."""
    con = duckdb.connect()
    try:
        rows = con.execute(_CLUSTERS_SQL, {"pattern": _root(lake) + "/*/cluster=*/**"}
                           ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows if cluster_name_ok(r[0])]


def cluster_tables(lake: str, cluster: str) -> set[str]:
    """The warehouse tables ``lake`` holds Parquet of for ``cluster``."""
    _check(cluster)
    con = duckdb.connect()
    try:
        rows = con.execute(_TABLES_SQL, {"pattern": fill(
            "{root}/*/cluster={cluster}/**", root=_root(lake), cluster=cluster)}).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows} & {*PARTITIONED, *WHOLE}


def _check(cluster: str) -> None:
    if not cluster_name_ok(cluster):
        raise ValueError(f"cluster name {cluster!r}: expected 1 to 64 of A-Z a-z 0-9 . _ -")


def _pattern(lake: str, table: str, cluster: str) -> str:
    return fill("{root}/{table}/cluster={cluster}/**/*.parquet", root=_root(lake),
                table=table, cluster=cluster)


def _view_sql(con, lake: str, table: str, cluster: str) -> str:
    """The view of ``table`` over the cluster's files: each warehouse column by its name
    and type, NULL where the files lack it or a value does not convert (one bad value
    costs that value, not the cluster)."""
    pattern = _literal(_pattern(lake, table, cluster))
    have = {r[0] for r in con.execute(fill(
        "DESCRIBE SELECT * FROM read_parquet({pattern}, {options})", pattern=pattern,
        options=READ_OPTIONS)).fetchall()} - set(HIVE_COLUMNS)
    cols = [fill("TRY_CAST({src} AS {type}) AS {name}",
                 src=_ident(name) if name in have else "NULL", type=dtype, name=_ident(name))
            for name, dtype in con.execute(_SCHEMA_SQL, {"table": table}).fetchall()]
    return fill(_VIEW_SQL, table=_ident(table), columns=names(cols), pattern=pattern,
                options=READ_OPTIONS)


def open_cluster(lake: str, cluster: str, *, memory_limit_mb: float | None = None
                 ) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB in UTC with the warehouse's schema, every table the lake holds
    for ``cluster`` a view over its Parquet (see the module docstring). ValueError for a
    bad cluster name; duckdb errors name a file that cannot be read."""
    _check(cluster)
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    if memory_limit_mb:
        con.execute(fill("SET memory_limit = '{mb}MiB'", mb=f"{float(memory_limit_mb):g}"))
    migrate(con)
    for table in sorted(cluster_tables(lake, cluster)):
        sql = _view_sql(con, lake, table, cluster)
        con.execute(fill("DROP TABLE {table}", table=_ident(table)))
        con.execute(sql)
    # the writer keeps run_nodes and run_node_counts from allocations (not exported): here
    # views of their definitions over the allocations' view; run_shapes stays empty, and
    # its tree too, so Placement groups the runs (warehouse/placement.py:kept_shapes)
    con.execute("DROP TABLE run_nodes; DROP TABLE run_node_counts")
    con.execute("CREATE VIEW run_nodes AS " + fill(run_nodes.SELECT_SQL, where=""))
    con.execute("CREATE VIEW run_node_counts AS " + fill(run_nodes.COUNTS_SQL, rows="run_nodes",
                                                           where=""))
    return con


class Lake:
    """Every cluster of a lake, each opened once (:func:`open_cluster`) and opened again
    when the set of its tables changes (the old one is dropped, never closed under a
    query still reading it); :meth:`reader` hands out cursors (one per query, like
    ``Warehouse.reader``). Thread-safe."""

    def __init__(self, path: str, *, memory_limit_mb: float | None = None):
        self.path = _root(path)
        self.memory_limit_mb = memory_limit_mb
        self._lock = threading.Lock()
        self._open: dict[str, tuple[frozenset, duckdb.DuckDBPyConnection]] = {}

    def clusters(self) -> list[str]:
        """The lake's clusters now (a new cluster's first export shows at the next call)."""
        return clusters(self.path)

    def reader(self, cluster: str) -> duckdb.DuckDBPyConnection:
        """A fresh cursor on ``cluster``'s views."""
        tables = frozenset(cluster_tables(self.path, cluster))
        with self._lock:
            known = self._open.get(cluster)
            if known is None or known[0] != tables:
                # the old connection is dropped, not closed: cursors other threads hold
                # keep it (and its views) alive until they are done; then it is freed
                con = open_cluster(self.path, cluster, memory_limit_mb=self.memory_limit_mb)
                self._open[cluster] = known = (tables, con)
            cur = known[1].cursor()
        cur.execute("SET TimeZone = 'UTC'")
        return cur

    def close(self) -> None:
        with self._lock:
            for _, con in self._open.values():
                con.close()
            self._open.clear()


# ------------------------------------------------------------------- per-cluster figures


@dataclass(frozen=True)
class Window:
    """What the fleet view asks of each cluster: the page's ``[start, end)``, the failure
    rate's window (``rate_start``, see :func:`warehouse.queries.failures.rate_span`) and
    the clock ``now`` (naive UTC)."""

    start: datetime
    end: datetime
    now: datetime
    rolling: bool = True  # a rolling range (the rate reaches back further)


def cluster_figures(cur, w: Window, opts: Options | None = None) -> dict:
    """One cluster's figures for the fleet view, each from the function its
    single-cluster page calls:

    - ``fleet``: :func:`warehouse.queries.weekly.fleet_hours` with its shares
      (:func:`warehouse.queries.weekly.utilisation_shares`): gpus, GPU-hours, percent;
    - ``rate``: :func:`warehouse.queries.failures.failure_rate` over
      :func:`warehouse.queries.failures.rate_span` (per 1,000 node-days, with the MTTF
      frame by job size), and ``rate_start``;
    - ``lost``: :func:`warehouse.queries.goodput.lost_by` category (GPU-hours);
    - ``ettr`` / ``large_jobs``: :func:`warehouse.queries.goodput.large_jobs` and
      :func:`warehouse.queries.goodput.ettr_summary`;
    - ``energy``: :func:`warehouse.queries.energy.energy_by` ``fleet`` (kWh, kg CO2e).
    """
    opts = opts or Options()
    span = {"start": w.start, "end": w.end}
    fleet = qw.fleet_hours(cur, **span)
    fleet.update(qw.utilisation_shares(fleet, hours=(w.end - w.start).total_seconds() / 3600))
    rate_start, rate_end = qf.rate_span(cur, start=w.start, end=w.end, rolling=w.rolling)
    rate = qf.failure_rate(cur, start=rate_start, end=rate_end)
    large = qg.large_jobs(cur, now=w.now, opts=opts, **span)
    energy = qe.energy_by(cur, by="fleet", opts=opts, **span)
    e0 = energy.iloc[0] if len(energy) else pd.Series(dtype=float)
    return {
        "fleet": fleet, "rate": rate, "rate_start": rate_start,
        "lost": qg.lost_by(cur, by="category", **span),
        "large_jobs": large, "ettr": qg.ettr_summary(large),
        "energy": {k: float(e0.get(k, 0.0) or 0.0)
                   for k in ("gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg")},
    }


def fleet_figures(lake: Lake, w: Window, opts: Options | None = None,
                  only: list[str] | None = None) -> dict[str, dict]:
    """:func:`cluster_figures` of every cluster of ``lake`` (or of ``only``), by name,
    each with ``missing``: the :data:`REQUIRED_TABLES` its lake lacks; a cluster whose
    files cannot be read gets ``{"error": text}`` instead, the others their figures."""
    out: dict[str, dict] = {}
    for name in only if only is not None else lake.clusters():
        try:
            out[name] = cluster_figures(lake.reader(name), w, opts)
            out[name]["missing"] = sorted(set(REQUIRED_TABLES)
                                          - cluster_tables(lake.path, name))
        except (duckdb.Error, OSError, ValueError) as exc:
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out
