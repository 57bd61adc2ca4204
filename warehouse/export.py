"""Exports of the warehouse: hive-partitioned Parquet, and OpenMetrics text for promtool.

Parquet (``gpulens export parquet``): every time-stamped table is written as
``DIR/<table>/cluster=NAME/date=YYYY-MM-DD/part-<n>.parquet``, one folder per cluster
(the ``cluster.name`` setting) and UTC day, which DuckDB
(``read_parquet('DIR/gpu_samples/**/*.parquet', hive_partitioning = true)``), Spark and
Trino read as a partitioned table whose rows carry ``cluster`` and ``date`` columns;
topology tables go whole to ``DIR/<table>/cluster=NAME/<table>.parquet``. Several
clusters' services can write into one lake: each touches only its own ``cluster=``
folders.

The range is widened to whole days and each day's folder is replaced as a unit, so
exporting a day again (it was still filling up, or jobs ended since) replaces it and a
daily export job can simply run on the last two days. A day is written to a staging
folder beside the tables and renamed into place (the old folder renamed aside first, then
deleted): a reader sees the old day or the new one, never a half-written one.

OpenMetrics (:func:`write_openmetrics`): raw samples as dcgm-exporter series with
explicit timestamps, the input of ``promtool tsdb create-blocks-from openmetrics``
(moving history into Prometheus; bench/vs_prometheus.py loads Prometheus this way).

Table and column names come from the fixed maps below; values are parameters. Paths
cannot be parameters of COPY, so they are quoted as SQL string literals.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb

from gpulens.settings import default
from gpulens.settings.core import cluster_name_ok
from warehouse.db import fill

#: table -> the timestamp column its rows are partitioned by (UTC day).
PARTITIONED: dict[str, str] = {
    "gpu_samples": "ts",
    "gpu_samples_1m": "ts",
    "gpu_samples_1h": "ts",
    "gpu_energy_1h": "ts",
    "gpu_events": "ts",
    "node_power": "ts",
    "pue": "ts",
    "carbon_intensity": "ts",
    "checkpoints": "ts",
    "jobs": "submit_ts",
    "job_runs": "start_ts",
    "allocations": "start_ts",
    "failures": "end_ts",
}
#: small tables exported whole.
WHOLE = ("racks", "nodes", "gpus")

DAY = timedelta(days=1)


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def day_range(since: datetime, until: datetime) -> tuple[datetime, datetime]:
    """``[since, until)`` widened to whole UTC days."""
    lo = datetime.combine(since.date(), datetime.min.time())
    hi = datetime.combine(until.date(), datetime.min.time())
    return lo, hi if hi == until else hi + DAY


@dataclass(frozen=True)
class ExportResult:
    start: datetime  # whole days exported: [start, end)
    end: datetime
    rows: dict[str, int]  # table -> rows written
    days: dict[str, list[date]]  # table -> day partitions written (replaced)
    cluster: str  # the cluster=NAME partition written


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()}


def _partition_sql(table: str, col: str, staging: Path) -> str:
    return fill("COPY (SELECT *, CAST({col} AS DATE) AS date FROM {table} "
                "WHERE {col} >= $start AND {col} < $end ORDER BY {col}) "
                "TO {path} (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (date), "
                "FILENAME_PATTERN 'part-{i}', WRITE_PARTITION_COLUMNS false)",
                col=col, table=table, path=_literal(staging))


def _swap_in(new: Path, final: Path, trash: Path) -> None:
    """Put the folder ``new`` at ``final``, replacing what is there with two renames
    (the old folder goes aside to ``trash``, then is deleted)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        final.replace(trash)
    new.replace(final)
    shutil.rmtree(trash, ignore_errors=True)


