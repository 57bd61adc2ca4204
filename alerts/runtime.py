"""The alerting runtime the service schedules: evaluate, persist, enqueue, deliver.

    rt = AlertRuntime(warehouse, config)
    scheduler.add_job(rt.evaluate_once, "interval", seconds=rt.evaluate_interval_s)
    scheduler.add_job(rt.deliver_once, "interval", seconds=rt.deliver_interval_s)

``evaluate_once`` reads the state and the windows from the warehouse each time, so a
restart (or an acknowledgement or silence from the API) is seen at the next evaluation;
the new state, alert rows and outbox rows commit in one transaction on the writer.

Evaluations run on the sources' clock: at the time of the newest sample, not of the wall
clock, so the two instances of an HA pair (alerts/ha.py) that see the same samples
agree on when an alert fired and on its notification keys; firing alerts are re-sent to
Alertmanager right after an evaluation, and not while in their resolve hold (a twin a
few seconds ahead may have resolved them: see ``resend_alertmanager``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np

from alerts import payloads
from alerts import rules as rules_mod
from alerts.delivery import Backoff, deliver_due
from alerts.engine import evaluate, silenced
from alerts.model import FIRING, Notification, Result, short_hash
from alerts.persist import alert_row, load_silences, load_state, outbox_rows
from alerts.sinks import DeliveryError, configured, post, render
from alerts.window import Window, build_window, latest
from gpulens.settings import default
from warehouse import alerts_store as store
from warehouse.clock import utcnow
from warehouse.queries import alerts as q
from warehouse.queries import stragglers as sq

log = logging.getLogger(__name__)


class AlertRuntime:
    """Thermal alerting inside ``gpulens serve`` (see module docstring)."""

    def __init__(self, warehouse, config, *, now: Callable[[], datetime] = utcnow,
                 send: Callable[..., int] = post, pair=None):
        s = config.section("alerts")
        self.warehouse, self.now, self.send = warehouse, now, send
        self.pair = pair  # alerts.ha.Pair of an HA pair, or None
        self.enabled: bool = s["enabled"]
        self.rules = rules_mod.from_settings(s) + (pair.rules() if pair else ())
        self.summaries = {r.name: r.summary for r in self.rules}
        self.sinks = configured(s)
        self.step_s: float = config["collect.interval_s"]  # sampling period, seconds
        self.window_s: float = window_span_s(self.rules)
        self.evaluate_interval_s: float = s["evaluate_interval_s"]
        self.deliver_interval_s: float = s["deliver_interval_s"]
        self.resend_s: float = s["alertmanager_resend_s"]
        self.timeout_s: float = s["timeout_s"]
        self.dashboard_url: str = s["dashboard_url"]
        self.cluster: str = config["cluster.name"]
        self.backoff = Backoff(s["retry_initial_s"], s["retry_max_s"], s["give_up_h"] * 3600)
        self._resent_at: datetime | None = None

    def reload_rules(self, config) -> None:
        """Take the rules from ``config`` again (the Thermal page's tuner saved a change,
        issue 22); the next evaluation uses them, with the alerts' state kept."""
        rules = rules_mod.from_settings(config.section("alerts")) + (
            self.pair.rules() if self.pair else ())
        self.summaries = {r.name: r.summary for r in rules}
        self.window_s = window_span_s(rules)
        self.rules = rules

    # -- evaluation -------------------------------------------------------------------
    def window(self, now: datetime, samples=None) -> Window:
        """The data the rules read at ``now``: the last ``window_s`` of samples (those
        given, or read here)."""
        cur = self.warehouse.reader()
        if samples is None:
            samples = q.window_samples(cur, now=now, span_s=self.window_s)
        return build_window(
            samples, q.gpu_inventory(cur),
            q.window_events(cur, now=now, span_s=events_span_s(self.rules, self.step_s)),
            now, self.window_s, self.step_s,
            stragglers=sq.recent(cur, now=now),
        )

    def evaluate_once(self) -> Result | None:
        """Evaluate every rule once; persist state and queue notifications.

        The evaluation time is the newest sample's (the sources' clock). Returns None
        (and changes nothing) when no sample arrived in the last minute: missing
        telemetry is not a recovery, so firing alerts stay as they are, and are still
        re-sent to Alertmanager when due.
        """
        if not self.enabled:
            return None
        wall = self.now()
        samples = q.window_samples(self.warehouse.reader(), now=wall, span_s=self.window_s)
        now = sources_clock(samples, wall)
        win = self.window(now, samples)
        if (wall - now).total_seconds() > FRESH_S or not fresh(win):
            log.debug("alerts: no recent samples at %s; evaluation skipped", wall)
            self._resend_if_due(wall, wall)  # firing stays firing in Alertmanager too
            return None
        if self.pair is not None:
            win = replace(win, twins=self.pair.twins(wall))
        cur = self.warehouse.reader()
        result = evaluate(self.rules, win, now, load_state(cur), load_silences(cur, now),
                          cluster=self.cluster)
        outbox = [row for note in result.notifications for row in self._outbox(note, now)]
        self.warehouse.write(lambda con: store.save_evaluation(
            con, alerts=[alert_row(a) for a in result.upserts], dropped=result.dropped,
            groups=[(g.key, g.opened_at) for g in result.state.groups.values()],
            outbox=outbox,
        ), urgent=True).result()  # paging must not wait behind the analytics refresh
        for note in result.notifications:
            log.info("alert %s %s (%d alerts) queued for %s", note.group, note.kind,
                     len(note.alerts), ", ".join(self.sinks) or "no sink")
        self._resend_if_due(wall, now)
        return result

    def _resend_if_due(self, wall: datetime, now: datetime) -> None:
        """Re-send firing alerts to Alertmanager (as at ``now``) when the last re-send is
        ``alerts.alertmanager_resend_s`` ago on the wall clock, which runs on while the
        sources' clock stops in a telemetry outage (their alerts carry no endsAt, and
        Alertmanager would resolve them after its resolve_timeout)."""
        if "alertmanager" in self.sinks and (
                self._resent_at is None
                or (wall - self._resent_at).total_seconds() >= self.resend_s):
            self._resent_at = wall
            self.resend_alertmanager(now)

    def _document(self, note: Notification, now: datetime) -> dict:
        nodes = payloads.nodes_of(note)
        jobs = []
        if nodes and note.kind == "firing":
            frame = q.running_jobs(self.warehouse.reader(), nodes=nodes, now=now).head(20)
            jobs = [{k: (int(v) if k == "gpus_here" else v) for k, v in r.items()}
                    for r in frame.to_dict("records")]
        return payloads.document(note, summary=self.summaries.get(note.rule, note.rule),
                                 dashboard_url=self.dashboard_url, jobs=jobs,
                                 cluster=self.cluster)

    def _outbox(self, note: Notification, now: datetime) -> list[dict]:
        doc = self._document(note, now)
        bodies = {name: render(name, doc) for name in self.sinks}
        return outbox_rows(note, bodies, now)

    # -- delivery ---------------------------------------------------------------------
    def deliver_once(self) -> dict[str, int]:
        """Send the due outbox rows (in an HA pair, as the pair's gate says)."""
        now = self.now()
        return deliver_due(self.warehouse, self.sinks, now=now, backoff=self.backoff,
                           timeout_s=self.timeout_s, send=self.send,
                           only=set(self.sinks),  # reports' rows are theirs to send
                           gate=self.pair.gate if self.pair is not None else None)

    def resend_alertmanager(self, now: datetime) -> int:
        """POST every firing, unsilenced alert to Alertmanager again (best effort), so it
        keeps them active past its resolve_timeout. Returns the alerts sent.

        An alert in its resolve hold (below ``clear`` since ``clear_since``) is not
        re-sent: the twin of an HA pair that evaluates a few seconds ahead may have
        resolved it already, and a firing post after that re-opens it in Alertmanager
        (issue 20). The hold is shorter than Alertmanager's resolve_timeout (5 min)."""
        cur = self.warehouse.reader()
        state, silences = load_state(cur), load_silences(cur, now)
        groups: dict[str, list] = {}
        for a in state.alerts.values():
            if (a.state == FIRING and a.clear_since is None
                    and not silenced(a, silences, now)):
                groups.setdefault(a.group_key, []).append(a)
        items = []
        for key, alerts in groups.items():
            opened = state.groups[key].opened_at if key in state.groups else now
            note = Notification(key="resend", kind="firing", group=key, rule=alerts[0].rule,
                                severity=alerts[0].severity, rack=alerts[0].rack,
                                opened_at=opened, created_at=now, alerts=tuple(alerts))
            doc = payloads.document(note, summary=self.summaries.get(note.rule, note.rule),
                                    dashboard_url=self.dashboard_url, cluster=self.cluster)
            items += payloads.alertmanager(doc)
        if not items:
            return 0
        try:
            self.send(self.sinks["alertmanager"], payloads.encode(items),
                      short_hash("resend", now.isoformat()), timeout_s=self.timeout_s)
        except DeliveryError as exc:
            log.warning("re-sending firing alerts to Alertmanager failed: %s", exc)
            return 0
        return len(items)

    def send_test(self, sink_name: str) -> str:
        """Send a test notification to one sink now (not through the outbox); returns
        the idempotency key. Raises KeyError for an unconfigured sink, DeliveryError."""
        return send_test(self.sinks[sink_name], self.dashboard_url, self.now(),
                         timeout_s=self.timeout_s, send=self.send, cluster=self.cluster)


