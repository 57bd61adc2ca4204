"""``gpulens simulate``: write a simulated warehouse without serving (issue 16)."""

from __future__ import annotations

import click

from gpulens.config import load
from gpulens.settings import default
from gpulens.simulate import PROFILES
from gpulens.simulate import simulate as _simulate


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Optional TOML configuration; the options below override it.")
@click.option("--profile", type=click.Choice(list(PROFILES)),
              help="Named simulator settings: "
                   + "; ".join(f"{p.name}: {p.description}" for p in PROFILES.values())
                   + ". Default: the configuration's settings.")
@click.option("--days", type=float, required=True, help="Days of history to write.")
@click.option("--db", required=True, type=click.Path(dir_okay=False),
              help="Warehouse file to write (created if missing).")
@click.option("--racks", type=int,
              help=f"Racks in the simulated cluster (default {default('simulator.racks')}).")
@click.option("--nodes-per-rack", type=int,
              help=f"Nodes per rack (default {default('simulator.nodes_per_rack')}).")
@click.option("--seed", type=int,
              help=f"Seed of the simulated cluster (default {default('simulator.seed')}).")
def simulate(config_path, profile, days, db, racks, nodes_per_rack, seed) -> None:
    """Write DAYS of a simulated cluster's history into DB, ready for the dashboard."""
    config = load(config_path).with_overrides(
        service__db=db, simulator__racks=racks, simulator__nodes_per_rack=nodes_per_rack,
        simulator__seed=seed)
    done = _simulate(config, days=days, profile=profile, progress=True)
    rows = sum(done["rows"].values())
    click.echo(f"gpulens simulate: {days:g} days ({done['start']:%Y-%m-%d %H:%M} to "
               f"{done['end']:%Y-%m-%d %H:%M} UTC) of a simulated cluster"
               f"{'' if profile is None else f' (profile {profile})'}: {rows:,} rows in {db}; "
               f"{done['analytics']['failures_classified']} failed runs classified. "
               f"gpulens demo --db {db}, with the same simulator settings, serves it.")
