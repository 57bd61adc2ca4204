"""Make one weekly report end to end: numbers, files, the reports row, the deliveries.

    result = generate(warehouse, config, week="2026-W47", now=now, send=True)

The files go to ``reports.dir`` (or ``out_dir``); the ``reports`` rows and the outbox rows
(one e-mail with the PDF attached, one webhook with the headline numbers and a link)
commit in one transaction (warehouse/reports_store.py). The alert runtime's delivery
pass sends them with its retries (alerts/delivery.py) once :func:`sinks` are among its
sinks; the CLI without a service runs one pass itself (:func:`deliver_now`).
``config`` is a gpulens Config (anything with ``[name]`` and ``section(prefix)``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from alerts import payloads
from alerts.delivery import Backoff, deliver_due
from alerts.mail import MailSink
from alerts.mail import document as mail_document
from alerts.model import short_hash
from alerts.sinks import Sink
from dashboard.report.build import build
from dashboard.report.model import Report, ReportOptions
from dashboard.report.render import render_html, write_report
from warehouse import reports_store
from warehouse.analytics import Options

log = logging.getLogger(__name__)

EMAIL, WEBHOOK = "email", "report_webhook"  # outbox sink names


def options(config) -> ReportOptions:
    s = config.section("reports")
    return ReportOptions(timezone=s["timezone"], large_job_gpus=s["large_job_gpus"],
                         top=s["top"], dashboard_url=config["alerts.dashboard_url"],
                         cluster=config["cluster.name"],
                         analytics=Options.from_settings(config))


def recipients(config) -> list[str]:
    return [a.strip() for a in config["reports.email_to"].split(",") if a.strip()]


def sinks(config) -> dict[str, Any]:
    """The report's sinks by outbox name: ``email`` and ``report_webhook`` when set."""
    s = config.section("reports")
    out: dict[str, Any] = {}
    if s["smtp_host"] and recipients(config):
        out[EMAIL] = MailSink(host=s["smtp_host"], port=s["smtp_port"],
                              security=s["smtp_security"], username=s["smtp_username"],
                              password=s["smtp_password"], sender=s["email_from"],
                              ca_file=s["smtp_ca_file"])
    if s["webhook_url"]:
        out[WEBHOOK] = Sink(WEBHOOK, s["webhook_url"], s["webhook_secret"])
    return out


def link(report: Report) -> str:
    return report.options.dashboard_url.rstrip("/") + "/reports"


def webhook_document(report: Report, files: list[dict], key: str) -> dict:
    """The webhook's JSON: summary lines, headline numbers, a link, the file names."""
    return {"version": 1, "kind": "report", "key": key, "week": report.week,
            "cluster": report.options.cluster,
            "previous_week": report.previous, "title": report.title,
            "start": payloads.iso(report.start), "end": payloads.iso(report.end),
            "generated_at": payloads.iso(report.generated_at),
            "summary": report.summary, "headline": report.headline(),
            "previous": _headline_prev(report),
            "dashboard_url": link(report),
            "files": {f["format"]: Path(f["path"]).name for f in files}}


def _headline_prev(report: Report) -> dict:
    swapped = Report(week=report.previous, previous=report.previous, start=report.start,
                     end=report.end, generated_at=report.generated_at,
                     options=report.options, this=report.prev, prev=report.prev)
    return swapped.headline()


def deliveries(report: Report, files: list[dict], config, now: datetime) -> list[dict]:
    """Outbox rows for the configured report sinks (none configured: none)."""
    configured = sinks(config)
    key = "report-" + short_hash(report.week, now.isoformat())
    bodies = {}
    if EMAIL in configured:
        by_format = {f["format"]: f["path"] for f in files}
        attach = [by_format["pdf"]] if "pdf" in by_format else [by_format["html"]]
        text = "\n".join([report.title, "", *report.summary, "", link(report)])
        bodies[EMAIL] = payloads.encode(mail_document(
            to=recipients(config), subject=report.title, text=text,
            html=render_html(report, charts=False), attachments=attach))
    if WEBHOOK in configured:
        bodies[WEBHOOK] = payloads.encode(webhook_document(report, files, key))
    return [{"notification_key": key, "sink": sink, "kind": "report",
             "group_key": f"report/{report.week}", "created_at": now, "body": body,
             "status": "pending", "attempts": 0, "next_attempt_at": now}
            for sink, body in bodies.items()]


def generate(warehouse, config, *, week: str, now: datetime, out_dir: str | None = None,
             send: bool = True) -> dict:
    """Build, write and record the report of ``week``; queue its deliveries if ``send``.

    Returns ``{"week", "files": [paths], "queued": [sink names], "summary": [...]}``.
    """
    report = build(warehouse.reader, week=week, now=now, options=options(config))
    files = write_report(report, out_dir or config["reports.dir"], pdf=config["reports.pdf"],
                         chromium=config["reports.chromium"],
                         pdf_timeout_s=config["reports.pdf_timeout_s"])
    headline = payloads.encode(report.headline())
    rows = [{**f, "headline": headline} for f in files]
    outbox = deliveries(report, files, config, now) if send else []
    warehouse.write(lambda con: reports_store.record(con, rows, outbox)).result()
    log.info("weekly report %s written (%s); deliveries queued: %s", week,
             ", ".join(f["path"] for f in files), ", ".join(o["sink"] for o in outbox) or "none")
    return {"week": week, "files": [f["path"] for f in files],
            "queued": [o["sink"] for o in outbox], "summary": report.summary}


def deliver_now(warehouse, config, now: datetime) -> dict[str, int]:
    """One delivery pass over the report rows of the outbox (for the CLI: no service)."""
    s = config.section("alerts")
    configured = sinks(config)
    return deliver_due(warehouse, configured, now=now, timeout_s=s["timeout_s"],
                       backoff=Backoff(s["retry_initial_s"], s["retry_max_s"],
                                       s["give_up_h"] * 3600),
                       only=set(configured))
