"""An HA pair of gpulens instances (issue 20): the twin's liveness and who pages.

Two ``gpulens serve`` processes on different machines watch the same sources, each with
its own warehouse, and evaluate the same rules on the sources' clock, so their alerts
carry the same labels and their notifications the same keys (model.episode_key).

- Alertmanager deduplicates what both send: the ``alertmanager`` sink is never gated.
- Direct sinks (webhook, Slack, e-mail, the weekly report's) would page twice, so the
  ``primary`` sends them and the ``standby`` holds its copies (:meth:`Pair.gate`). Each
  instance polls its twin's ``/healthz``, whose ``ha`` section lists the notifications it
  delivered; a held row the twin delivered is marked ``twin`` and never sent. When the
  twin has not answered for ``ha.twin_gone_after_s``, the standby sends what it holds
  (in order), and ``twin_gone`` fires on both sides of a split.

    pair = Pair(config, name="gpulens-a:8050")
    scheduler.add_job(pair.poll_once, "interval", seconds=pair.poll_interval_s)
    deliver_due(..., gate=pair.gate)

Failure modes (split brain, both down) are in docs/alerts.md, the deployment in
docs/operations.md.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import requests

from alerts.model import Rule
from warehouse.clock import utcnow
from warehouse.queries import alerts as q

log = logging.getLogger(__name__)

SEND, HOLD, COVERED = "send", "hold", "covered"
UNGATED = frozenset({"alertmanager"})  # it deduplicates the pair's alerts itself
DELIVERED_SPAN = timedelta(days=8)  # a week's report and every recent page
MAX_DELIVERED = 1000  # entries of the list /healthz shows and a twin reads
MAX_TEXT = 256  # characters of a name, key, sink, kind or group read from the twin
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a /healthz answer longer than this is refused
RULE = "twin_gone"


class TwinError(ValueError):
    """The twin's answer is not a gpulens /healthz with an ``ha`` section; the message
    names what was wrong and quotes the start of the input."""


@dataclass(frozen=True)
class Delivered:
    """A notification the twin delivered itself (one outbox row: key and sink)."""

    key: str
    sink: str
    kind: str
    group: str
    created_at: datetime  # naive UTC, the twin's evaluation time


@dataclass(frozen=True)
class TwinView:
    """What the twin's /healthz said: its name, role, cluster and deliveries."""

    name: str
    role: str
    cluster: str
    delivered: tuple[Delivered, ...]
    dropped: int = 0  # entries of ``delivered`` refused (not the expected shape)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise TwinError(f"{what}: expected a string of 1 to {MAX_TEXT} characters, got "
                        f"{str(value)[:60]!r}")
    return value


def _when(value: Any) -> datetime:
    text = _text(value, "created_at")
    try:
        ts = datetime.fromisoformat(text[:-1] if text.endswith("Z") else text)
    except ValueError:
        raise TwinError(f"created_at: not an ISO time: {text[:60]!r}") from None
    if ts.tzinfo is not None:
        raise TwinError(f"created_at: expected UTC with Z, got {text[:60]!r}")
    return ts


def _delivered(item: Any) -> Delivered:
    if not isinstance(item, dict):
        raise TwinError(f"delivered entry: expected an object, got {str(item)[:60]!r}")
    return Delivered(key=_text(item.get("key"), "key"), sink=_text(item.get("sink"), "sink"),
                     kind=_text(item.get("kind"), "kind"),
                     group=_text(item.get("group"), "group"),
                     created_at=_when(item.get("created_at")))


def parse_twin(raw: bytes | str) -> TwinView:
    """The twin's /healthz body -> :class:`TwinView`; raises only :class:`TwinError`.

    The answer as a whole must be JSON with an ``ha`` object naming the instance; a
    ``delivered`` entry that is not a well-formed record costs that entry alone
    (counted in ``dropped``)."""
    if len(raw) > MAX_ANSWER_BYTES:
        raise TwinError(f"answer of {len(raw)} bytes; at most {MAX_ANSWER_BYTES} accepted")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise TwinError(f"not JSON: {str(raw[:60])!r}") from None
    ha = doc.get("ha") if isinstance(doc, dict) else None
    if not isinstance(ha, dict):
        raise TwinError(f"no ha section (is it gpulens with ha.peer_url set?): "
                        f"{str(raw[:60])!r}")
    name = _text(ha.get("name"), "ha.name")
    role, cluster = ha.get("role"), ha.get("cluster")
    items = ha.get("delivered")
    items = [] if items is None else items
    if not isinstance(items, list):
        raise TwinError(f"ha.delivered: expected a list, got {str(items)[:60]!r}")
    delivered, dropped = [], 0
    for item in items[:MAX_DELIVERED]:
        try:
            delivered.append(_delivered(item))
        except TwinError:
            dropped += 1
    return TwinView(name=name, role=role if isinstance(role, str) else "",
                    cluster=cluster if isinstance(cluster, str) else "",
                    delivered=tuple(delivered), dropped=dropped)