FRESH_S = 60.0  # seconds: an evaluation needs a sample at most this old (wall clock)


def sources_clock(samples, wall: datetime) -> datetime:
    """The sources' clock: the newest sample time in ``samples`` (``wall`` when none)."""
    if samples.empty:
        return wall
    newest = samples["ts"].max()
    return newest.to_pydatetime() if hasattr(newest, "to_pydatetime") else newest


def window_span_s(rules) -> float:
    """Seconds of samples an evaluation reads (at least 15 minutes)."""
    return max(900.0, rules_mod.window_s(tuple(rules)))


def events_span_s(rules, step_s: float) -> float:
    """Seconds of XID events an evaluation reads: the longest xid rule's window."""
    xid_span = max([r.params.get("window_s", 0.0) for r in rules if r.kind == "xid"],
                   default=0.0)
    return max(xid_span, step_s)


def fresh(win) -> bool:
    """Whether a window has a temperature from its last minute; evaluating without one
    would read missing telemetry as a recovery (the service and the backtest skip it)."""
    return win.n > 0 and bool(np.isfinite(latest(win.series["temp_c"], win.cols(60.0))).any())


def test_document(dashboard_url: str, now: datetime,
                  cluster: str = default("cluster.name")) -> dict:
    """A generic document that says it is a test (kind ``test``) from ``cluster``."""
    key = short_hash("test", now.isoformat())
    return {
        "version": payloads.VERSION, "key": key, "kind": "test", "group": "test/gpulens",
        "cluster": cluster,
        "rule": "test", "severity": "info", "rack": None,
        "title": "[TEST] gpulens notification test",
        "summary": "A test notification from `gpulens alerts test`; nothing is wrong.",
        "opened_at": payloads.iso(now), "created_at": payloads.iso(now),
        "dashboard_url": dashboard_url, "nodes": [], "jobs": [],
        "alerts": [{
            "alert_id": key, "fingerprint": "test:fleet", "rule": "test", "severity": "info",
            "scope": "rack", "entity": "fleet", "rack": None, "node": None,
            "gpu_index": None, "state": "firing", "value": 0.0, "peak": 0.0,
            "threshold": 0.0, "unit": "", "active_since": payloads.iso(now),
            "fired_at": payloads.iso(now),
            "resolved_at": payloads.iso(now + timedelta(minutes=5)), "context": {},
        }],
    }


def send_test(sink, dashboard_url: str, now: datetime, *,
              timeout_s: float = default("alerts.timeout_s"),
              send: Callable[..., int] = post,
              cluster: str = default("cluster.name")) -> str:
    """Send a test notification from ``cluster`` to ``sink``; returns its idempotency key."""
    doc = test_document(dashboard_url, now, cluster)
    if sink.name == "alertmanager":  # resolved at once: routes, but pages nobody for long
        doc["kind"] = "resolved"
    send(sink, render(sink.name, doc), doc["key"], timeout_s=timeout_s)
    return doc["key"]
