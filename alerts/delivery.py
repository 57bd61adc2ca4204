"""Delivering the notification outbox: per sink in order, retried with backoff.

Each sink is a FIFO: rows are sent oldest first and a sink stops at its first failure
(or at a row still backing off), so a receiver that comes back after an hour gets every
notification, in order, once. A failed row waits ``initial_s * 2**(attempts - 1)``
seconds (at most ``max_s``) before its next attempt, and is marked dead after
``give_up_s``. The idempotency key of a row is the same on every attempt, so a receiver
that honours it never pages twice when a response got lost after it was handled.

In an HA pair (alerts/ha.py) a ``gate`` decides per row before it is sent: ``send``,
``hold`` (the twin is responsible: the row waits and keeps its sink's order) or
``covered`` (the twin delivered the same notification: the row is marked ``twin``).
A row held for ``give_up_s`` is marked dead like one that failed that long.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from alerts.sinks import DeliveryError, Sink, post
from gpulens.settings import default
from warehouse import alerts_store as store
from warehouse.queries import alerts as q

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 5.0  # first retry delay, seconds
    max_s: float = 300.0  # longest delay, seconds
    give_up_s: float = 86400.0  # mark dead after this many seconds since queued

    def delay_s(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt (1-based)."""
        return min(self.max_s, self.initial_s * 2 ** max(0, attempts - 1))


def deliver_due(warehouse, sinks: Mapping[str, Sink], *, now: datetime,
                backoff: Backoff = Backoff(),
                timeout_s: float = default("alerts.timeout_s"),
                send: Callable[..., int] = post,
                only: Collection[str] | None = None,
                gate: Callable[[Any, datetime], str] | None = None) -> dict[str, int]:
    """One pass over the outbox at ``now``; returns counts of delivered and failed (and,
    with a ``gate``, of covered and held rows, and ``expired``: held past give-up).

    A sink object with a ``deliver(body, key, timeout_s=...)`` method (the e-mail sink,
    alerts/mail.py) sends its rows itself; the others go through ``send`` (HTTP POST).
    ``only``: handle the rows of these sinks and leave the others for another pass.
    ``gate(row, now)``: ``send``, ``hold`` or ``covered`` (see the module docstring).
    """
    rows = q.pending_notifications(warehouse.reader())
    counts = {"delivered": 0, "failed": 0} | (
        {"covered": 0, "held": 0, "expired": 0} if gate else {})
    blocked: set[str] = set()
    for row in rows.itertuples(index=False):
        if row.sink in blocked or (only is not None and row.sink not in only):
            continue
        if row.next_attempt_at > now:  # backing off: keep this sink's order
            blocked.add(row.sink)
            continue
        verdict = "send" if gate is None else gate(row, now)
        if verdict == "hold" and _expired(row, now, backoff):
            # held past give-up (the twin was alive and never delivered it): paging it at
            # the next absence of the twin, days late, would mislead
            warehouse.write(lambda con, r=row: store.mark_failed(
                con, r.notification_key, r.sink, attempts=int(r.attempts),
                next_attempt_at=now, error="held for the twin past give-up", dead=True),
                urgent=True).result()
            counts["expired"] += 1
            log.warning("notification %s (%s %s) for %s held for the twin past give-up; "
                        "marked dead", row.notification_key, row.kind, row.group_key, row.sink)
            continue
        if verdict == "hold":
            blocked.add(row.sink)
            counts["held"] += 1
            continue
        if verdict == "covered":
            warehouse.write(lambda con, r=row: store.mark_by_twin(
                con, r.notification_key, r.sink, now), urgent=True).result()
            counts["covered"] += 1
            log.info("notification %s (%s %s) for %s was delivered by the twin",
                     row.notification_key, row.kind, row.group_key, row.sink)
            continue
        attempts = int(row.attempts) + 1
        sink = sinks.get(row.sink)
        try:
            if sink is None:
                raise DeliveryError(f"{row.sink}: sink not configured")
            if hasattr(sink, "deliver"):
                sink.deliver(row.body, row.notification_key, timeout_s=timeout_s)
            else:
                send(sink, row.body, row.notification_key, timeout_s=timeout_s)
        except DeliveryError as exc:
            blocked.add(row.sink)
            counts["failed"] += 1
            wait = backoff.delay_s(attempts)
            dead = _expired(row, now, backoff)
            warehouse.write(lambda con, r=row, a=attempts, w=wait, e=str(exc), d=dead:
                            store.mark_failed(con, r.notification_key, r.sink, attempts=a,
                                              next_attempt_at=now + timedelta(seconds=w),
                                              error=e, dead=d), urgent=True).result()
            log.warning("notification %s (%s) not delivered, attempt %d: %s; %s",
                        row.notification_key, row.kind, attempts, exc,
                        "giving up" if dead else f"next try in {wait:.0f} s")
            continue
        warehouse.write(lambda con, r=row, a=attempts: store.mark_delivered(
            con, r.notification_key, r.sink, now, a), urgent=True).result()
        counts["delivered"] += 1
        log.info("notification %s (%s %s) delivered to %s", row.notification_key, row.kind,
                 row.group_key, row.sink)
    return counts


def _expired(row: Any, now: datetime, backoff: Backoff) -> bool:
    """Whether an outbox row was queued ``backoff.give_up_s`` seconds or more ago."""
    return (now - row.created_at).total_seconds() >= backoff.give_up_s