def match(row: Any, delivered: tuple[Delivered, ...], match_s: float,
          local: Any = None) -> Delivered | None:
    """The twin's delivery that stands for outbox ``row`` (notification_key, sink, kind,
    group_key, created_at), or None. Same sink, kind and group, and the same key (a
    week's report: its group alone); failing that, the nearest delivery created at most
    ``match_s`` seconds apart (the twin fired a tick later, across a minute turn) whose
    key is not a key of this instance's outbox (that would be another episode's) and
    that no other local row took already: each delivery stands for one row.

    ``local``: this instance's outbox rows around ``row`` (a frame with
    notification_key, sink, kind, group_key, created_at and status), or None."""
    same = [d for d in delivered
            if d.sink == row.sink and d.kind == row.kind and d.group == row.group_key]
    for d in same:
        if d.key == row.notification_key or d.kind == "report":
            return d
    at = _naive(row.created_at)
    mine = {row.notification_key}
    taken: list[datetime] = []  # local rows already marked twin by time
    if local is not None and len(local):
        mine |= set(local["notification_key"])
        twin_keys = {d.key for d in same}
        for r in local.itertuples(index=False):
            if (r.status == "twin" and r.sink == row.sink and r.kind == row.kind
                    and r.group_key == row.group_key and r.notification_key not in twin_keys
                    and r.notification_key != row.notification_key):
                taken.append(_naive(r.created_at))
    free = [d for d in same if d.key not in mine]
    for t in sorted(taken):  # each took the nearest free delivery in its reach
        near = [d for d in free if abs((d.created_at - t).total_seconds()) <= match_s]
        if near:
            free.remove(min(near, key=lambda d: abs((d.created_at - t).total_seconds())))
    near = [d for d in free if abs((d.created_at - at).total_seconds()) <= match_s]
    return min(near, key=lambda d: abs((d.created_at - at).total_seconds()), default=None)


def _naive(ts) -> datetime:
    return ts.to_pydatetime() if hasattr(ts, "to_pydatetime") else ts


def _fetch(url: str, timeout_s: float) -> bytes:
    """GET ``url``; the body whatever the status (a degraded /healthz answers 503),
    read up to just past ``MAX_ANSWER_BYTES`` (parse_twin refuses a longer one)."""
    with requests.Session() as session:
        session.trust_env = False  # no proxy or .netrc from the environment
        with session.get(url, timeout=timeout_s, stream=True) as response:
            chunks, size = [], 0
            for chunk in response.iter_content(64 * 1024):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    break
            return b"".join(chunks)


