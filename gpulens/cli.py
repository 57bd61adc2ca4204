"""The ``gpulens`` command line."""

from __future__ import annotations

import logging
import os
import sys

import click

from gpulens import __version__
from gpulens.cli_agent import agent
from gpulens.cli_alerts import alerts as alerts_group
from gpulens.cli_export import export
from gpulens.cli_fleet import fleet
from gpulens.cli_import import import_
from gpulens.cli_report import report
from gpulens.cli_simulate import simulate
from gpulens.config import ConfigError, load
from gpulens.settings import default

# Errors a user can act on: one line, exit status 2, no traceback.
_USER_ERRORS: tuple[type[Exception], ...] = (ConfigError,)


def _user_errors() -> tuple[type[Exception], ...]:
    from dashboard.report.pdf import PdfError
    from gpulens.service import StartupError
    from gpulens.sources import SimulatorMismatch
    from warehouse import BatchError, SchemaTooNew, WarehouseLocked

    return (*_USER_ERRORS, StartupError, SimulatorMismatch, SchemaTooNew, WarehouseLocked,
            BatchError, PdfError)


def _run_service(config, *, before_start=None) -> None:
    from gpulens.service import Service

    logging.basicConfig(
        level=config["service.log_level"].upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run
    if before_start is not None:
        config = before_start(config)
    service = Service(config)
    url = service.start()
    click.echo(f"gpulens {__version__} is serving {url}  (database {config['service.db']})")
    click.echo("Press Ctrl+C to stop.")
    sys.stdout.flush()
    service.run_until_signalled()
    # Everything is written and checkpointed. The web server's worker threads still hold
    # DuckDB objects; leave without interpreter teardown, which would only print
    # nanobind's leak report about them.
    click.echo("gpulens stopped; the database is checkpointed.")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@click.group()
@click.version_option(__version__, prog_name="gpulens")
def cli() -> None:
    """gpulens: GPU cluster utilisation, failures, goodput, energy and carbon."""


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration file (see gpulens.example.toml).")
def serve(config_path: str | None) -> None:
    """Run the service: collectors, rollups, alerts and the dashboard."""
    config = load(config_path)
    if config_path is None and "GPULENS_COLLECT_SOURCE" not in os.environ:
        raise ConfigError(
            "gpulens serve needs a configuration naming your cluster's sources: "
            "gpulens serve --config gpulens.toml (start from gpulens.example.toml). "
            "To see gpulens on a simulated cluster, run: gpulens demo")
    if "simulator" in config["collect.source"].split(","):
        click.echo("gpulens serve: collect.source includes 'simulator', so this serves a "
                   "simulated cluster, not real GPUs.")
    _run_service(_pdf_or_html_only(config))


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Optional TOML configuration; the options below override it.")
@click.option("--host", help=f"Address to bind (default {default('service.host')}).")
@click.option("--port", type=int, help=f"Dashboard port (default {default('service.port')}).")
@click.option("--db", help="Warehouse file (default data/demo.duckdb).")
@click.option("--history-days", type=float,
              help=f"Days of simulated history (default {default('simulator.history_days'):g}).")
@click.option("--seed", type=int,
              help=f"Seed of the simulated cluster (default {default('simulator.seed')}).")
@click.option("--racks", type=int,
              help=f"Racks of {default('simulator.nodes_per_rack')} nodes x "
                   f"{default('simulator.gpus_per_node')} GPUs "
                   f"(default {default('simulator.racks')}).")
def demo(config_path, host, port, db, history_days, seed, racks) -> None:
    """Run the service on a simulated cluster: a full dashboard without any GPU."""
    config = load(config_path)
    if config_path is None and db is None:
        db = "data/demo.duckdb"
    config = config.with_overrides(
        service__host=host, service__port=port, service__db=db,
        simulator__history_days=history_days, simulator__seed=seed, simulator__racks=racks,
        collect__source="simulator",
    )
    _run_service(_pdf_or_html_only(_demo_lake(config)), before_start=_demo_receiver)


DEMO_LAKE_INTERVAL_MIN = 10.0  # the demo writes its lake on schedule (issue 18)


def _demo_lake(config):
    """Unless configured, the demo exports its lake every 10 minutes into ``lake`` beside
    its database, so that several demos (the tests') keep apart."""
    from pathlib import Path

    overrides = {}
    if config["lake.interval_min"] == default("lake.interval_min"):
        overrides["lake__interval_min"] = DEMO_LAKE_INTERVAL_MIN
    if config["lake.dir"] == default("lake.dir"):
        overrides["lake__dir"] = str(Path(config["service.db"]).parent / "lake")
    return config.with_overrides(**overrides)


def _pdf_or_html_only(config):
    """Without Chromium the service's weekly report is HTML only: say so in one line
    instead of failing every week with a traceback."""
    if not config["reports.pdf"]:
        return config
    from dashboard.report.pdf import PdfError, chromium_path

    try:
        chromium_path(config["reports.chromium"])
    except PdfError:
        click.echo(f"Chromium not found ({config['reports.chromium']}): weekly report PDF "
                   "off, HTML only (apt-get install chromium for the PDF).")
        return config.with_overrides(reports__pdf=False)
    return config


def _demo_receiver(config):
    """Unless a webhook is configured, deliver alerts to a signed receiver in this process
    and print what it receives, so the demo shows the whole path to the on-call channel."""
    if config["alerts.webhook_url"]:
        return config
    import secrets

    from alerts.receiver import start_receiver

    def show(received) -> None:
        body = received.body if isinstance(received.body, dict) else {}
        click.echo(f"demo receiver <- {body.get('title', body)}")

    secret = secrets.token_hex(16)
    rx = start_receiver(secret=secret, on_receive=show)
    click.echo(f"demo receiver for alert webhooks at {rx.url} (HMAC-signed)")
    return config.with_overrides(alerts__webhook_url=rx.url, alerts__webhook_secret=secret)


@cli.command("hash-password")
@click.option("--method", type=click.Choice(["scrypt", "pbkdf2"]), default="scrypt",
              show_default=True)
def hash_password(method: str) -> None:
    """Print a salted hash of a password for the dashboard.users setting."""
    from dashboard.auth import hash_password as _hash

    password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    click.echo(_hash(password, method=method))


cli.add_command(agent)
cli.add_command(alerts_group)
cli.add_command(import_)
cli.add_command(export)
cli.add_command(fleet)
cli.add_command(report)
cli.add_command(simulate)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    try:
        cli.main(args=argv, prog_name="gpulens", standalone_mode=False)
    except click.exceptions.Abort:
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except _user_errors() as exc:
        click.echo(f"gpulens: error: {exc}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
