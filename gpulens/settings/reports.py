"""Settings of the weekly report (issue #7): schedule, output, e-mail and webhook."""

from gpulens.settings.base import Setting, between


def _cron_ok(v: str) -> bool:
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(v, timezone="UTC")
    except ValueError:
        return False
    return True


def _tz_ok(v: str) -> bool:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(v)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a path
        return False
    return True


def _url(v: str) -> bool:
    return v == "" or v.startswith(("http://", "https://"))


SETTINGS: tuple[Setting, ...] = (
    Setting("reports.enabled", bool, True,
            "Produce the weekly report on schedule inside the service (and once after a "
            "start, when the last scheduled one was missed)."),
    Setting("reports.cron", str, "0 8 * * mon",
            "When the report of the past week is made: a crontab expression (minute hour "
            "day month weekday) in reports.timezone.", _cron_ok,
            "a 5-field crontab expression, e.g. '0 8 * * mon'"),
    Setting("reports.timezone", str, "UTC",
            "Time zone of the schedule and of the report weeks (Monday 00:00 to Monday "
            "00:00), e.g. Europe/Berlin.", _tz_ok, "an IANA time zone name, e.g. Europe/Berlin"),
    Setting("reports.dir", str, "reports",
            "Directory the HTML and PDF files are written to (the Reports page lists it)."),
    Setting("reports.pdf", bool, True,
            "Print a PDF of each report with headless Chromium."),
    Setting("reports.chromium", str, "chromium",
            "The Chromium command (a path or a name on PATH) that prints the PDF."),
    Setting("reports.pdf_timeout_s", float, 120.0,
            "Seconds Chromium may take to print one report.", between(5, 1800),
            "a number of seconds from 5 to 1800"),
    Setting("reports.large_job_gpus", int, 64,
            "Jobs with at least this many GPUs count as large (their ETTR is reported).",
            between(1, 1_000_000), "a positive integer"),
    Setting("reports.top", int, 5, "Rows of the report's top-N tables (racks, nodes, "
            "users, jobs).", between(1, 50), "an integer from 1 to 50"),
    Setting("reports.email_to", str, "",
            "Recipients of the report e-mail, separated by commas; empty: no e-mail."),
    Setting("reports.email_from", str, "gpulens@localhost", "Sender address of the e-mail."),
    Setting("reports.smtp_host", str, "", "SMTP server of the e-mail (empty: no e-mail)."),
    Setting("reports.smtp_port", int, 587, "SMTP port (587 STARTTLS, 465 implicit TLS).",
            between(1, 65535), "an integer from 1 to 65535"),
    Setting("reports.smtp_security", str, "starttls",
            "starttls (upgrade the connection), ssl (implicit TLS) or none (a relay on "
            "localhost only).", lambda v: v in ("starttls", "ssl", "none"),
            "starttls, ssl or none"),
    Setting("reports.smtp_username", str, "", "SMTP login user (empty: no login)."),
    Setting("reports.smtp_password", str, "",
            "SMTP login password. Set it through GPULENS_REPORTS_SMTP_PASSWORD."),
    Setting("reports.smtp_ca_file", str, "",
            "CA bundle to verify the SMTP server's certificate (empty: the system's)."),
    Setting("reports.webhook_url", str, "",
            "Webhook that receives each report's summary, headline numbers and link (JSON, "
            "kind 'report'); empty: none.", _url, "an http:// or https:// URL, or empty"),
    Setting("reports.webhook_secret", str, "",
            "HMAC-SHA256 secret of the report webhook (header X-Gpulens-Signature). Set it "
            "through GPULENS_REPORTS_WEBHOOK_SECRET."),
)