class Pair:
    """This instance's view of its twin (see module docstring). Thread-safe."""

    def __init__(self, config, *, name: str, now: Callable[[], datetime] = utcnow,
                 fetch: Callable[[str, float], bytes] = _fetch,
                 reader: Callable[[], Any] | None = None):
        s = config.section("ha")
        self.peer_url: str = s["peer_url"]
        self.role: str = s["role"]
        self.name: str = s["name"] or name
        self.cluster: str = config["cluster.name"]
        self.poll_interval_s: float = s["poll_interval_s"]
        self.timeout_s: float = s["poll_timeout_s"]
        self.gone_after_s: float = s["twin_gone_after_s"]
        self.match_s: float = s["match_s"]
        self.now, self.fetch = now, fetch
        self.reader = reader  # a warehouse cursor: this instance's outbox, for match()
        self.twin_id = urlsplit(self.peer_url).netloc or self.peer_url  # the alert's node
        self.started_at = now()
        self.seen_at: datetime | None = None
        self.view: TwinView | None = None
        self.last_error: str | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.peer_url)

    # -- liveness ---------------------------------------------------------------------
    def poll_once(self) -> bool:
        """Ask the twin's /healthz once; True when it answered as a gpulens twin."""
        url = self.peer_url.rstrip("/") + "/healthz"
        try:
            view = parse_twin(self.fetch(url, self.timeout_s))
        except (requests.RequestException, TwinError) as exc:
            with self._lock:
                self.last_error = (str(exc) if isinstance(exc, TwinError)
                                   else type(exc).__name__)  # messages carry the URL
            log.debug("twin %s did not answer: %s", self.twin_id, self.last_error)
            return False
        with self._lock:
            first = self.view is None
            self.view, self.seen_at, self.last_error = view, self.now(), None
        if first and view.cluster != self.cluster:
            log.warning("the twin %s watches cluster %r, this instance %r: their keys and "
                        "Alertmanager labels differ, so the pair pages twice (set the same "
                        "cluster.name on both)", self.twin_id, view.cluster, self.cluster)
        return True

    def unseen_s(self, now: datetime) -> float:
        """Seconds since the twin last answered (since this instance started if never)."""
        with self._lock:
            since = self.seen_at or self.started_at
        return max(0.0, (now - since).total_seconds())

    def gone(self, now: datetime) -> bool:
        return self.unseen_s(now) >= self.gone_after_s

    def twins(self, now: datetime) -> dict[str, float]:
        """What the alert window carries: twin id -> seconds unseen (none without a pair)."""
        return {self.twin_id: self.unseen_s(now)} if self.enabled else {}

    def rules(self) -> tuple[Rule, ...]:
        """The ``twin_gone`` rule (none without a pair): fires when the twin has not
        answered for ``ha.twin_gone_after_s``, resolves when it answers again."""
        if not self.enabled:
            return ()
        return (Rule(RULE, "twin", "node", "warning", threshold=self.gone_after_s,
                     clear=self.gone_after_s, hold_s=0.0, resolve_hold_s=0.0, unit="s",
                     summary="The twin gpulens of this HA pair has not answered its "
                             "/healthz: paging now rests on this instance alone"),)

    # -- who sends --------------------------------------------------------------------
    def gate(self, row: Any, now: datetime) -> str:
        """``send``, ``hold`` or ``covered`` for an outbox row (alerts/delivery.py) at
        ``now`` (naive UTC; whether the twin is gone is judged then)."""
        if not self.enabled or row.sink in UNGATED:
            return SEND
        with self._lock:
            view = self.view
        if view is not None and match(row, view.delivered, self.match_s,
                                      self._local(row)) is not None:
            return COVERED
        if self.role == "primary" or self.gone(now):
            return SEND
        return HOLD

    def _local(self, row: Any):
        """This instance's outbox rows created within 3 x ``match_s`` of ``row`` (None
        without a reader)."""
        if self.reader is None:
            return None
        span = 3 * self.match_s
        return q.list_notifications(self.reader(),
                                    now=_naive(row.created_at) + timedelta(seconds=span),
                                    since_s=2 * span)

    # -- /healthz ---------------------------------------------------------------------
    def report(self, cur, now: datetime) -> dict:
        """The ``ha`` section of /healthz: this instance, its twin, and the notifications
        this instance delivered itself (what the twin matches against)."""
        unseen = self.unseen_s(now)
        with self._lock:
            seen_at, view, error = self.seen_at, self.view, self.last_error
        frame = q.delivered_since(cur, since=now - DELIVERED_SPAN, limit=MAX_DELIVERED)
        delivered = [{"key": r.notification_key, "sink": r.sink, "kind": r.kind,
                      "group": r.group_key, "created_at": _naive(r.created_at).isoformat() + "Z"}
                     for r in frame.itertuples(index=False)]
        return {
            "name": self.name, "role": self.role, "cluster": self.cluster,
            "twin": {
                "url": self.peer_url, "id": self.twin_id,
                "name": view.name if view else None,
                "cluster": view.cluster if view else None,
                "status": ("unseen" if seen_at is None and unseen < self.gone_after_s
                           else "gone" if unseen >= self.gone_after_s else "seen"),
                "seen_at": None if seen_at is None else seen_at.isoformat() + "Z",
                "unseen_s": round(unseen, 3),
                "gone_after_s": self.gone_after_s, "last_error": error,
            },
            "delivered": delivered,
        }
