"""Report deliveries through the alert outbox: e-mail to a real SMTP server on localhost
(aiosmtpd: plain, STARTTLS with login), retries while it is down, the signed webhook."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta

import pytest

from alerts.delivery import Backoff, deliver_due
from alerts.mail import MailSink, document
from alerts.receiver import start_receiver
from alerts.sinks import DeliveryError
from dashboard.report import generate as gen
from tests.support.integration import free_port
from tests.support.report import NOW, WEEK, report_config, seeded_copy
from tests.support.smtp import Inbox
from warehouse import Warehouse, alerts_store
from warehouse.queries import alerts as q

aiosmtpd = pytest.importorskip("aiosmtpd", reason="pip install aiosmtpd (test extra)")
from aiosmtpd.controller import Controller  # noqa: E402
from aiosmtpd.smtp import AuthResult  # noqa: E402


def queue(wh, doc, key="k1", sink="email", now=NOW):
    row = {"notification_key": key, "sink": sink, "kind": "report", "group_key": "report/x",
           "created_at": now, "body": json.dumps(doc), "status": "pending", "attempts": 0,
           "next_attempt_at": now}
    wh.write(lambda con: alerts_store.enqueue(con, [row])).result()


def test_mail_with_html_and_pdf_attachment_through_the_outbox(tmp_path, smtp):
    ctl, inbox = smtp
    pdf = tmp_path / "gpulens-report-2026-W47.pdf"
    pdf.write_bytes(b"%PDF-1.4 test\n%%EOF\n")
    doc = document(to=["ops@example.org", "cto@example.org"], subject="weekly",
                   text="plain", html="<p>Fleet: 128 GPUs</p>", attachments=[pdf])
    with Warehouse(tmp_path / "w.duckdb") as wh:
        queue(wh, doc)
        sink = MailSink(host="127.0.0.1", port=ctl.port, security="none")
        assert deliver_due(wh, {"email": sink}, now=NOW) == {"delivered": 1, "failed": 0}
        assert q.outbox_summary(wh.reader())["status"].tolist() == ["delivered"]
    (msg,) = inbox.messages
    assert msg["Subject"] == "weekly" and msg["Message-ID"].startswith("<k1@")
    assert "cto@example.org" in msg["To"]
    assert "128 GPUs" in msg.get_body(("html",)).get_content()
    (att,) = list(msg.iter_attachments())
    assert att.get_filename() == pdf.name and att.get_content() == pdf.read_bytes()


def test_mail_is_retried_until_the_server_is_back(tmp_path):
    inbox, port = Inbox(), free_port()
    doc = document(to=["ops@example.org"], subject="s", text="t", html="<p>h</p>")
    with Warehouse(tmp_path / "w.duckdb") as wh:
        queue(wh, doc)
        sinks = {"email": MailSink(host="127.0.0.1", port=port, security="none")}
        backoff = Backoff(initial_s=5, max_s=60)
        assert deliver_due(wh, sinks, now=NOW, backoff=backoff, timeout_s=2)["failed"] == 1
        row = q.pending_notifications(wh.reader()).iloc[0]
        assert row["attempts"] == 1 and row["next_attempt_at"] == NOW + timedelta(seconds=5)
        ctl = Controller(inbox, hostname="127.0.0.1", port=port)
        ctl.start()
        try:
            assert deliver_due(wh, sinks, now=NOW + timedelta(seconds=2), backoff=backoff
                               ) == {"delivered": 0, "failed": 0}  # still backing off
            assert deliver_due(wh, sinks, now=NOW + timedelta(seconds=6),
                               backoff=backoff)["delivered"] == 1
        finally:
            ctl.stop()
    assert len(inbox.messages) == 1


def test_starttls_and_login(tmp_path):
    from aiosmtpd.smtp import SMTP as Server  # noqa: N811

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    logins = []

    def auth(server, session, envelope, mechanism, data):
        logins.append((data.login, data.password))
        return AuthResult(success=data.login == b"gpulens" and data.password == b"pw")

    inbox, port = Inbox(), free_port()

    class TLSController(Controller):
        def factory(self):
            return Server(self.handler, tls_context=ctx, require_starttls=True,
                          authenticator=auth, auth_required=True)

    ctl = TLSController(inbox, hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        sink = MailSink(host="127.0.0.1", port=port, security="starttls", username="gpulens",
                        password="pw", ca_file=str(cert), sender="gpulens@example.org")
        body = json.dumps(document(to=["ops@example.org"], subject="tls", text="t", html=""))
        assert sink.deliver(body, "k2", timeout_s=5) == 250
        bad = MailSink(host="127.0.0.1", port=port, security="starttls", username="gpulens",
                       password="wrong", ca_file=str(cert))
        with pytest.raises(DeliveryError, match="^email: SMTP") as err:  # 535 or hang-up
            bad.deliver(body, "k3", timeout_s=5)
        assert "wrong" not in str(err.value) and repr(bad) == "MailSink(email)"
    finally:
        ctl.stop()
    assert logins[0] == (b"gpulens", b"pw") and len(inbox.messages) == 1


@pytest.mark.slow
def test_generated_report_is_mailed_and_posted(tmp_path, smtp):
    ctl, inbox = smtp
    rx = start_receiver(secret="hook-secret")
    try:
        cfg = report_config(tmp_path, reports__pdf=False, reports__email_to="ops@example.org",
                            cluster__name="eval-2",
                            reports__smtp_host="127.0.0.1", reports__smtp_port=ctl.port,
                            reports__smtp_security="none", reports__webhook_url=rx.url,
                            reports__webhook_secret="hook-secret")
        with Warehouse(seeded_copy(tmp_path)) as wh:
            out = gen.generate(wh, cfg, week=WEEK, now=NOW, send=True)
            assert sorted(out["queued"]) == ["email", "report_webhook"]
            assert gen.deliver_now(wh, cfg, NOW) == {"delivered": 2, "failed": 0}
        (got,) = rx.received
        body = got.body
        assert body["kind"] == "report" and body["week"] == WEEK
        assert body["cluster"] == "eval-2" and body["title"].endswith("cluster eval-2")
        assert body["summary"] == out["summary"]
        assert body["headline"]["reliability.failures"] > 0
        assert body["dashboard_url"].endswith("/reports")
        assert got.headers["x-gpulens-signature"].startswith("sha256=")  # checked by rx
        (msg,) = inbox.messages
        assert msg["Subject"] == f"gpulens weekly report {WEEK}, cluster eval-2"
        assert out["summary"][1] in msg.get_body(("plain",)).get_content()
        (att,) = list(msg.iter_attachments())  # no PDF configured: the HTML file
        assert att.get_filename() == f"gpulens-report-{WEEK}.html"
    finally:
        rx.stop()
