"""The weekly report job of the service: a cron trigger and the missed-report catch-up.

    reports = ReportScheduler(warehouse, config, now=service.now)
    reports.install(scheduler)     # cron reports.cron in reports.timezone
    reports.install_delivery(scheduler, guard)  # e-mail and webhook, through the outbox
    reports.catch_up()             # at start: the last scheduled report, if it was missed

A scheduled run reports the most recent complete ISO week (in ``reports.timezone``). A
report missed while the service was down is made when it comes back, once: the last
fire time of the cron before now names a week, and that week is made when the
``reports`` table has no row of it and the warehouse holds samples from before its end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

from alerts.delivery import Backoff, deliver_due
from dashboard.report import generate as gen
from warehouse import reports_store
from warehouse.clock import utcnow
from warehouse.queries import weekly

log = logging.getLogger(__name__)
JOB_ID = "reports:weekly"


class ReportScheduler:
    """Weekly reports inside ``gpulens serve`` (see module docstring)."""

    def __init__(self, warehouse, config, *, now: Callable[[], datetime] = utcnow,
                 gate: Callable | None = None):
        self.warehouse, self.config, self.now = warehouse, config, now
        self.gate = gate  # an HA pair's (alerts/ha.py): the pair sends a week's report once
        self.enabled: bool = config["reports.enabled"]
        self.tz = ZoneInfo(config["reports.timezone"])
        self.trigger = CronTrigger.from_crontab(config["reports.cron"], timezone=self.tz)
        self.sinks = gen.sinks(config)  # outbox sink name -> sink (email, report webhook)
        a = config.section("alerts")  # the outbox's retry policy is the alerts'
        self.backoff = Backoff(a["retry_initial_s"], a["retry_max_s"], a["give_up_h"] * 3600)
        self.timeout_s: float = a["timeout_s"]
        self.deliver_interval_s: float = a["deliver_interval_s"]

    def install(self, scheduler) -> None:
        """Add the cron job to an APScheduler scheduler (nothing when disabled)."""
        if self.enabled:
            scheduler.add_job(self.run_scheduled, self.trigger, id=JOB_ID,
                              misfire_grace_time=6 * 3600, coalesce=True, max_instances=1)

    def install_delivery(self, scheduler, guard) -> None:
        """Deliver the reports' outbox rows in the background (nothing without sinks)."""
        if self.sinks:
            scheduler.add_job(guard, "interval", args=(self.deliver_once, "report delivery"),
                              seconds=self.deliver_interval_s, id="reports:deliver")

    def deliver_once(self) -> dict[str, int]:
        """Send the due e-mails and report webhooks (the alerts' sinks deliver their own)."""
        return deliver_due(self.warehouse, self.sinks, now=self.now(), backoff=self.backoff,
                           timeout_s=self.timeout_s, only=set(self.sinks), gate=self.gate)

    def week_for(self, fire_utc: datetime) -> str:
        """The week a run at ``fire_utc`` (naive UTC) reports: the last complete one."""
        return weekly.last_complete_week(fire_utc, self.config["reports.timezone"])

    def last_fire_before(self, now_utc: datetime) -> datetime | None:
        """The cron's latest fire time at or before ``now_utc`` within 8 days (naive UTC)."""
        aware_now = now_utc.replace(tzinfo=UTC)
        t = self.trigger.get_next_fire_time(None, aware_now - timedelta(days=8))
        last = None
        for _ in range(20000):  # a weekly cron takes one or two steps
            if t is None or t > aware_now:
                break
            last = t
            t = self.trigger.get_next_fire_time(t, t + timedelta(seconds=1))
        return None if last is None else last.astimezone(UTC).replace(tzinfo=None)

    def run(self, week: str, *, send: bool = True) -> dict:
        return gen.generate(self.warehouse, self.config, week=week, now=self.now(), send=send)

    def run_scheduled(self) -> dict | None:
        """The cron job: the report of the last complete week."""
        try:
            return self.run(self.week_for(self.now()))
        except Exception:
            log.exception("weekly report failed")
            return None

    def catch_up(self) -> dict | None:
        """Make the last scheduled report if it was missed (see module docstring)."""
        if not self.enabled:
            return None
        now = self.now()
        fired = self.last_fire_before(now)
        if fired is None:
            return None
        week = self.week_for(fired)
        start, end = weekly.week_range(week, self.config["reports.timezone"])
        cur = self.warehouse.reader()
        if reports_store.has_report(cur, week):
            return None
        if not reports_store.week_has_data(cur, start, end):
            log.info("no weekly report for %s to catch up: no data in that week", week)
            return None
        log.info("weekly report %s was missed (due %s UTC); making it now", week, fired)
        try:
            return self.run(week)
        except Exception:
            log.exception("weekly report catch-up failed")
            return None
