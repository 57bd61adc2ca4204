"""``gpulens agent``: serve this host's NVML readings in dcgm-exporter's format.

The lead registers it on the main group: ``cli.add_command(agent)`` in gpulens/cli.py.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading

import click


@click.command()
@click.option("--host", default="0.0.0.0", show_default=True,
              help="Address to bind; Prometheus or gpulens scrapes it.")
@click.option("--port", default=9400, show_default=True, type=int,
              help="TCP port (dcgm-exporter's default is 9400).")
@click.option("--interval", "interval_s", default=15.0, show_default=True, type=float,
              help="Seconds between NVML reads.")
@click.option("--node", default="", help="Node name in the Hostname label (default: hostname).")
def agent(host: str, port: int, interval_s: float, node: str) -> None:
    """Serve this host's GPUs at /metrics under dcgm-exporter's metric names."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from collector.agent import Agent
        from collector.nvml import NvmlSource

        source = NvmlSource(node=node, interval_s=interval_s)
    except ImportError:
        raise click.ClickException(
            "pynvml is missing: pip install nvidia-ml-py") from None
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise click.ClickException(
            f"cannot initialise NVML ({exc}); is the NVIDIA driver loaded on this host?"
        ) from None
    try:
        server = Agent(source, host=host, port=port)
    except OSError as exc:
        source.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {port} on {host} is already in use (dcgm-exporter?). Choose "
                "another with --port.") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    url = server.start()
    click.echo(f"gpulens agent is serving {url} ({len(source.reader.handles)} GPUs, "
               f"node {source.node})")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop()
