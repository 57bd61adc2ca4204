"""``gpulens report``: make one weekly report on demand.

While ``gpulens serve`` runs it owns the database file, so the command asks its HTTP API
(``--url``; POST /api/reports) first. When nothing answers there it opens the warehouse
file itself (``--db``, default ``service.db``); if a service holds the file but its API is
elsewhere, it says so and what to do.
"""

from __future__ import annotations

import gc

import click
import requests

from gpulens.config import load
from gpulens.service_client import ServiceClient, error_message, status_of

DEFAULT_URL = "http://127.0.0.1:8050"


def _remote(url: str, week: str, send: bool) -> dict | None:
    """The service's answer, or None when no service answers at ``url``."""
    try:
        return ServiceClient(url).json("POST", "/api/reports", {"week": week, "send": send},
                                       timeout=600)
    except requests.HTTPError as exc:
        if status_of(exc) in (404, 405):
            return None  # a service without the reports API
        raise click.ClickException(
            f"the service at {url} refused: {error_message(exc)}") from None
    except requests.RequestException:
        return None


def _local(config, db: str | None, week: str, out_dir: str | None, send: bool,
           url: str) -> dict:
    from dashboard.report import generate as gen
    from warehouse import Warehouse, WarehouseLocked
    from warehouse.clock import utcnow

    path = db or config["service.db"]
    try:
        wh = Warehouse(path, memory_limit_mb=config["warehouse.memory_limit_mb"])
    except WarehouseLocked:
        raise click.ClickException(
            f"the database {path} is held by another process (a running `gpulens serve`), "
            f"and no reports API answered at {url}. Pass that service's address with "
            "--url, or stop the service and run this again.") from None
    with wh:
        now = utcnow()
        result = gen.generate(wh, config, week=week, now=now, out_dir=out_dir, send=send)
        if send:
            result["delivery"] = gen.deliver_now(wh, config, now)
        gc.collect()  # drop the query cursors (and their transactions) before the checkpoint
    return result


@click.command("report")
@click.option("--week", help="ISO week, e.g. 2026-W47 (default: the last complete week).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Directory for the files (default reports.dir; only without a service).")
@click.option("--send", is_flag=True, help="Also e-mail it and post it to the webhook.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration file.")
@click.option("--db", help="Warehouse file, when no service runs (default service.db).")
@click.option("--url", default=None, help=f"Address of a running service (default {DEFAULT_URL}).")
def report(week, out_dir, send, config_path, db, url) -> None:
    """Make the weekly report (HTML and PDF) of one week."""
    from warehouse.clock import utcnow
    from warehouse.queries import weekly

    config = load(config_path)
    week = week or weekly.last_complete_week(utcnow(), config["reports.timezone"])
    try:
        weekly.parse_week(week)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--week") from None
    url = url or DEFAULT_URL
    result = _remote(url, week, send)
    if result is not None:
        where = f"made by the service at {url}"
        if out_dir:
            click.echo("note: --out is ignored; the service writes to its reports.dir",
                       err=True)
    else:
        result = _local(config, db, week, out_dir, send, url)
        where = "made from " + (db or config["service.db"])
    click.echo(f"weekly report {result['week']} {where}:")
    for path in result["files"]:
        click.echo(f"  {path}")
    for line in result.get("summary", []):
        click.echo(f"  - {line}")
    if send:
        queued = ", ".join(result.get("queued", [])) or "none (no e-mail or webhook configured)"
        click.echo(f"deliveries queued: {queued}")
        if "delivery" in result:
            d = result["delivery"]
            click.echo(f"delivered {d['delivered']}, failed {d['failed']} (failed ones are "
                       "retried by the service's outbox)")
