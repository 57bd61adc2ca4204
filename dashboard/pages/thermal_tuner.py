"""The Thermal page's rule tuner (issue 22): pick a rule, change its threshold, clear level
or hold times, see what it would have done over the last N days, and save the change.

The backtest is ``alerts.backtest.run`` with ``only=rule`` (the rule and the rack rules
that can inhibit it): its rows are those of ``gpulens alerts backtest --set ...``. It runs
in a background thread, one at a time per process, and the page polls its progress;
the window is bounded to ``MAX_DAYS``. Anyone may backtest; only operators save. Saving
writes ``alerts.<rule>.<key>`` into the service's configuration file
(``gpulens.config_edit``) and asks the service to reload its rules
(``dashboard.context.rules_saved``). Dash's callback POSTs carry the CSRF token like the
page's other actions (dashboard.web_security).
"""

from __future__ import annotations

import os
import threading
import uuid
from datetime import timedelta

import pandas as pd
from dash import Input, Output, State, callback, dcc, html, no_update

from alerts import backtest
from alerts import rules as rules_mod
from dashboard import auth, components, context, ids
from dashboard.components import Column, num
from dashboard.figures import thermal as fig

MAX_DAYS = 30  # longest backtest window the page offers, days
DEFAULT_DAYS = 7
POLL_MS = 1000
FIELDS = backtest.TUNABLE
LABELS = {"threshold": "Threshold", "clear": "Clears below", "hold_s": "Hold (s)",
          "resolve_hold_s": "Resolve hold (s)"}

_jobs: dict[str, dict] = {}  # job id -> {"done", "total", "doc", "error", "rule"}
_lock = threading.Lock()
KEEP_JOBS = 8


def field_id(key: str) -> str:
    return f"{ids.TUNER_FIELD}-{key}"


def _config():
    from gpulens.config import load

    return context.config() or load(None, env={})


def current_rules() -> dict[str, rules_mod.Rule]:
    """The configured (enabled) rules by name, as the service evaluates them."""
    return {r.name: r for r in rules_mod.from_settings(_config().section("alerts"))}


def panel() -> html.Section:
    """The tuner's panel; the Save button is disabled for viewers."""
    rules = current_rules()
    first = "rack_cooling" if "rack_cooling" in rules else next(iter(rules), None)
    operator = auth.can_operate()
    inputs = [html.Label([LABELS[k], dcc.Input(id=field_id(k), type="number", debounce=True,
                                               step="any", className="tuner-input")])
              for k in FIELDS]
    return components.panel(
        "Rule tuner",
        f"Change a rule and replay the last days of telemetry through the service's "
        f"evaluator (nothing is sent): its firings and pages per rack. Up to {MAX_DAYS} "
        "days; only operators save.",
        html.Div([
            html.Label(["Rule", dcc.Dropdown(id=ids.TUNER_RULE, options=list(rules),
                                             value=first, clearable=False)]),
            *inputs,
            html.Label(["Days", dcc.Input(id=ids.TUNER_DAYS, type="number", min=1,
                                          max=MAX_DAYS, step=1, value=DEFAULT_DAYS)]),
            html.Button("Backtest", id=ids.TUNER_RUN, className="btn"),
            html.Button("Save to configuration", id=ids.TUNER_SAVE, className="btn",
                        disabled=not operator,
                        title="" if operator else "Only operators save rule changes"),
        ], className="tuner-form"),
        html.Div(id=ids.TUNER_CURRENT, className="panel-sub"),
        html.Div(None if operator else f"{auth.current_user()} is a viewer: you can "
                 "backtest, saving needs the operator role.", className="panel-sub"),
        html.Div(id=ids.TUNER_SAVE_MSG, className="panel-sub", role="status"),
        html.Div(id=ids.TUNER_STATUS, className="panel-sub", role="status"),
        html.Div(id=ids.TUNER_RESULT),
        dcc.Store(id=ids.TUNER_JOB),
        dcc.Interval(id=ids.TUNER_POLL, interval=POLL_MS, disabled=True),
    )


def _fmt(v) -> str:
    return f"{v:g}"


def show_rule(name):
    """The picked rule's configured values into the inputs."""
    rule = current_rules().get(name)
    if rule is None:
        return *[None] * len(FIELDS), "No rule picked."
    values = [getattr(rule, k) for k in FIELDS]
    unit = rule.unit or "1 = active"
    text = (f"{rule.name} ({rule.severity}, {rule.scope}, unit {unit}): configured "
            + ", ".join(f"{LABELS[k].lower()} {_fmt(v)}" for k, v in zip(FIELDS, values,
                                                                          strict=True)))
    return *values, text


