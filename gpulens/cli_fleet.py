"""``gpulens fleet``: every cluster of a Parquet lake side by side (issue 18).

    gpulens fleet --lake /lake/gpulens [--config gpulens.toml] [--host H] [--port P]

Reads the lake that each cluster's gpulens writes (``gpulens export parquet`` or the
service's lake job; ``lake.dir`` by default) with DuckDB, never a warehouse file, so it
runs anywhere the lake is readable, beside or away from the services. Served by waitress
like ``gpulens serve`` with the same defaults: 127.0.0.1 unless ``service.host`` or
``--host`` say otherwise, the ``dashboard.*`` login, proxy and Host settings. Sessions
live in this process's memory (``dashboard.secret_key`` keeps logins across restarts).
"""

from __future__ import annotations

import dataclasses
import errno
import sys
from pathlib import Path

import click

from gpulens.config import load


@click.command("fleet")
@click.option("--lake", help="The lake folder (default: the lake.dir setting).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (lake.dir, service.host/port, dashboard.*, the "
                   "analytics settings applied to every cluster).")
@click.option("--host", help="Address to bind (default: service.host, 127.0.0.1).")
@click.option("--port", type=int, help="Port (default: service.port, 8050; 0: any free).")
def fleet(lake, config_path, host, port) -> None:
    """Serve the fleet view: the clusters of a Parquet lake side by side."""
    import waitress

    from dashboard.auth import AuthConfig
    from dashboard.fleet_app import create_fleet_app
    from warehouse.analytics import Options
    from warehouse.queries.lake_fleet import Lake

    config = load(config_path).with_overrides(service__host=host, service__port=port)
    where = lake or config["lake.dir"]
    if "://" not in where and not Path(where).is_dir():
        raise click.ClickException(f"no lake folder at {where}: pass the folder the "
                                   "clusters export into with --lake (or set lake.dir).")
    lake = Lake(where, memory_limit_mb=config["warehouse.memory_limit_mb"])
    names = lake.clusters()
    auth_config = dataclasses.replace(AuthConfig.from_settings(config), state_path="")
    app = create_fleet_app(lake, auth_config=auth_config, options=Options.from_settings(config))
    app.server.add_url_rule("/healthz", "healthz", lambda: {"status": "ok",
                                                            "lake": lake.path})
    host, port = config["service.host"], config["service.port"]
    try:
        server = waitress.create_server(app.server, host=host, port=port,
                                        threads=config["service.threads"])
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"port {port} on {host} is already in use. Choose "
                                       "another with --port.") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    click.echo(f"gpulens fleet is serving http://{server.effective_host}:"
               f"{server.effective_port}/  (lake {lake.path}: "
               f"{len(names)} clusters{': ' + ', '.join(names) if names else ''})")
    click.echo("Press Ctrl+C to stop.")
    sys.stdout.flush()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        lake.close()
