"""``gpulens export``: the warehouse as files other engines read.

    gpulens export parquet --since 2026-11-01 [--until 2026-11-20] --out DIR [--db FILE]
    gpulens export lake [--db FILE] [--url URL]

Writes hive-partitioned Parquet (``DIR/<table>/cluster=NAME/date=YYYY-MM-DD/*.parquet``,
whole UTC days, NAME the ``cluster.name`` setting; see warehouse/export.py). It opens
the database file itself when it can. While ``gpulens serve`` owns the file DuckDB
refuses a second process; then the command asks that service to export (``--url``,
POST /api/export, gpulens/export_api.py): the service writes the files, so ``--out``
must be its ``lake.dir`` folder or inside it.

``gpulens export lake`` runs the service's scheduled lake export now (gpulens/lake_job.py:
recent days, the days since the last run, lake retention, into ``lake.dir``), through the
service when it holds the file. Both commands exit 1 when a (table, day) failed; the
others are written.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click
import requests

from gpulens.service_client import ServiceClient, error_message
from warehouse.clock import utcnow as _utcnow

DEFAULT_URL = "http://127.0.0.1:8050"


def _when(value: str | None, default: datetime | None = None) -> datetime | None:
    """ISO date or time (naive = UTC), or a relative '7d' / '12h' before now."""
    if value is None:
        return default
    value = value.strip()
    if value[-1:] in ("d", "h") and value[:-1].replace(".", "", 1).isdigit():
        unit = {"d": "days", "h": "hours"}[value[-1]]
        return _utcnow() - timedelta(**{unit: float(value[:-1])})
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected an ISO date/time (2026-11-20, "
                                 "2026-11-20T06:00) or a span before now (7d, 12h)") from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


@click.group("export")
def export() -> None:
    """Export the warehouse (Parquet for DuckDB, Spark, Trino)."""


@export.command("parquet")
@click.option("--since", required=True,
              help="First day (ISO date/time, UTC unless an offset is given, or 7d).")
@click.option("--until", default=None,
              help="End, exclusive (default: now); both ends widen to whole UTC days.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Output folder: DIR/<table>/cluster=NAME/date=YYYY-MM-DD/*.parquet.")
@click.option("--table", "tables", multiple=True,
              help="Only these tables (repeatable; default: all).")
@click.option("--db", help="Warehouse file (default: service.db of the configuration).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (service.db, warehouse.memory_limit_mb).")
@click.option("--url", default=None,
              help=f"The running service to ask when it holds the database (default "
                   f"{DEFAULT_URL}).")
def parquet(since, until, out, tables, db, config_path, url):
    """Write [since, until) as hive-partitioned Parquet, one folder per table and day.

    A day exported again replaces that day's folder, so a daily job can re-export the
    last two days."""
    from gpulens.config import load
    from warehouse import Warehouse, WarehouseLocked
    from warehouse.export import export_parquet
    from warehouse.rollups import Retention, retention_cutoffs

    start = _when(since)
    end = _when(until, _utcnow())
    if end <= start:
        raise click.BadParameter(f"--until {end} is not after --since {start}")
    config = load(config_path)
    db = db or config["service.db"]
    try:
        wh = Warehouse(db, memory_limit_mb=config["warehouse.memory_limit_mb"])
    except WarehouseLocked as exc:
        url = url or DEFAULT_URL
        body = {"since": start.isoformat(), "until": end.isoformat(),
                "out": str(Path(out).resolve()), "tables": list(tables) or None}
        answer = _remote(url, body, str(exc))
        _report_answer(answer, f"{out} (written by the service at {url})")
        return
    try:
        result = export_parquet(wh.reader(), out, since=start, until=end,
                                tables=list(tables) or None, cluster=config["cluster.name"],
                                kept_from=retention_cutoffs(
                                    _utcnow(), Retention(**config.section("retention"))))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    finally:
        wh.close()
    _report(result.start, result.end, result.rows, result.days, out, result.errors,
            result.skipped)


@export.command("lake")
@click.option("--db", help="Warehouse file (default: service.db of the configuration).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (lake.*, cluster.name, service.db).")
@click.option("--url", default=None,
              help=f"The running service to ask when it holds the database (default "
                   f"{DEFAULT_URL}).")
def lake(db, config_path, url):
    """Run the scheduled lake export now: today and lake.reexport_days before it, the days
    since the last run, then lake retention, into lake.dir."""
    from gpulens.config import load
    from gpulens.lake_job import LakeJob
    from warehouse import Warehouse, WarehouseLocked

    config = load(config_path)
    try:
        wh = Warehouse(db or config["service.db"],
                       memory_limit_mb=config["warehouse.memory_limit_mb"])
    except WarehouseLocked as exc:
        url = url or DEFAULT_URL
        answer = _remote(url, {}, str(exc))
        _report_answer(answer, f"{answer['out']} (written by the service at {url})")
        return
    try:
        result = LakeJob(wh, config, now=_utcnow).run()
    finally:
        wh.close()
    _report(result.start, result.end, result.rows, result.days, config["lake.dir"],
            result.errors, result.skipped)


def _remote(url: str, body: dict, locked: str) -> dict:
    """The service's answer to the export ``body``; ClickException when none comes or it
    refuses (``locked``: why the file could not be opened here)."""
    try:
        return ServiceClient(url).json("POST", "/api/export", body, timeout=3600)
    except requests.HTTPError as exc:
        raise click.ClickException(
            f"{locked} The service at {url} refused the export: {error_message(exc)}"
        ) from None
    except requests.RequestException:
        raise click.ClickException(
            f"{locked} No service answered at {url} to export instead: pass its address "
            "with --url, stop the service for the export, or copy the file (with its "
            ".wal) and pass the copy as --db.") from None


def _report_answer(answer: dict, where: str) -> None:
    _report(datetime.fromisoformat(answer["start"]), datetime.fromisoformat(answer["end"]),
            answer["rows"], answer["days"], where, answer.get("errors") or {},
            {t: date.fromisoformat(d) for t, d in (answer.get("skipped") or {}).items()})


def _report(start: datetime, end: datetime, rows: dict, days: dict, where: str,
            errors: dict, skipped: dict | None = None) -> None:
    """Print what was written (``skipped``: table -> first day written where the
    warehouse's retention left the day before partial); exit 1 (after printing) when
    some (table, day) failed."""
    click.echo(f"exported {start:%Y-%m-%d} .. {end - timedelta(days=1):%Y-%m-%d}"
               f" (UTC days) to {where}")
    for table, n in rows.items():
        parts = days.get(table)
        what = f"{len(parts)} day(s)" if parts is not None else "whole table"
        click.echo(f"  {table:<18} {n:>12,} rows  {what}")
    for table, day in (skipped or {}).items():
        click.echo(f"  {table}: from {day:%Y-%m-%d}: the warehouse's retention left the "
                   "day before partial; the days before stay as they are in the output")
    for key, message in errors.items():
        click.echo(f"  FAILED {key}: {message}", err=True)
    if errors:
        raise click.exceptions.Exit(1)