def overrides_for(name: str, values) -> dict[str, float]:
    """``{"rule.key": value}`` of the inputs; RuleError for an empty or bad one."""
    out = {}
    for key, value in zip(FIELDS, values, strict=True):
        if value is None or value == "":
            raise backtest.RuleError(f"{LABELS[key]}: enter a number")
        out[f"{name}.{key}"] = value
    backtest.with_overrides(_config().section("alerts"), out)  # checks them
    return {k: float(v) for k, v in out.items()}


def _days(days) -> float:
    try:
        d = float(days)
    except (TypeError, ValueError):
        raise backtest.RuleError(f"Days: enter a number from 1 to {MAX_DAYS}") from None
    if not 1 <= d <= MAX_DAYS:
        raise backtest.RuleError(f"Days: {d:g} is outside 1 to {MAX_DAYS}")
    return d


def start_job(name: str, days: float, overrides: dict) -> str:
    """Start the backtest in a thread; returns its job id. RuleError when one runs."""
    with _lock:
        if any(j["doc"] is None and j["error"] is None for j in _jobs.values()):
            raise backtest.RuleError("a backtest is already running; try again when it ends")
        job_id = uuid.uuid4().hex
        job = {"rule": name, "done": 0, "total": 0, "doc": None, "error": None}
        _jobs[job_id] = job
        for old in list(_jobs)[:-KEEP_JOBS]:
            del _jobs[old]
    wh, config, now = context.warehouse(), _config(), context.now()

    def progress(done: int, total: int) -> None:
        job["done"], job["total"] = done, total

    def work() -> None:
        try:
            doc = backtest.run(wh, config, since=now - timedelta(days=days), until=now,
                               overrides=overrides, only=name, progress=progress)
            job["doc"] = backtest.only_rule(doc, name)
        except backtest.RuleError as exc:
            job["error"] = str(exc)
        except Exception as exc:  # shown on the page, not lost in a thread
            job["error"] = f"the backtest failed: {type(exc).__name__}: {exc}"

    threading.Thread(target=work, name="gpulens-tuner", daemon=True).start()
    return job_id


def run_backtest(n_clicks, name, days, *values):
    """Start a backtest of the inputs; its progress shows in the status line."""
    if not n_clicks:
        return no_update, no_update, no_update
    if not name:
        return no_update, True, "Pick a rule first."
    try:
        overrides = overrides_for(name, values)
        job_id = start_job(name, _days(days), overrides)
    except backtest.RuleError as exc:
        return no_update, True, f"Cannot backtest: {exc}"
    return {"job": job_id, "days": _days(days), "settings": overrides}, False, \
        f"Backtesting {name} over {_days(days):g} days…"


PER_RACK_COLUMNS = (Column("rack", "Rack"), num("firings", "Firings"), num("pages", "Pages"),
                    num("resolved", "Resolved"), num("firing_min", "Firing (min)", 1))
NOTE_COLUMNS = (Column("created_at", "Sent at (UTC)"), Column("kind", "Kind"),
                Column("rack", "Rack"), Column("group", "Group"), num("alerts", "Alerts"))


def summary(doc: dict) -> dict:
    """Totals of a tuner result: firings, pages, resolved, firing minutes (all racks)."""
    rows = doc["per_rule_rack"]
    return {"firings": sum(r["firings"] for r in rows), "pages": sum(r["pages"] for r in rows),
            "resolved": sum(r["resolved"] for r in rows),
            "firing_min": round(sum(r["firing_s"] for r in rows) / 60.0, 1)}


