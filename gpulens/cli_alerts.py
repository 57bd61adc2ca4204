"""``gpulens alerts``: list, silence, acknowledge, test the sinks, and backtest the rules.

While ``gpulens serve`` runs it owns the database, so these commands talk to its HTTP
API (``--url``, default http://127.0.0.1:8050); when nothing answers there they open the
warehouse file themselves (``--db``, default the configuration's ``service.db``).
"""

from __future__ import annotations

import getpass
import json

import click
import requests

from gpulens.config import load
from gpulens.service_client import ServiceClient, error_message, status_of

DEFAULT_URL = "http://127.0.0.1:8050"


class _Api:
    """The service's alerts API over HTTP (with its CSRF token: gpulens/service_client.py)."""

    def __init__(self, url: str):
        self.client = ServiceClient(url)
        self.base = self.client.base + "/api/alerts"

    def call(self, method: str, path: str, body: dict | None = None, **query):
        from urllib.parse import urlencode

        qs = {k: v for k, v in query.items() if v not in (None, "", False)}
        target = "/api/alerts" + path + (("?" + urlencode(qs)) if qs else "")
        try:
            return self.client.json(method, target, body)
        except requests.HTTPError as exc:
            if status_of(exc) == 401:
                raise click.ClickException(
                    f"the service at {self.base} asks for a login (dashboard.users or a "
                    "trusted proxy): use the dashboard's Thermal page, or run this command "
                    "while the service is stopped") from None
            raise click.ClickException(error_message(exc)) from None


def _reachable(url: str) -> bool:
    try:  # any answer, an error too: something answers; the real call shows its error
        requests.get(url.rstrip("/") + "/api/alerts?since_s=1", timeout=2)
        return True
    except requests.RequestException:
        return False


def _run(ctx, remote, local):
    """``remote(api)`` against a running service, else ``local(warehouse, now)``."""
    opts = ctx.obj
    if _reachable(opts["url"]):
        return remote(_Api(opts["url"]))
    from alerts import ops
    from warehouse import Warehouse
    from warehouse.clock import utcnow

    config = load(opts["config"])
    db = opts["db"] or config["service.db"]
    with Warehouse(db, memory_limit_mb=config["warehouse.memory_limit_mb"]) as wh:
        try:
            return local(wh, utcnow())
        except ops.OpsError as exc:
            raise click.ClickException(str(exc)) from None


