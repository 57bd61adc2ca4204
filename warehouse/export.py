"""Exports of the warehouse: hive-partitioned Parquet, and OpenMetrics text for promtool.

Parquet (``gpulens export parquet``, the service's lake job gpulens/lake_job.py): every
time-stamped table is written as ``DIR/<table>/cluster=NAME/date=YYYY-MM-DD/part-0.parquet``,
one folder per cluster (the ``cluster.name`` setting) and UTC day, which DuckDB
(``read_parquet('DIR/gpu_samples/**/*.parquet', hive_partitioning = true)``), Spark and
Trino read as a partitioned table whose rows carry ``cluster`` and ``date`` columns;
topology tables go whole to ``DIR/<table>/cluster=NAME/<table>.parquet``. Several
clusters' services can write into one lake: each touches only its own ``cluster=``
folders.

The range is widened to whole days and each (table, day) is written on its own and
replaces that day's folder as a unit, so exporting a day again (it was still filling up,
or jobs ended since) replaces it. A day is written to a staging folder beside the tables
and swapped into place: on Linux with one ``renameat2(RENAME_EXCHANGE)``, so a reader
sees the old day or the new one, never a half-written one nor none; where the file
system cannot exchange, with two renames (the old folder aside first; for that instant
the day is absent). The old day's files stay in ``DIR/.trash-*`` for
:data:`TRASH_GRACE_S` (a query that listed them before the swap can still read them;
each export deletes older trash). A day with no rows in the range is left as it is in the lake (the
warehouse may have dropped it under its retention; the lake keeps it). One failing
(table, day) costs itself: it is reported in :attr:`ExportResult.errors` and the others
are written. The warehouse's retention deletes mid-day (``now - retention.raw_days``),
so the oldest day it holds of a table with retention is partial: given the retention
cutoffs (``kept_from``), each such table is exported from the first midnight after its
cutoff, and the boundary day (and older) is left as the lake has it
(:attr:`ExportResult.skipped`). :func:`drop_days_before` is the lake's retention: whole
day folders of one cluster go, each with one rename.

OpenMetrics (:func:`write_openmetrics`): raw samples as dcgm-exporter series with
explicit timestamps, the input of ``promtool tsdb create-blocks-from openmetrics``
(moving history into Prometheus; bench/vs_prometheus.py loads Prometheus this way).

Table and column names come from the fixed maps below; values are parameters. Paths
cannot be parameters of COPY, so they are quoted as SQL string literals.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb

from gpulens.settings import default
from gpulens.settings.core import cluster_name_ok
from warehouse.db import fill
from warehouse.schema import DERIVED

log = logging.getLogger(__name__)

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
    "grid_intensity": "ts",
    "gpu_usage_1h": "ts",
    "gpu_mig_samples": "ts",
    "checkpoints": "ts",
    "jobs": "submit_ts",
    "job_runs": "start_ts",
    "allocations": "start_ts",
    "failures": "end_ts",
}
#: tables whose rows change until they end (``end_ts`` set): a row partitioned by its
#: submission or start day keeps changing that day's partition while it runs.
OPEN_UNTIL_END = ("jobs", "job_runs", "allocations")
#: small tables exported whole.
WHOLE = ("racks", "nodes", "gpus")

DAY = timedelta(days=1)
PART_FILE = "part-0.parquet"
#: seconds a replaced or dropped day's files stay (in ``DIR/.trash-*``) before they are
#: deleted, so that a query that listed them before the swap can finish reading them
TRASH_GRACE_S = 3600.0
_TRASH = re.compile(r"\.trash-([0-9]{1,12})-.+", re.S)  # see trash_path


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
    #: "table" or "table/YYYY-MM-DD" -> what went wrong; those were not written
    errors: dict[str, str] = field(default_factory=dict)
    #: table -> the first day exported of a table whose warehouse retention left the
    #: day before it partial: earlier days in the range were not written (the lake keeps
    #: its complete copies)
    skipped: dict[str, date] = field(default_factory=dict)


def first_whole_day(cutoff: datetime) -> date:
    """The first UTC day wholly at or after ``cutoff`` (naive UTC): the cutoff's day when
    it is midnight, else the next."""
    day = cutoff.date()
    return day if cutoff == datetime.combine(day, datetime.min.time()) else day + DAY


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()}


def days_with_rows(con: duckdb.DuckDBPyConnection, table: str, start: datetime | None,
                   end: datetime) -> list[date]:
    """The UTC days of ``table`` with rows in ``[start, end)`` (``start`` None: from its
    first row), ascending."""
    col = PARTITIONED[table]
    rows = con.execute(fill("SELECT DISTINCT CAST({col} AS DATE) AS d FROM {table} "
                            "WHERE ($start IS NULL OR {col} >= $start) AND {col} < $end "
                            "ORDER BY d", col=col, table=table),
                       {"start": start, "end": end}).fetchall()
    return [r[0] for r in rows]


def open_days(con: duckdb.DuckDBPyConnection, table: str, since: datetime) -> list[date]:
    """Days before ``since`` holding rows of ``table`` (one of :data:`OPEN_UNTIL_END`)
    that are still open or ended at or after ``since``: their partitions changed or can
    still change although their day is past."""
    col = PARTITIONED[table]
    rows = con.execute(fill("SELECT DISTINCT CAST({col} AS DATE) AS d FROM {table} "
                            "WHERE {col} < $since AND (end_ts IS NULL OR end_ts >= $since) "
                            "ORDER BY d", col=col, table=table), {"since": since}).fetchall()
    return [r[0] for r in rows]


def _columns(table: str) -> str:
    """The columns of ``table`` a lake holds: all but those the writer derives
    (warehouse/schema.py:DERIVED, e.g. the allocation key of the read checks)."""
    derived = DERIVED.get(table)
    return fill("* EXCLUDE ({names})", names=", ".join(derived)) if derived else "*"


def _day_sql(table: str, col: str, path: Path) -> str:
    return fill("COPY (SELECT {columns} FROM {table} WHERE {col} >= $start AND {col} < $end "
                "ORDER BY {col}) TO {path} (FORMAT parquet, COMPRESSION zstd)",
                columns=_columns(table), col=col, table=table, path=_literal(path))


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (Linux ``renameat2`` with
    RENAME_EXCHANGE); False where the C library or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(new: Path, final: Path, trash: Path) -> None:
    """Put the folder ``new`` at ``final``, replacing what is there, which goes to
    ``trash``: exchanged in one step where the system can, else with two renames (the
    old folder aside first)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        if _exchange(new, final):
            new.replace(trash)
            return
        final.replace(trash)
    new.replace(final)


