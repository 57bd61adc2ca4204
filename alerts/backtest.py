"""Backtesting: the service's evaluator replayed over stored history (issue 22).

    result = replay(rules, source, start, end, step_s=15.0, every_s=15.0)

At every evaluation time ``start + k * every_s`` up to ``end`` the replay builds the window
the service would have read at that moment (the last ``window_span_s(rules)`` of samples
on the ``step_s`` grid, the XID events of the xid rules' look-back), skips it when the
service would (no temperature in the last minute: alerts.runtime.fresh) and otherwise
runs ``alerts.engine.evaluate`` on it with the state of the previous evaluation: the same
detectors, state machine, hysteresis, grouping and inhibition as ``gpulens serve``.
Nothing is written and nothing is sent. Silences are not applied: the backtest says what
the rules would page, before anyone mutes them.

Speed: samples are read one chunk (an hour plus the window) at a time and gridded once;
each evaluation slices its window out of that grid (the same columns build_window gives
for that end, since evaluation times sit on the sampling grid of the chunk's end).

A source has three methods (times naive UTC):
``samples(since, until)`` (ts, node, gpu_index, temp_c, mem_temp_c, power_w,
throttle_thermal with ``since < ts <= until``), ``events(since, until)`` (XID events:
ts, node, gpu_index, code, rack, same bounds) and ``inventory()`` (node, gpu_index, rack,
model); :class:`WarehouseSource` reads them with the service's own queries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import numpy as np
import pandas as pd

from alerts import rules as rules_mod
from alerts.engine import evaluate
from alerts.model import FIRING, Alert, Notification, Rule, State
from alerts.runtime import events_span_s, fresh, window_span_s
from alerts.window import COLUMNS, Window, build_window

PRESENT = "_present"  # the gridded column marking where a sample exists
CHUNK_S = 3600.0  # seconds of evaluations per read of samples
INCIDENT_GRACE_S = 600.0  # a page up to this long after an incident ends is still its page


class Source(Protocol):
    def samples(self, since: datetime, until: datetime) -> pd.DataFrame: ...
    def events(self, since: datetime, until: datetime) -> pd.DataFrame: ...
    def inventory(self) -> pd.DataFrame: ...


class WarehouseSource:
    """History from the warehouse, through the queries the service's evaluation uses.
    ``reader`` returns a cursor (``Warehouse.reader``)."""

    def __init__(self, reader):
        self.reader = reader

    def samples(self, since: datetime, until: datetime) -> pd.DataFrame:
        from warehouse.queries import alerts as q

        return q.window_samples(self.reader(), now=until, span_s=(until - since).total_seconds())

    def events(self, since: datetime, until: datetime) -> pd.DataFrame:
        from warehouse.queries import alerts as q

        return q.window_events(self.reader(), now=until, span_s=(until - since).total_seconds())

    def inventory(self) -> pd.DataFrame:
        from warehouse.queries import alerts as q

        return q.gpu_inventory(self.reader())

    def first_sample(self) -> datetime | None:
        from warehouse.queries import alerts as q

        return q.first_sample_ts(self.reader())


@dataclass
class Replay:
    """What the rules would have done over ``[start, end]``."""

    start: datetime
    end: datetime
    every_s: float  # seconds between evaluations
    rules: tuple[Rule, ...]
    evaluations: int = 0  # evaluations run
    skipped: int = 0  # evaluation times without fresh telemetry (skipped, as the service)
    alerts: dict[str, Alert] = field(default_factory=dict)  # alert_id -> its last version
    notifications: list[Notification] = field(default_factory=list)

    @property
    def firings(self) -> list[Alert]:
        """Alerts that fired, in firing order."""
        fired = [a for a in self.alerts.values() if a.fired_at is not None]
        return sorted(fired, key=lambda a: (a.fired_at, a.fingerprint))

    @property
    def pages(self) -> list[Notification]:
        """The ``firing`` notifications (what pages the on-call)."""
        return [n for n in self.notifications if n.kind == "firing"]


def replay(rules: Iterable[Rule], source: Source, start: datetime, end: datetime, *,
           step_s: float = 15.0, every_s: float = 15.0, chunk_s: float = CHUNK_S,
           state: State | None = None,
           progress: Callable[[int, int], None] | None = None) -> Replay:
    """Evaluate ``rules`` at ``start, start + every_s, ... <= end`` over ``source``'s
    history (see module docstring). ``step_s``: the sampling period, seconds.
    ``progress(done, total)`` is called after each chunk with evaluation times done."""
    rules = tuple(rules)
    total = int((end - start).total_seconds() // every_s) + 1 if end >= start else 0
    done = 0
    out = Replay(start, end, every_s, rules)
    span_s, ev_span_s = window_span_s(rules), events_span_s(rules, step_s)
    inventory = source.inventory()
    state = state or State()
    t = start
    while t <= end:
        chunk_end = min(end, t + timedelta(seconds=chunk_s))
        times = _times(t, chunk_end, every_s)
        grid = _grid(source, inventory, times[-1], span_s + (times[-1] - t).total_seconds(),
                     step_s)
        events = source.events(t - timedelta(seconds=ev_span_s), times[-1])
        for now in times:
            win = _slice(grid, now, span_s, events, ev_span_s)
            if not fresh(win):
                out.skipped += 1
                continue
            result = evaluate(rules, win, now, state)
            state = result.state
            out.evaluations += 1
            for a in result.upserts:
                out.alerts[a.alert_id] = a
            out.notifications.extend(result.notifications)
        done += len(times)
        if progress is not None:
            progress(done, total)
        t = times[-1] + timedelta(seconds=every_s)
    return out


def _times(first: datetime, last: datetime, every_s: float) -> list[datetime]:
    n = int((last - first).total_seconds() // every_s) + 1
    return [first + timedelta(seconds=every_s * k) for k in range(n)]


def _grid(source: Source, inventory: pd.DataFrame, end: datetime, span_s: float,
          step_s: float) -> Window:
    """One window over ``(end - span_s, end]`` with the PRESENT column added."""
    frame = source.samples(end - timedelta(seconds=span_s), end)
    frame = frame.assign(**{PRESENT: 1.0})
    return build_window(frame, inventory, pd.DataFrame(), end, span_s, step_s,
                        columns=(*COLUMNS, PRESENT))


def _slice(grid: Window, now: datetime, span_s: float, events: pd.DataFrame,
           ev_span_s: float) -> Window:
    """The window build_window would give at ``now`` (a time on the grid's step)."""
    width = max(1, math.ceil(span_s / grid.step_s))
    back = round((grid.end - now).total_seconds() / grid.step_s)
    total = grid.series["temp_c"].shape[1]
    stop = total - back
    first = stop - width
    present = grid.series[PRESENT][:, max(0, first):stop]
    rows = np.flatnonzero(~np.isnan(present).all(axis=1))

    every_row = len(rows) == grid.n

    def cut(a: np.ndarray) -> np.ndarray:
        part = a[:, max(0, first):stop] if every_row else a[rows, max(0, first):stop]
        if first < 0:  # before the grid's start: no samples
            part = np.hstack([np.full((len(rows), -first), np.nan, np.float32), part])
        return part

    ev = events
    if len(ev):
        since = now - timedelta(seconds=ev_span_s)
        ev = ev[(ev["ts"] > since) & (ev["ts"] <= now)].reset_index(drop=True)
    pick = (lambda a: a) if every_row else (lambda a: a[rows])  # noqa: E731
    return Window(end=now, step_s=grid.step_s, node=pick(grid.node),
                  gpu_index=pick(grid.gpu_index), rack=pick(grid.rack), model=pick(grid.model),
                  series={c: cut(grid.series[c]) for c in COLUMNS}, events=ev)


# -- rules from settings and overrides ---------------------------------------------------
class RuleError(ValueError):
    """A rule override the user can fix; the message names it."""


def with_overrides(section: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The rules of an ``alerts`` settings section with ``{"gpu_temp.threshold": 90}``
    applied (values may be text, as typed on a command line)."""
    by_name = {r.name: r for r in rules_mod.DEFAULTS}
    values = dict(section)
    for key, raw in overrides.items():
        name, _, attr = str(key).partition(".")
        if key == "disabled":
            values[key] = str(raw)
            continue
        rule = by_name.get(name)
        if rule is None:
            raise RuleError(f"{key}: no rule {name!r} (rules: {', '.join(by_name)})")
        if attr == "severity":
            if raw not in ("info", "warning", "critical"):
                raise RuleError(f"{key}: {raw!r} is not info, warning or critical")
            values[key] = raw
        elif attr in rules_mod.RULE_FIELDS or attr in rule.params:
            current = rule.params.get(attr, 0.0)
            if isinstance(current, str):
                values[key] = str(raw)
                continue
            try:
                number = float(raw)
            except (TypeError, ValueError):
                raise RuleError(f"{key}: {str(raw)[:40]!r} is not a number") from None
            if not math.isfinite(number):
                raise RuleError(f"{key}: {str(raw)[:40]!r} is not a finite number")
            values[key] = number
        else:
            fields = (*rules_mod.RULE_FIELDS, *rule.params)
            raise RuleError(f"{key}: rule {name} has no {attr!r} (one of {', '.join(fields)})")
    rules = rules_mod.from_settings(values)
    for r in rules:
        if r.clear > r.threshold and r.kind != "xid":
            raise RuleError(f"{r.name}: clear {r.clear:g} above threshold {r.threshold:g}")
    return rules


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"gpu_temp": {"threshold": 90}}`` -> ``{"gpu_temp.threshold": 90}``."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# -- summaries --------------------------------------------------------------------------
def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat(timespec="seconds")


def firing_rows(r: Replay) -> list[dict]:
    """One row per alert that fired: rule, rack, entity, times and the firing seconds
    (to its resolution, or to the end of the replay while still firing)."""
    rows = []
    for a in r.firings:
        stop = a.resolved_at or r.end
        rows.append({
            "rule": a.rule, "severity": a.severity, "rack": a.rack, "node": a.node,
            "gpu_index": a.gpu_index, "active_since": _iso(a.active_since),
            "fired_at": _iso(a.fired_at), "resolved_at": _iso(a.resolved_at),
            "firing_s": round((stop - a.fired_at).total_seconds(), 1),
            "peak": round(float(a.peak), 2), "unit": a.unit,
            "state": a.state if a.state == FIRING else "resolved",
        })
    return rows


def notification_rows(r: Replay) -> list[dict]:
    """One row per notification that would have gone out (firing and resolved)."""
    return [{"kind": n.kind, "rule": n.rule, "severity": n.severity, "rack": n.rack,
             "group": n.group, "opened_at": _iso(n.opened_at), "created_at": _iso(n.created_at),
             "alerts": len(n.alerts)} for n in r.notifications]


def per_rule_rack(r: Replay) -> list[dict]:
    """Per rule and rack: firings, pages (firing notifications), resolved messages and
    the firing seconds summed over its alerts."""
    table: dict[tuple, dict] = {}

    def row(rule, rack):
        return table.setdefault((rule, rack or "-"), {
            "rule": rule, "rack": rack or "-", "firings": 0, "pages": 0, "resolved": 0,
            "firing_s": 0.0})

    for f in firing_rows(r):
        x = row(f["rule"], f["rack"])
        x["firings"] += 1
        x["firing_s"] = round(x["firing_s"] + f["firing_s"], 1)
    for n in r.notifications:
        row(n.rule, n.rack)["pages" if n.kind == "firing" else "resolved"] += 1
    return [table[k] for k in sorted(table)]


def incident_rows(r: Replay, incidents: Iterable, grace_s: float = INCIDENT_GRACE_S) -> list[dict]:
    """Time to fire and to page of each known incident (objects with kind, start, end,
    rack, node, gpu_index: collector.simulator's Incident) that starts in the replay.
    A firing or page matches when it is in the incident's rack (and node or GPU, when
    the incident names one) between its start and ``grace_s`` after its end."""
    rows = []
    for inc in incidents:
        if not (r.start <= inc.start <= r.end) and inc.end is not None:
            continue
        until = (inc.end or r.end) + timedelta(seconds=grace_s)
        lo = max(inc.start, r.start)
        fired = [a for a in r.firings if matches(inc, a.rack, a.node, a.gpu_index)
                 and lo <= a.fired_at <= until]
        paged = [n for n in r.pages if lo <= n.created_at <= until
                 and any(matches(inc, a.rack, a.node, a.gpu_index) for a in n.alerts)]
        first_fire = min((a.fired_at for a in fired), default=None)
        first_page = min((n.created_at for n in paged), default=None)
        rows.append({
            "kind": inc.kind, "rack": inc.rack, "node": inc.node, "gpu_index": inc.gpu_index,
            "start": _iso(inc.start), "end": _iso(inc.end),
            # an incident under way when the replay starts is timed from that start
            "timed_from": _iso(lo),
            "time_to_fire_s": None if first_fire is None
            else (first_fire - lo).total_seconds(),
            "time_to_page_s": None if first_page is None
            else (first_page - lo).total_seconds(),
            "pages": len(paged), "rules": sorted({n.rule for n in paged}),
        })
    return rows


def matches(inc, rack, node, gpu_index) -> bool:
    """Whether an alert's entity lies inside an incident's (rack, node, GPU)."""
    if inc.rack is not None and rack != inc.rack:
        return False
    if inc.node is not None and node is not None and node != inc.node:
        return False
    return not (inc.gpu_index is not None and gpu_index is not None
                and int(gpu_index) != int(inc.gpu_index))


def report(r: Replay, incidents: Iterable = ()) -> dict:
    """The whole backtest as one JSON-ready document."""
    return {
        "start": _iso(r.start), "end": _iso(r.end), "every_s": r.every_s,
        "evaluations": r.evaluations, "skipped": r.skipped,
        "rules": [{"name": x.name, "threshold": x.threshold, "clear": x.clear,
                   "hold_s": x.hold_s, "resolve_hold_s": x.resolve_hold_s,
                   "severity": x.severity, **x.params} for x in r.rules],
        "per_rule_rack": per_rule_rack(r), "firings": firing_rows(r),
        "notifications": notification_rows(r), "incidents": incident_rows(r, incidents),
    }


def run(warehouse, config, *, since: datetime, until: datetime,
        overrides: Mapping[str, Any] = (), every_s: float | None = None,
        incidents: Iterable = (), only: str | None = None,
        progress: Callable[[int, int], None] | None = None) -> dict:
    """A backtest over ``warehouse`` (the service's or a file's) with the configured rules
    and ``overrides``; starts no earlier than the oldest raw sample. Returns report().
    ``only``: replay just that rule and the rules that can inhibit it (the Thermal page's
    tuner): its rows equal those of a replay of every rule."""
    section = config.section("alerts")
    rules = with_overrides(section, dict(overrides or {}))
    if only is not None:
        rules = tuner_rules(rules, only)
    src = WarehouseSource(warehouse.reader)
    first = src.first_sample()
    if first is None or first > until:
        raise RuleError("no raw samples in the requested span to replay")
    step_s = config["collect.interval_s"]
    start = max(since, first)
    every = every_s or section["evaluate_interval_s"]
    if (until - start).total_seconds() / every > MAX_EVALUATIONS:
        raise RuleError(f"{(until - start).total_seconds() / every:.0f} evaluations asked; "
                        f"at most {MAX_EVALUATIONS} (shorten --since or raise --every)")
    incidents = [i for i in incidents if i.start <= until]
    return report(replay(rules, src, start, until, step_s=step_s, every_s=every,
                         progress=progress), incidents)


#: the rule settings the Thermal page's tuner changes (numbers; see alerts.rules)
TUNABLE = ("threshold", "clear", "hold_s", "resolve_hold_s")


def tuner_rules(rules: Iterable[Rule], name: str) -> tuple[Rule, ...]:
    """Rule ``name`` and the rack-scope rules, whose firing inhibits GPU-scope groups of
    the same rack (alerts.engine): grouping is per rule and inhibition the only tie
    between rules, so ``name``'s firings and pages are those of a replay of all rules."""
    rules = tuple(rules)
    if name not in {r.name for r in rules}:
        raise RuleError(f"no enabled rule {name!r} (rules: {', '.join(r.name for r in rules)})")
    return tuple(r for r in rules if r.name == name or r.scope == "rack")


def only_rule(doc: dict, name: str) -> dict:
    """report() ``doc`` cut to rule ``name``'s rows (firings, notifications, per rule and
    rack; incidents keep their pages by that rule)."""
    keep = {k: [x for x in doc[k] if x["rule"] == name]
            for k in ("per_rule_rack", "firings", "notifications")}
    return {**doc, **keep, "rules": [x for x in doc["rules"] if x["name"] == name]}


MAX_EVALUATIONS = 400_000  # about 70 days at 15 s


def quality(r: Replay, incidents: Iterable, gpus: int, grace_s: float = INCIDENT_GRACE_S,
            faults: Iterable = ()) -> dict:
    """How good the rules were over a replay against known ``incidents``:

    - ``recall``: share of incidents with at least one page (0-1);
    - ``false_pages_per_week_per_1000_gpus``: pages none of whose alerts lies in an
      incident (or in a known fault: ``faults`` with the same fields, e.g. the XIDs of
      failed runs), per week of replay and per 1,000 GPUs;
    - ``time_to_page_s``: from each paged rack incident's start to its first page;
    - ``pages_per_rack_incident``: pages tied to each rack (cooling) incident.
    """
    incidents, faults = list(incidents), list(faults)
    rows = incident_rows(r, incidents, grace_s)
    known = incidents + faults
    false = []
    for n in r.pages:
        tied = any(
            matches(i, a.rack, a.node, a.gpu_index)
            and max(i.start, r.start) - timedelta(seconds=grace_s) <= n.created_at
            <= (i.end or r.end) + timedelta(seconds=grace_s)
            for i in known for a in n.alerts)
        if not tied:
            false.append(n)
    weeks = max((r.end - r.start).total_seconds() / (7 * 86400), 1e-9)
    rack_rows = [x for x in rows if x["node"] is None]
    return {
        "incidents": len(rows),
        "recall": sum(x["pages"] > 0 for x in rows) / len(rows) if rows else float("nan"),
        "false_pages": len(false),
        "false_pages_per_week_per_1000_gpus": len(false) / weeks / (gpus / 1000.0),
        "time_to_page_s": sorted(x["time_to_page_s"] for x in rack_rows
                                 if x["time_to_page_s"] is not None),
        "pages_per_rack_incident": [x["pages"] for x in rack_rows],
        "false": [{"rule": n.rule, "rack": n.rack, "created_at": _iso(n.created_at)}
                  for n in false],
        "rows": rows,
    }