def _show(rows: list[dict], columns: tuple[str, ...], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("(none)")
        return
    click.echo("  ".join(columns))
    for r in rows:
        click.echo("  ".join("-" if r.get(c) is None else str(r.get(c)) for c in columns))


@click.group()
@click.option("--url", default=DEFAULT_URL, show_default=True,
              help="Address of a running gpulens service.")
@click.option("--db", help="Warehouse file to open when no service answers.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (sinks for `test`, service.db).")
@click.pass_context
def alerts(ctx, url, db, config_path) -> None:
    """Thermal alerts: list, silence, acknowledge, test the sinks, backtest."""
    ctx.obj = {"url": url, "db": db, "config": config_path}


@alerts.command("list")
@click.option("--state", type=click.Choice(["pending", "firing", "resolved"]))
@click.option("--rack")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(ctx, state, rack, as_json) -> None:
    """Alerts active in the last day, firing first."""
    from alerts import ops

    rows = _run(ctx, lambda api: api.call("GET", "", state=state, rack=rack)["alerts"],
                lambda wh, now: ops.list_alerts(wh, now, state=state, rack=rack))
    _show(rows, ("alert_id", "state", "severity", "rule", "rack", "node", "gpu_index",
                 "value", "unit", "fired_at", "resolved_at", "acked_by"), as_json)


@alerts.command()
@click.option("--rule", help="Rule name, e.g. rack_cooling.")
@click.option("--rack")
@click.option("--node")
@click.option("--for", "duration", required=True, help="How long, e.g. 30m, 2h, 1d.")
@click.option("--comment", required=True, help="Why (shown to the on-call).")
@click.option("--by", default=getpass.getuser, help="Who silences (default: you).")
@click.pass_context
def silence(ctx, rule, rack, node, duration, comment, by) -> None:
    """Mute notifications of alerts matching every given matcher."""
    from alerts import ops

    body = {"rule": rule, "rack": rack, "node": node, "duration": duration,
            "comment": comment, "created_by": by}
    made = _run(ctx, lambda api: api.call("POST", "/silences", body)["silence"],
                lambda wh, now: ops.add_silence(
                    wh, now, rule=rule, rack=rack, node=node,
                    duration_s=ops.parse_duration(duration), comment=comment,
                    created_by=by))
    click.echo(f"silence {made['silence_id']} until {made['expires_at']}")


@alerts.command()
@click.argument("silence_id")
@click.pass_context
def unsilence(ctx, silence_id) -> None:
    """End a silence now."""
    from alerts import ops

    def local(wh, now):
        if not ops.expire_silence(wh, now, silence_id):
            raise click.ClickException(f"no active silence {silence_id!r}")

    _run(ctx, lambda api: api.call('DELETE', f"/silences/{silence_id}"), local)
    click.echo(f"silence {silence_id} ended")


@alerts.command()
@click.option("--all", "include_expired", is_flag=True, help="Include expired silences.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def silences(ctx, include_expired, as_json) -> None:
    """Active silences."""
    from alerts import ops

    rows = _run(ctx, lambda api: api.call("GET", "/silences", all=include_expired)["silences"],
                lambda wh, now: ops.list_silences(wh, now, include_expired=include_expired))
    _show(rows, ("silence_id", "rule", "rack", "node", "expires_at", "created_by", "comment"),
          as_json)


@alerts.command()
@click.argument("alert_id")
@click.option("--comment", default="")
@click.option("--by", default=getpass.getuser, help="Who acknowledges (default: you).")
@click.pass_context
def ack(ctx, alert_id, comment, by) -> None:
    """Acknowledge an alert (it stays firing; the dashboard shows who took it)."""
    from alerts import ops

    body = {"by": by, "comment": comment}
    _run(ctx, lambda api: api.call("POST", f"/{alert_id}/ack", body),
         lambda wh, now: ops.ack(wh, now, alert_id, by=by, comment=comment))
    click.echo(f"alert {alert_id} acknowledged by {by}")


@alerts.command()
@click.option("--sink", required=True, type=click.Choice(["webhook", "slack", "alertmanager"]))
@click.pass_context
def test(ctx, sink) -> None:
    """Send a test notification to one configured sink, now."""
    from alerts.runtime import send_test, utcnow
    from alerts.sinks import DeliveryError, configured

    config = load(ctx.obj["config"])
    cfg = config.section("alerts")
    sinks = configured(cfg)
    if sink not in sinks:
        raise click.ClickException(
            f"sink {sink} has no URL: set alerts.{sink}_url in the configuration or "
            f"GPULENS_ALERTS_{sink.upper()}_URL")
    try:
        key = send_test(sinks[sink], cfg["dashboard_url"], utcnow(), timeout_s=cfg["timeout_s"],
                        cluster=config["cluster.name"])
    except DeliveryError as exc:
        raise click.ClickException(f"test notification not delivered: {exc}") from None
    click.echo(f"test notification {key} delivered to {sink}")


@alerts.command()
@click.option("--since", default="30d", show_default=True,
              help="Start: a span before now (30d, 12h) or an ISO time (UTC).")
@click.option("--until", default=None, help="End (default: now), same forms as --since.")
@click.option("--rules", "rules_file", type=click.Path(exists=True, dir_okay=False),
              help="TOML with rule settings, as the configuration's [alerts] table.")
@click.option("--set", "sets", multiple=True, metavar="RULE.KEY=VALUE",
              help="Change one rule setting, e.g. gpu_temp.threshold=90 (repeatable).")
@click.option("--every", "every_s", type=float,
              help="Seconds between evaluations (default: alerts.evaluate_interval_s).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for backtest.json and the CSV tables.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.pass_context
def backtest(ctx, since, until, rules_file, sets, every_s, out_dir, as_json) -> None:
    """Replay stored history through the alert rules; nothing is sent.

    Prints per rule and rack the firings, the pages (firing notifications) and their
    firing time, then the time to page of each known incident (simulated clusters)."""
    from alerts import backtest as bt
    from gpulens.cli_export import _when
    from warehouse.clock import utcnow

    overrides = _overrides(rules_file, sets)
    now = utcnow()
    start, end = _when(since), _when(until, now)
    body = {"since": start.isoformat(), "until": end.isoformat(), "settings": overrides}
    if every_s:
        body["every_s"] = every_s

    def remote(api):
        try:
            return api.client.json("POST", "/api/alerts/backtest", body, timeout=3600)
        except requests.HTTPError as exc:
            raise click.ClickException(error_message(exc)) from None

    def local(wh, _now):
        config = load(ctx.obj["config"])
        try:
            return bt.run(wh, config, since=start, until=end, overrides=overrides,
                          every_s=every_s)
        except bt.RuleError as exc:
            raise click.ClickException(str(exc)) from None

    doc = _run(ctx, remote, local)
    if out_dir:
        _save(doc, out_dir)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"backtest {doc['start']} .. {doc['end']}: {doc['evaluations']} evaluations "
               f"every {doc['every_s']:g} s ({doc['skipped']} without fresh samples)")
    _show(doc["per_rule_rack"], ("rule", "rack", "firings", "pages", "resolved", "firing_s"),
          False)
    if doc["incidents"]:
        click.echo("incidents:")
        _show(doc["incidents"], ("kind", "rack", "node", "gpu_index", "start", "timed_from",
                                 "time_to_fire_s", "time_to_page_s", "pages"), False)
    if out_dir:
        click.echo(f"saved to {out_dir}")


def _overrides(rules_file: str | None, sets: tuple[str, ...]) -> dict:
    """Rule settings from ``--rules FILE`` then ``--set KEY=VALUE`` (the latter win)."""
    import tomllib

    from alerts.backtest import flatten

    values: dict = {}
    if rules_file:
        try:
            with open(rules_file, "rb") as fh:
                table = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise click.BadParameter(f"{rules_file}: {exc}", param_hint="--rules") from None
        values.update(flatten(table.get("alerts", table)))
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected RULE.KEY=VALUE", param_hint="--set")
        values[key.strip()] = value.strip()
    return values


def _save(doc: dict, out_dir: str) -> None:
    """backtest.json plus one CSV per table (per_rule_rack, firings, notifications,
    incidents) in ``out_dir``."""
    import csv
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "backtest.json").write_text(json.dumps(doc, indent=2))
    for name in ("per_rule_rack", "firings", "notifications", "incidents"):
        rows = doc[name]
        with open(out / f"{name}.csv", "w", newline="") as fh:
            if rows:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows({k: (";".join(v) if isinstance(v, list) else v)
                             for k, v in r.items()} for r in rows)
