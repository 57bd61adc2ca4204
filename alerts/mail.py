"""The e-mail sink: an SMTP server, an HTML body with a plain-text part, files attached.

An outbox row for this sink (``sink = "email"``) carries a JSON document::

    {"version": 1, "kind": "report", "to": ["ops@example.org"], "subject": "...",
     "text": "plain-text body", "html": "<!DOCTYPE html>...",
     "attachments": [{"path": "/srv/reports/gpulens-report-2026-W47.pdf",
                      "filename": "gpulens-report-2026-W47.pdf",
                      "content_type": "application/pdf"}]}

Attachments are read at delivery time (the outbox holds their paths, not their bytes).
The ``Message-ID`` is derived from the row's idempotency key, so a retried message has the
same id and mail systems that de-duplicate on it show it once. Security: ``starttls``
(upgrade a plain connection, port 587), ``ssl`` (implicit TLS, port 465) or ``none``
(only for a relay on localhost); ``username`` turns on AUTH LOGIN/PLAIN. Passwords and
addresses never appear in errors or logs: a failure names the sink and the error class.
"""

from __future__ import annotations

import json
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from alerts.sinks import DeliveryError
from gpulens.settings import default, setting_field


def document(*, to: list[str], subject: str, text: str, html: str,
             attachments: list[str | Path] = (), kind: str = "report") -> dict:
    """The outbox document of one message (see module docstring)."""
    return {"version": 1, "kind": kind, "to": list(to), "subject": subject, "text": text,
            "html": html,
            "attachments": [{"path": str(p), "filename": Path(p).name,
                             "content_type": "application/pdf" if str(p).endswith(".pdf")
                             else "application/octet-stream"} for p in attachments]}


def message(doc: dict, *, sender: str, key: str) -> EmailMessage:
    """The MIME message of an outbox document: text, HTML alternative, attachments."""
    msg = EmailMessage()
    msg["Subject"] = doc["subject"]
    msg["From"] = sender
    msg["To"] = ", ".join(doc["to"])
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    domain = sender.rpartition("@")[2] or "gpulens.local"
    msg["Message-ID"] = f"<{key}@{domain}>"
    msg.set_content(doc.get("text") or "See the HTML part.")
    if doc.get("html"):
        msg.add_alternative(doc["html"], subtype="html")
    for a in doc.get("attachments", []):
        try:
            data = Path(a["path"]).read_bytes()
        except OSError as exc:
            raise DeliveryError(f"email: attachment {a['filename']} unreadable "
                                f"({type(exc).__name__})") from None
        maintype, _, subtype = a.get("content_type", "application/octet-stream").partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=a["filename"])
    return msg


@dataclass(frozen=True)
class MailSink:
    """SMTP delivery; ``deliver`` is what alerts.delivery calls for this sink's rows."""

    host: str
    port: int = setting_field("reports.smtp_port")
    security: str = setting_field("reports.smtp_security")  # starttls | ssl | none
    username: str = setting_field("reports.smtp_username")
    password: str = setting_field("reports.smtp_password")
    sender: str = "gpulens@localhost"
    # CA bundle for the server's certificate (empty: the system's)
    ca_file: str = setting_field("reports.smtp_ca_file")
    name: str = "email"

    def __repr__(self) -> str:  # keep the password and the server out of logs
        return f"MailSink({self.name})"

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file or None)

    def deliver(self, body: str, key: str, *,
                timeout_s: float = default("alerts.timeout_s")) -> int:
        """Send the message of ``body`` (JSON); return 250 or raise DeliveryError."""
        try:
            doc = json.loads(body)
        except ValueError:
            raise DeliveryError("email: the outbox row is not JSON") from None
        if not doc.get("to"):
            raise DeliveryError("email: no recipients")
        msg = message(doc, sender=self.sender, key=key)
        try:
            if self.security == "ssl":
                smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=timeout_s,
                                        context=self._tls())
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=timeout_s)
            with smtp:
                smtp.ehlo()
                if self.security == "starttls":
                    smtp.starttls(context=self._tls())
                    smtp.ehlo()
                if self.username:
                    smtp.login(self.username, self.password)
                refused = smtp.send_message(msg)
        except smtplib.SMTPResponseException as exc:
            raise DeliveryError(f"email: SMTP {exc.smtp_code} "
                                f"({type(exc).__name__})") from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"email: {type(exc).__name__}") from None
        if refused:
            raise DeliveryError(f"email: {len(refused)} recipients refused")
        return 250
