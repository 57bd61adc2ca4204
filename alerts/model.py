"""The value types of alerting: rules, hits, alerts, silences, state and notifications.

All of them are plain frozen dataclasses so the evaluator stays a pure function and the
tests can build them by hand. Times are naive UTC ``datetime``; durations are seconds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

SEVERITIES = ("info", "warning", "critical")

# Alert states, as in Prometheus alerting rules ("inactive" alerts are not stored).
PENDING, FIRING, RESOLVED = "pending", "firing", "resolved"


@dataclass(frozen=True)
class Rule:
    """One alerting rule.

    ``kind`` picks the detector (see alerts.detectors). The detector gives each entity
    (GPU, node or rack, per ``scope``) a value in the rule's unit, higher is worse:
    at or above ``threshold`` the condition holds; an alert that fires stays firing until
    the value falls below ``clear`` (hysteresis, ``clear <= threshold``) for
    ``resolve_hold_s`` seconds. ``hold_s`` is how long the condition must hold, counted
    over consecutive evaluations, before a pending alert fires. ``params`` are the
    detector's own knobs (see each detector's docstring).
    """

    name: str
    kind: str
    scope: str
    severity: str
    threshold: float
    clear: float
    hold_s: float
    resolve_hold_s: float
    unit: str = ""
    summary: str = ""  # one line, what this rule means for the operator
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """A detector's finding: an entity whose value is at or above the rule's ``clear``."""

    rule: str
    value: float
    rack: str | None = None
    node: str | None = None
    gpu_index: int | None = None
    context: dict[str, Any] = field(default_factory=dict)  # e.g. temp_c, power_w, codes


def entity(rack: str | None, node: str | None, gpu_index: int | None) -> str:
    """A readable entity name: ``rack r03``, ``node n012`` or ``n012/gpu3``."""
    if node is not None and gpu_index is not None:
        return f"{node}/gpu{gpu_index}"
    if node is not None:
        return node
    return rack or "fleet"


def fingerprint(rule: str, rack, node, gpu_index) -> str:
    """Stable identity of an alert series: the rule plus the entity it is about."""
    return f"{rule}:{entity(rack, node, gpu_index)}"


def group_key(rule: str, rack: str | None, node: str | None) -> str:
    """Alerts of one rule in one rack share a notification (rack unknown: the node)."""
    return f"{rule}/{rack or node or 'fleet'}"


def short_hash(*parts: object) -> str:
    """A 24-hex-digit SHA-256 of the parts: ids and idempotency keys."""
    text = "|".join("" if p is None else str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


KEY_QUANTUM_S = 60  # seconds: episode starts within one such slot share a key (issue 20)


def episode_key(cluster: str | None, group: str, opened_at: datetime, kind: str) -> str:
    """The idempotency key of a notification: its cluster, group (rule and rack, node or
    GPU), kind and the minute its group opened on the sources' clock (the evaluator runs
    at the newest sample's time). Two instances of an HA pair watching the same sources
    derive the same key; a twin that fired a tick later still agrees unless the minute
    changed in between (see docs/alerts.md, HA pairs)."""
    epoch = datetime(1970, 1, 1)
    slot = int((opened_at - epoch).total_seconds() // KEY_QUANTUM_S)
    return short_hash(cluster, group, slot, kind)


@dataclass(frozen=True)
class Alert:
    """One alert episode of one fingerprint, from pending to resolved."""

    alert_id: str
    fingerprint: str
    rule: str
    severity: str
    scope: str
    rack: str | None
    node: str | None
    gpu_index: int | None
    state: str
    value: float  # the newest value, in the rule's unit
    threshold: float
    unit: str
    active_since: datetime  # first evaluation where the condition held
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    clear_since: datetime | None = None  # firing, but below ``clear`` since then
    last_eval: datetime | None = None
    peak: float = 0.0  # the highest value seen in this episode
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def group_key(self) -> str:
        return group_key(self.rule, self.rack, self.node)

    @property
    def entity(self) -> str:
        return entity(self.rack, self.node, self.gpu_index)

    def evolve(self, **changes) -> Alert:
        return replace(self, **changes)


@dataclass(frozen=True)
class Silence:
    """Mute notifications of matching alerts until ``expires_at``.

    A silence matches an alert when every matcher it sets (rule, rack, node) equals the
    alert's; unset matchers match anything. Silenced alerts still change state.
    """

    silence_id: str
    expires_at: datetime
    rule: str | None = None
    rack: str | None = None
    node: str | None = None
    comment: str = ""
    created_by: str = ""
    created_at: datetime | None = None

    def matches(self, alert: Alert, now: datetime) -> bool:
        if now >= self.expires_at:
            return False
        pairs = ((self.rule, alert.rule), (self.rack, alert.rack), (self.node, alert.node))
        return all(want is None or want == have for want, have in pairs)


@dataclass(frozen=True)
class Group:
    """An open notification group: its first firing notification has been queued."""

    key: str
    opened_at: datetime


@dataclass(frozen=True)
class State:
    """What the evaluator remembers between evaluations (persisted in the warehouse)."""

    alerts: dict[str, Alert] = field(default_factory=dict)  # fingerprint -> pending/firing
    groups: dict[str, Group] = field(default_factory=dict)  # group key -> open group


@dataclass(frozen=True)
class Notification:
    """A message about one group: it opened (``firing``) or closed (``resolved``).

    ``key`` is the idempotency key: the same group episode and kind always give the same
    key, so a retried or re-evaluated notification is recognisable by a receiver.
    """

    key: str
    kind: str  # firing | resolved | test
    group: str
    rule: str
    severity: str
    rack: str | None
    opened_at: datetime
    created_at: datetime
    alerts: tuple[Alert, ...]


@dataclass(frozen=True)
class Result:
    """What one evaluation changed."""

    state: State
    upserts: tuple[Alert, ...]  # alerts whose row must be written (new, changed, resolved)
    dropped: tuple[str, ...]  # alert ids of pending alerts that went back to inactive
    notifications: tuple[Notification, ...]