def export_parquet(con: duckdb.DuckDBPyConnection, out: str | Path, *, since: datetime,
                   until: datetime, tables: list[str] | None = None,
                   cluster: str = default("cluster.name")) -> ExportResult:
    """Write ``[since, until)`` (widened to whole UTC days) of cluster ``cluster`` under
    ``out``; see the module docstring for the layout. ``tables`` restricts the export
    (default: all of them). ValueError names an unknown table or a bad cluster name.

    Runs on any cursor (a read). Returns rows and day partitions written per table.
    """
    if not cluster_name_ok(cluster):
        raise ValueError(f"cluster name {cluster!r}: expected 1 to 64 of A-Z a-z 0-9 . _ -")
    start, end = day_range(since, until)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    present = _tables(con)
    wanted = tables or [*PARTITIONED, *WHOLE]
    unknown = [t for t in wanted if t not in PARTITIONED and t not in WHOLE]
    if unknown:
        raise ValueError(f"cannot export {unknown}: expected some of "
                         f"{', '.join([*PARTITIONED, *WHOLE])}")
    rows: dict[str, int] = {}
    days: dict[str, list[date]] = {}
    params = {"start": start, "end": end}
    part_dir = f"cluster={cluster}"
    trash = out / f".trash-{uuid.uuid4().hex[:8]}"
    for table in wanted:
        if table not in present:
            continue
        if table in WHOLE:
            (out / table / part_dir).mkdir(parents=True, exist_ok=True)
            target = out / table / part_dir / f"{table}.parquet"
            tmp = out / f".{table}-{uuid.uuid4().hex[:8]}.parquet.tmp"
            n = con.execute(fill("COPY (SELECT * FROM {table}) TO {path} "
                                 "(FORMAT parquet, COMPRESSION zstd)",
                                 table=table, path=_literal(tmp))).fetchone()
            tmp.replace(target)
            rows[table] = int(n[0]) if n else 0
            continue
        col = PARTITIONED[table]
        staging = out / f".staging-{table}-{uuid.uuid4().hex[:8]}"
        try:
            n = con.execute(_partition_sql(table, col, staging), params).fetchone()
            rows[table] = int(n[0]) if n else 0
            written = sorted(staging.glob("date=*")) if staging.exists() else []
            days[table] = [date.fromisoformat(p.name[5:]) for p in written]
            for part in written:  # replace each day's folder as a unit
                _swap_in(part, out / table / part_dir / part.name, trash)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(start, end, rows, days, cluster)


# --- OpenMetrics for promtool --------------------------------------------------------

#: dcgm-exporter metric name -> (type, SQL expression over gpu_samples s, its unit)
OPENMETRICS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "s.temp_c"),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "s.power_w"),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "s.util_pct"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "round(s.energy_j * 1000)"),  # mJ
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "s.mem_util_pct"),
    "DCGM_FI_DEV_FB_USED": ("gauge", "s.mem_used_mib"),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "s.sm_clock_mhz"),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "s.mem_temp_c"),
}


def _openmetrics_sql(metric: str, expr: str, part: Path) -> str:
    # one line per sample: name{labels} value unix-seconds, in time order (promtool
    # rejects a series' sample older than its previous one; a parallel scan and join
    # does not keep the insertion order)
    line = fill("""'{metric}{gpu="' || s.gpu_index || '",Hostname="' || s.node || """
                """'",rack="' || coalesce(n.rack, '') || '"} ' || ({expr})::DOUBLE || ' ' || """
                "epoch(s.ts)::BIGINT", metric=metric, expr=expr)
    return fill("COPY (SELECT {line} FROM gpu_samples s LEFT JOIN nodes n USING (node) "
                "WHERE s.ts >= $start AND s.ts < $end AND ({expr}) IS NOT NULL ORDER BY s.ts) "
                "TO {path} (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', "
                "DELIMITER '\\x01')", line=line, expr=expr, path=_literal(part))


def write_openmetrics(con: duckdb.DuckDBPyConnection, path: str | Path, *, start: datetime,
                      end: datetime, metrics: list[str]) -> int:
    """Write the raw samples of ``[start, end)`` as OpenMetrics text to ``path``:
    the ``metrics`` (keys of :data:`OPENMETRICS`) one family after another, series
    labelled ``gpu``, ``Hostname`` and ``rack``, timestamps in seconds, ``# EOF`` last.
    Returns the number of sample lines."""
    path = Path(path)
    total = 0
    with open(path, "wb") as fh:
        for metric in metrics:
            kind, expr = OPENMETRICS[metric]
            part = path.with_name(f".{path.name}.{metric}.part")
            try:
                row = con.execute(_openmetrics_sql(metric, expr, part),
                                  {"start": start, "end": end}).fetchone()
                total += int(row[0]) if row else 0
                fh.write(f"# TYPE {metric} {kind}\n".encode())
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, fh, 16 << 20)
            finally:
                part.unlink(missing_ok=True)
        fh.write(b"# EOF\n")
    return total
