"""The weekly report is sent once per week by an HA pair (issue 20): both instances make
it and queue its e-mail; the primary sends, the standby marks its copy as delivered by
the twin; with the primary gone the standby sends, and the primary, back, does not send
that week again. A real SMTP server (aiosmtpd) receives; each instance reads the other's
``ha`` section of /healthz as the service builds it (alerts/ha.py: Pair.report)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
import requests

from alerts.ha import Pair
from alerts.mail import document
from dashboard.report.schedule import ReportScheduler
from gpulens.config import load
from warehouse import Warehouse, alerts_store
from warehouse.queries import alerts as q

pytest.importorskip("aiosmtpd", reason="pip install aiosmtpd (test extra)")

T0 = datetime(2026, 11, 16, 7, 0, 0)  # Monday 08:00 Berlin


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def queue(wh, week: str, key: str, now):
    """The outbox row ``gpulens serve`` queues for a week's report e-mail."""
    doc = document(to=["ops@example.org"], subject=f"gpulens weekly report {week}",
                   text="t", html="<p>h</p>")
    row = {"notification_key": key, "sink": "email", "kind": "report",
           "group_key": f"report/{week}", "created_at": now, "body": json.dumps(doc),
           "status": "pending", "attempts": 0, "next_attempt_at": now}
    wh.write(lambda con: alerts_store.enqueue(con, [row])).result()


def test_a_pair_sends_each_weeks_report_once(tmp_path, smtp):
    ctl, inbox = smtp
    clock = Clock(T0)
    whs = {n: Warehouse(tmp_path / f"{n}.duckdb") for n in ("a", "b")}
    up = {"a": True, "b": True}
    pairs, schedulers = {}, {}

    def fetch_from(name):
        def fetch(url, timeout_s):  # the twin's /healthz, as the service answers it
            if not up[name]:
                raise requests.ConnectionError("refused")
            return json.dumps({"status": "ok", "ha": pairs[name].report(
                whs[name].reader(), clock())}).encode()
        return fetch

    try:
        for name, twin, role in (("a", "b", "primary"), ("b", "a", "standby")):
            cfg = load(None, env={}).with_overrides(
                reports__smtp_host="127.0.0.1", reports__smtp_port=ctl.port,
                reports__smtp_security="none", reports__email_to="ops@example.org",
                ha__peer_url=f"http://{twin}:8050/", ha__role=role,
                ha__twin_gone_after_s=60)
            pairs[name] = Pair(cfg, name=name, now=clock, fetch=fetch_from(twin))
            schedulers[name] = ReportScheduler(whs[name], cfg, now=clock,
                                               gate=pairs[name].gate)
        a, b = schedulers["a"], schedulers["b"]
        # W46: both make the report (a few seconds apart, different keys)
        queue(whs["a"], "2026-W46", "report-a46", T0)
        queue(whs["b"], "2026-W46", "report-b46", T0 + timedelta(seconds=3))
        clock.now = T0 + timedelta(seconds=5)
        assert pairs["b"].poll_once()
        assert b.deliver_once()["held"] == 1  # the primary has not sent it yet
        assert a.deliver_once()["delivered"] == 1
        assert pairs["b"].poll_once()
        assert b.deliver_once()["covered"] == 1
        assert len(inbox.messages) == 1
        # W47: the primary is down when the report is due; the standby sends it once the
        # primary has been gone for ha.twin_gone_after_s
        week = T0 + timedelta(days=7)
        clock.now = week
        assert pairs["b"].poll_once()  # the primary answered until just now
        up["a"] = False
        queue(whs["b"], "2026-W47", "report-b47", week)
        clock.now = week + timedelta(seconds=30)
        assert not pairs["b"].poll_once()
        assert b.deliver_once()["held"] == 1
        clock.now = week + timedelta(minutes=5)
        assert b.deliver_once()["delivered"] == 1
        # the primary comes back, catches up the missed report, and does not send it
        up["a"] = True
        queue(whs["a"], "2026-W47", "report-a47", clock.now)
        assert pairs["a"].poll_once()
        assert a.deliver_once()["covered"] == 1
        assert [m["Subject"] for m in inbox.messages] == ["gpulens weekly report 2026-W46",
                                                          "gpulens weekly report 2026-W47"]
        status = {n: sorted(q.list_notifications(wh.reader(), now=clock.now,
                                                 since_s=30 * 86400)["status"])
                  for n, wh in whs.items()}
        assert status == {"a": ["delivered", "twin"], "b": ["delivered", "twin"]}
    finally:
        for wh in whs.values():
            wh.close()
