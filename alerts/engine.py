"""The evaluator: a pure function of (rules, data, now, previous state, silences).

State machine of one alert series (a rule and an entity), as in Prometheus:

    inactive --value >= threshold--> pending --held hold_s--> firing
    pending  --value < threshold---> inactive (dropped)
    firing   --value < clear for resolve_hold_s--> resolved (kept, leaves the state)

A firing alert with a value between ``clear`` and ``threshold`` stays firing
(hysteresis). Holds are counted from the evaluation times, so evaluate about every
``step``; a gap longer than the hold does not fire anything by itself.

Notifications: alerts of one rule in one rack form a group (see model.group_key). A
group opens with one ``firing`` notification when its first unsilenced alert fires, and
closes with one ``resolved`` notification when its last one resolves. Alerts that join
an open group are in the dashboard and the resolved message, but do not page again.
When only silenced alerts keep a group open, it closes without a message.

Inhibition (as Alertmanager's inhibit rules): while a rack-scope alert fires for a rack,
GPU-scope groups of that rack do not open, so a cooling failure pages once and not
again for each GPU that heats up or throttles; groups already open carry on. A GPU-scope
alert active while its rack's alert fires stays inhibited until it resolves (its
context keeps ``inhibited_by``, persisted with it): a GPU still throttling when the rack
alert resolves is the same incident, and paging then made one incident page twice
(issue 22).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from alerts.detectors import detect
from alerts.model import (
    FIRING,
    PENDING,
    RESOLVED,
    Alert,
    Group,
    Hit,
    Notification,
    Result,
    Rule,
    Silence,
    State,
    episode_key,
    fingerprint,
    short_hash,
)
from alerts.window import Window


def evaluate(rules: Iterable[Rule], data: Window, now: datetime, state: State | None = None,
             silences: Iterable[Silence] = (), cluster: str | None = None) -> Result:
    """One evaluation at ``now`` of ``rules`` over ``data``, continuing ``state``;
    ``cluster`` scopes the notifications' keys (model.episode_key)."""
    state = state or State()
    rules = tuple(rules)
    hits = {h_fp: h for rule in rules for h_fp, h in _keyed(detect(rule, data))}
    return step(rules, hits, now, state, tuple(silences), cluster)


def _keyed(hits: list[Hit]):
    for h in hits:
        yield fingerprint(h.rule, h.rack, h.node, h.gpu_index), h


def step(rules: tuple[Rule, ...], hits: dict[str, Hit], now: datetime, state: State,
         silences: tuple[Silence, ...], cluster: str | None = None) -> Result:
    """Advance ``state`` given this evaluation's hits (keyed by fingerprint)."""
    by_name = {r.name: r for r in rules}
    alerts: dict[str, Alert] = {}
    upserts: list[Alert] = []
    dropped: list[str] = []
    resolved: list[Alert] = []
    for fp in set(state.alerts) | set(hits):
        old, hit = state.alerts.get(fp), hits.get(fp)
        rule = by_name.get(hit.rule if hit else old.rule)
        if rule is None:  # a rule removed from the configuration: resolve what it left
            if old.state == FIRING:
                done = old.evolve(state=RESOLVED, resolved_at=now, last_eval=now)
                upserts.append(done)
                resolved.append(done)
            else:
                dropped.append(old.alert_id)
            continue
        new = _advance(rule, old, hit, now)
        if new is None:
            if old is not None:
                dropped.append(old.alert_id)
            continue
        upserts.append(new)
        if new.state == RESOLVED:
            resolved.append(new)
        else:
            alerts[fp] = new
    marked = _mark_inhibited(alerts)
    if marked:
        alerts.update(marked)
        upserts = [marked.get(a.fingerprint, a) if a.state != RESOLVED else a
                   for a in upserts]
    groups, notes = _notify(state, alerts, resolved, now, silences, cluster)
    return Result(State(alerts, groups), tuple(upserts), tuple(dropped), tuple(notes))


INHIBITED_BY = "inhibited_by"  # context key: the rack alert that inhibits a GPU alert


