"""``gpulens import``: job history (CSV traces, sacct --json dumps) and intensity series.

Opens the warehouse file itself, so it needs the file free: while ``gpulens serve`` owns
it, DuckDB refuses a second process and this command says so (an HTTP import API on the
service is planned; until then stop the service, or import into another file).
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import pyarrow as pa
from tqdm import tqdm

from collector import traces

CHUNK = 250_000  # rows per ingest batch (one transaction each)


def _detect(path: Path) -> str:
    if path.suffix.lower() == ".json":
        return "sacct"
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline().lower()
    return "carbon" if ("co2" in header or "intensity" in header) else "csv"


def _ingest(wh, kind: str, table: pa.Table, bar) -> int:
    futures = []
    for offset in range(0, table.num_rows, CHUNK):
        chunk = table.slice(offset, CHUNK)
        futures.append((wh.ingest(kind, chunk), chunk.num_rows))
    done = 0
    for fut, n in futures:
        fut.result()
        done += n
        bar.update(n)
    return done


def _open(db: str, memory_limit_mb: int):
    from warehouse import Warehouse, WarehouseLocked

    try:
        return Warehouse(db, memory_limit_mb=memory_limit_mb)
    except WarehouseLocked as exc:
        raise click.ClickException(
            f"{exc} Importing needs the database file to itself: the HTTP import API of "
            "`gpulens serve` is not there yet, so stop the service for the import, or "
            "import into another --db and read that."
        ) from None


@click.command("import")
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["auto", "csv", "sacct", "carbon"]),
              default="auto", show_default=True,
              help="csv: a job trace; sacct: `sacct --json -D` output; carbon: an "
                   "intensity series (timestamp, region, gCO2e/kWh).")
@click.option("--tz", default="UTC", show_default=True,
              help="Time zone of times without an offset (e.g. Asia/Shanghai for Acme).")
@click.option("--db", help="Warehouse file (default: service.db of the configuration).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (service.db, warehouse.memory_limit_mb).")
@click.option("--gpus-per-node", type=int,
              help="sacct: GPUs per node, to derive allocations of whole-node runs.")
@click.option("--region", help="carbon: region of a series without a region column.")
@click.option("--skip-bad", is_flag=True, help="Skip malformed rows (listed) instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
def import_(paths, fmt, tz, db, config_path, gpus_per_node, region, skip_bad, progress):
    """Import job history or carbon-intensity series into the warehouse."""
    from gpulens.config import load
    from warehouse.carbon import write_series
    from warehouse.failures import write_run_logs

    config = load(config_path)
    db = db or config["service.db"]
    wh = _open(db, config["warehouse.memory_limit_mb"])
    try:
        for path in paths:
            kind = _detect(path) if fmt == "auto" else fmt
            t0 = time.perf_counter()
            try:
                if kind == "carbon":
                    frame = traces.read_intensity_csv(path, tz=tz, region=region)
                    n = wh.write(lambda con, f=frame: write_series(con, f)).result()
                    click.echo(f"{path}: {n} intensity readings")
                    continue
                if kind == "sacct":
                    batch, logs = traces.read_sacct(path, gpus_per_node=gpus_per_node)
                    bad = []
                else:
                    result = traces.read_csv_trace(path, tz=tz, skip_bad=skip_bad)
                    batch, logs, bad = result.batch, None, result.bad
            except (traces.TraceError, ValueError) as exc:
                raise click.ClickException(str(exc)) from None
            tables = [("jobs", batch.jobs), ("runs", batch.runs),
                      ("allocations", batch.allocations)]
            total = sum(t.num_rows for _, t in tables)
            with tqdm(total=total, unit="row", desc=path.name, disable=not progress) as bar:
                for name, table in tables:
                    _ingest(wh, name, table, bar)
            if logs is not None and len(logs):
                wh.write(lambda con, f=logs: write_run_logs(con, f)).result()
            took = time.perf_counter() - t0
            click.echo(f"{path}: {batch.jobs.num_rows} jobs, {batch.runs.num_rows} runs, "
                       f"{batch.allocations.num_rows} allocations in {took:.1f} s")
            for line in bad[:20]:
                click.echo(f"  skipped: {line}", err=True)
            if len(bad) > 20:
                click.echo(f"  ... and {len(bad) - 20} more skipped rows", err=True)
    finally:
        wh.close()