def trash_path(out: Path, what: str) -> Path:
    """A fresh name in ``out`` for a replaced or dropped folder; it carries the time it
    was made (Unix seconds), which :func:`sweep_trash` reads."""
    return out / f".trash-{int(time.time())}-{what}-{uuid.uuid4().hex[:8]}"


def sweep_trash(out: Path, grace_s: float = TRASH_GRACE_S) -> int:
    """Delete the replaced and dropped folders in ``out`` older than ``grace_s`` seconds
    (a query that listed the old files before the swap may still be reading them);
    returns how many went."""
    gone = 0
    for p in out.glob(".trash-*") if out.is_dir() else ():
        m = _TRASH.fullmatch(p.name)
        if m is None:
            continue  # not one of ours
        if time.time() - int(m[1]) >= grace_s:
            shutil.rmtree(p, ignore_errors=True)
            gone += 1
    return gone


def export_day(con: duckdb.DuckDBPyConnection, out: Path, table: str, day: date,
               cluster: str) -> int:
    """Write ``table``'s rows of UTC day ``day`` to
    ``out/<table>/cluster=<cluster>/date=<day>/`` and swap the folder in; returns the
    rows. No rows: nothing is written and the lake's day, if any, stays."""
    start = datetime.combine(day, datetime.min.time())
    token = uuid.uuid4().hex[:8]
    staging = out / f".staging-{table}-{token}"
    try:
        staging.mkdir(parents=True)
        row = con.execute(_day_sql(table, PARTITIONED[table], staging / PART_FILE),
                          {"start": start, "end": start + DAY}).fetchone()
        n = int(row[0]) if row else 0
        if n:
            _swap_in(staging, out / table / f"cluster={cluster}" / f"date={day.isoformat()}",
                     trash_path(out, f"{table}-{day.isoformat()}"))
        return n
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _export_whole(con: duckdb.DuckDBPyConnection, out: Path, table: str, cluster: str) -> int:
    (out / table / f"cluster={cluster}").mkdir(parents=True, exist_ok=True)
    target = out / table / f"cluster={cluster}" / f"{table}.parquet"
    tmp = out / f".{table}-{uuid.uuid4().hex[:8]}.parquet.tmp"
    try:
        n = con.execute(fill("COPY (SELECT {columns} FROM {table}) TO {path} "
                             "(FORMAT parquet, COMPRESSION zstd)", columns=_columns(table),
                             table=table, path=_literal(tmp))).fetchone()
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return int(n[0]) if n else 0


def check_export(cluster: str, tables: list[str] | None) -> list[str]:
    """The tables to export (``tables`` or all); ValueError naming a bad cluster name or
    an unknown table."""
    if not cluster_name_ok(cluster):
        raise ValueError(f"cluster name {cluster!r}: expected 1 to 64 of A-Z a-z 0-9 . _ -")
    wanted = list(tables or [*PARTITIONED, *WHOLE])
    unknown = [t for t in wanted if t not in PARTITIONED and t not in WHOLE]
    if unknown:
        raise ValueError(f"cannot export {unknown}: expected some of "
                         f"{', '.join([*PARTITIONED, *WHOLE])}")
    return wanted