def _mark_inhibited(alerts: dict[str, Alert]) -> dict[str, Alert]:
    """GPU-scope alerts (pending or firing) of racks with a firing rack-scope alert, not
    yet marked, with ``inhibited_by`` naming that rack alert's fingerprint."""
    hot = {a.rack: a.fingerprint for a in alerts.values()
           if a.state == FIRING and a.scope == "rack" and a.rack is not None}
    return {fp: a.evolve(context={**a.context, INHIBITED_BY: hot[a.rack]})
            for fp, a in alerts.items()
            if a.scope == "gpu" and a.rack in hot and INHIBITED_BY not in a.context}


def _advance(rule: Rule, old: Alert | None, hit: Hit | None, now: datetime) -> Alert | None:
    """The alert after this evaluation, or None when it is (or goes back to) inactive."""
    value = hit.value if hit else float("nan")
    above = hit is not None and value >= rule.threshold
    held = hit is not None and value >= rule.clear
    if old is None:
        if not above:
            return None
        old = Alert(
            alert_id=short_hash(fingerprint(rule.name, hit.rack, hit.node, hit.gpu_index),
                                now.isoformat()),
            fingerprint=fingerprint(rule.name, hit.rack, hit.node, hit.gpu_index),
            rule=rule.name, severity=rule.severity, scope=rule.scope, rack=hit.rack,
            node=hit.node, gpu_index=hit.gpu_index, state=PENDING, value=value,
            threshold=rule.threshold, unit=rule.unit, active_since=now, peak=value,
        )
    fresh = {"last_eval": now}
    if hit is not None:
        context = dict(hit.context)
        if INHIBITED_BY in old.context:  # kept for the episode's life (see _mark_inhibited)
            context[INHIBITED_BY] = old.context[INHIBITED_BY]
        fresh.update(value=value, context=context, peak=max(old.peak, value))
    if old.state == PENDING:
        if not above:
            return None
        if (now - old.active_since).total_seconds() >= rule.hold_s:
            return old.evolve(state=FIRING, fired_at=now, **fresh)
        return old.evolve(**fresh)
    # firing
    if held:
        return old.evolve(clear_since=None, **fresh)
    clear_since = old.clear_since or now
    if (now - clear_since).total_seconds() >= rule.resolve_hold_s:
        return old.evolve(state=RESOLVED, resolved_at=now, clear_since=clear_since, **fresh)
    return old.evolve(clear_since=clear_since, **fresh)


def silenced(alert: Alert, silences: tuple[Silence, ...], now: datetime) -> bool:
    return any(s.matches(alert, now) for s in silences)


def _notify(state: State, alerts: dict[str, Alert], resolved: list[Alert], now: datetime,
            silences: tuple[Silence, ...], cluster: str | None = None):
    """Open and close notification groups; return (open groups, notifications)."""
    loud: dict[str, list[Alert]] = {}
    quiet: set[str] = set()
    for a in alerts.values():
        if a.state != FIRING:
            continue
        inhibited = (a.scope == "gpu" and INHIBITED_BY in a.context
                     and a.group_key not in state.groups)
        if inhibited or silenced(a, silences, now):
            quiet.add(a.group_key)
        else:
            loud.setdefault(a.group_key, []).append(a)
    groups = dict(state.groups)
    notes = []
    for key in sorted(loud):
        if key not in groups:
            groups[key] = Group(key, now)
            notes.append(_note("firing", groups[key], tuple(loud[key]), now, cluster))
    for key in sorted(set(groups) - set(loud)):
        group = groups.pop(key)
        if key in quiet:
            continue
        ended = tuple(a for a in resolved if a.group_key == key)
        if ended:
            notes.append(_note("resolved", group, ended, now, cluster))
    return groups, notes


def _note(kind: str, group: Group, alerts: tuple[Alert, ...], now: datetime,
          cluster: str | None) -> Notification:
    first = alerts[0]
    severity = max((a.severity for a in alerts), key=("info", "warning", "critical").index)
    return Notification(
        key=episode_key(cluster, group.key, group.opened_at, kind), kind=kind,
        group=group.key, rule=first.rule, severity=severity, rack=first.rack,
        opened_at=group.opened_at, created_at=now,
        alerts=tuple(sorted(alerts, key=lambda a: (-a.value, a.fingerprint))),
    )