def render(doc: dict, name: str, settings: dict) -> html.Div:
    """The result: a sentence of totals, the per-rack figure and tables."""
    s = summary(doc)
    changed = ", ".join(f"{k.split('.', 1)[1]} {_fmt(v)}" for k, v in settings.items())
    head = html.P([
        html.B(f"{s['firings']} firings, {s['pages']} pages", id="tuner-totals",
               **{"data-firings": str(s["firings"]), "data-pages": str(s["pages"])}),
        f" ({s['resolved']} resolved, {s['firing_min']:g} min firing) of {name} with "
        f"{changed}, {doc['start']} .. {doc['end']} UTC: {doc['evaluations']} evaluations "
        f"({doc['skipped']} without fresh samples)."])
    per_rack = pd.DataFrame(doc["per_rule_rack"])
    if len(per_rack):
        per_rack["firing_min"] = per_rack["firing_s"] / 60.0
    return html.Div([
        head,
        dcc.Graph(figure=fig.tuner_per_rack(doc["per_rule_rack"], name),
                  config=components.GRAPH_CONFIG),
        components.table(per_rack, PER_RACK_COLUMNS, table_id="tuner-per-rack",
                         empty_message=f"{name} would not have fired."),
        html.H3("Notifications that would have gone out"),
        components.table(pd.DataFrame(doc["notifications"]), NOTE_COLUMNS,
                         table_id="tuner-notifications",
                         empty_message="No notification would have gone out."),
    ])


def poll_backtest(_n, data):
    """The running backtest's progress, then its result (or its error)."""
    job = _jobs.get((data or {}).get("job", ""))
    if job is None:
        return no_update, "That backtest is no longer known; run it again.", True
    if job["error"] is not None:
        return components.empty(f"Backtest failed: {job['error']}"), "", True
    if job["doc"] is None:
        pct = 100.0 * job["done"] / job["total"] if job["total"] else 0.0
        return no_update, f"Backtesting {job['rule']}: {pct:.0f} % " \
                          f"({job['done']:,} of {job['total']:,} evaluation times)", False
    return render(job["doc"], job["rule"], data.get("settings", {})), "", True


def save_rule(n_clicks, name, *values):
    """Write the inputs to the configuration file (operators only) and reload the rules."""
    from gpulens.config import BY_NAME, ConfigError
    from gpulens.config_edit import set_values

    if not n_clicks:
        return no_update
    if not auth.can_operate():
        return f"{auth.current_user()} is a viewer: saving rule changes needs the " \
               "operator role."
    config = context.config()
    path = getattr(config, "source", "defaults")
    if config is None or path == "defaults" or not os.path.isfile(path):
        return "Not saved: this service runs without a configuration file; start it " \
               "with --config FILE to save rule changes."
    try:
        settings = {f"alerts.{k}": v for k, v in overrides_for(name, values).items()}
        set_values(path, settings)
    except (backtest.RuleError, ConfigError) as exc:
        return f"Not saved: {exc}"
    env = [BY_NAME[k].env for k in settings if BY_NAME[k].env in os.environ]
    reloaded = context.rules_saved(settings)
    text = f"Saved {name} to {path}: " + ", ".join(
        f"{k.rsplit('.', 1)[1]} = {_fmt(v)}" for k, v in settings.items()) + ". "
    text += ("The service reloaded its rules: the next evaluation uses them." if reloaded
             else "Restart gpulens for the service to use them.")
    if env:
        text += f" Note: {', '.join(env)} set in the service's environment wins at restart."
    return text


def register() -> None:
    """Register the callbacks; the Thermal page calls it each time Dash loads the page
    (this module is not a page, and dashboard.app forgets page callbacks per app)."""
    callback(
        *[Output(field_id(k), "value") for k in FIELDS],
        Output(ids.TUNER_CURRENT, "children"),
        Input(ids.TUNER_RULE, "value"),
    )(show_rule)
    callback(
        Output(ids.TUNER_JOB, "data"),
        Output(ids.TUNER_POLL, "disabled"),
        Output(ids.TUNER_STATUS, "children"),
        Input(ids.TUNER_RUN, "n_clicks"),
        State(ids.TUNER_RULE, "value"),
        State(ids.TUNER_DAYS, "value"),
        *[State(field_id(k), "value") for k in FIELDS],
        prevent_initial_call=True,
    )(run_backtest)
    callback(
        Output(ids.TUNER_RESULT, "children"),
        Output(ids.TUNER_STATUS, "children", allow_duplicate=True),
        Output(ids.TUNER_POLL, "disabled", allow_duplicate=True),
        Input(ids.TUNER_POLL, "n_intervals"),
        State(ids.TUNER_JOB, "data"),
        prevent_initial_call=True,
    )(poll_backtest)
    callback(
        Output(ids.TUNER_SAVE_MSG, "children"),
        Input(ids.TUNER_SAVE, "n_clicks"),
        State(ids.TUNER_RULE, "value"),
        *[State(field_id(k), "value") for k in FIELDS],
        prevent_initial_call=True,
    )(save_rule)