def export_parquet(con: duckdb.DuckDBPyConnection, out: str | Path, *, since: datetime | None,
                   until: datetime, tables: list[str] | None = None,
                   cluster: str = default("cluster.name"),
                   extra_days: Callable[[str], list[date]] | None = None,
                   on_day: Callable[[str, date, int], None] | None = None,
                   kept_from: dict[str, datetime] | None = None) -> ExportResult:
    """Write ``[since, until)`` (widened to whole UTC days; ``since`` None: from each
    table's first row) of cluster ``cluster`` under ``out``; see the module docstring for
    the layout. ``tables`` restricts the export (default: all of them); ``extra_days``
    (table -> days) adds days before the range to write again; ``on_day(table, day,
    rows)`` is called after each day written; ``kept_from`` (table -> the warehouse's
    retention cutoff, warehouse/rollups.retention_cutoffs) leaves out each such table's
    days before :func:`first_whole_day` of its cutoff (partial in the warehouse), named in
    the result's ``skipped``. ValueError names an unknown table or a bad
    cluster name, before anything is written; any other failure of a (table, day) lands
    in the result's ``errors`` and the export goes on.

    Runs on any cursor (a read). Returns rows and day partitions written per table.
    """
    wanted = check_export(cluster, tables)
    start, end = day_range(since if since is not None else until, until)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sweep_trash(out)
    present = _tables(con)
    rows: dict[str, int] = {}
    days: dict[str, list[date]] = {}
    errors: dict[str, str] = {}
    skipped: dict[str, date] = {}
    for table in wanted:
        if table not in present:
            continue
        try:
            if table in WHOLE:
                rows[table] = _export_whole(con, out, table, cluster)
                continue
            todo = days_with_rows(con, table, None if since is None else start, end)
            if extra_days is not None:
                todo = sorted(set(todo) | set(extra_days(table)))
            if kept_from is not None and table in kept_from:
                whole = first_whole_day(kept_from[table])
                if todo and todo[0] < whole:
                    skipped[table] = whole
                    log.info("lake export of %s starts at %s: the warehouse's retention "
                             "left the day before partial; the lake keeps its copies",
                             table, whole)
                todo = [d for d in todo if d >= whole]
        except Exception as exc:  # this table costs itself
            errors[table] = f"{type(exc).__name__}: {exc}"
            log.warning("lake export of %s failed: %s", table, errors[table])
            continue
        rows[table], days[table] = 0, []
        for day in todo:
            try:
                n = export_day(con, out, table, day, cluster)
            except Exception as exc:  # this day costs itself
                errors[f"{table}/{day.isoformat()}"] = f"{type(exc).__name__}: {exc}"
                log.warning("lake export of %s %s failed: %s", table, day, exc)
                continue
            rows[table] += n
            if n:
                days[table].append(day)
            if on_day is not None:
                on_day(table, day, n)
    if since is None:
        first = min((d for ds in days.values() for d in ds), default=end.date())
        start = min(end, datetime.combine(first, datetime.min.time()))
    return ExportResult(start, end, rows, days, cluster, errors, skipped)


def lake_days(out: str | Path, table: str, cluster: str) -> list[date]:
    """The day partitions of ``table`` and ``cluster`` present in the lake ``out``."""
    folder = Path(out) / table / f"cluster={cluster}"
    found = []
    for p in folder.glob("date=*") if folder.is_dir() else ():
        try:
            found.append(date.fromisoformat(p.name[5:]))
        except ValueError:
            continue  # not ours
    return sorted(found)


def drop_days_before(out: str | Path, cluster: str, keep_from: date,
                     tables: list[str] | None = None) -> dict[str, list[date]]:
    """The lake's retention: delete ``cluster``'s day partitions before ``keep_from``
    in ``out`` (every partitioned table, or ``tables``). Each day folder is renamed out
    of the table (one step: a reader sees the whole day or none) into the trash, deleted
    after :data:`TRASH_GRACE_S`. Returns table -> days dropped."""
    out = Path(out)
    dropped: dict[str, list[date]] = {}
    for table in tables or list(PARTITIONED):
        for day in lake_days(out, table, cluster):
            if day >= keep_from:
                break
            (out / table / f"cluster={cluster}" / f"date={day.isoformat()}").replace(
                trash_path(out, f"{table}-{day.isoformat()}"))
            dropped.setdefault(table, []).append(day)
    sweep_trash(out)
    return dropped


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
