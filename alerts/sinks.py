"""Where notifications go: the generic webhook, Slack, Alertmanager; and the HTTP POST.

Every request carries ``Idempotency-Key: <notification key>`` (the same on every retry)
and ``Content-Type: application/json``. The generic webhook adds
``X-Gpulens-Signature: sha256=<hex HMAC-SHA256 of the raw body with the shared secret>``
when a secret is configured. URLs and secrets never appear in errors or logs: a failed
attempt is described by the sink's name and the HTTP status or the error class.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from alerts import payloads
from gpulens.settings import default

SIGNATURE_HEADER = "X-Gpulens-Signature"
KEY_HEADER = "Idempotency-Key"
KINDS = ("webhook", "slack", "alertmanager")


class DeliveryError(RuntimeError):
    """An attempt failed; the message names the sink, never its URL or secret."""


@dataclass(frozen=True)
class Sink:
    name: str  # webhook | slack | alertmanager
    url: str
    secret: str = ""

    def __repr__(self) -> str:  # keep URLs (which may carry tokens) out of logs
        return f"Sink({self.name})"

    @property
    def endpoint(self) -> str:
        if self.name == "alertmanager":
            return self.url.rstrip("/") + "/api/v2/alerts"
        return self.url


def configured(settings: Mapping[str, Any]) -> dict[str, Sink]:
    """The sinks with a URL in the ``alerts`` settings section, by name."""
    sinks = {}
    for name in KINDS:
        url = settings.get(f"{name}_url", "")
        if url:
            secret = settings.get("webhook_secret", "") if name == "webhook" else ""
            sinks[name] = Sink(name, url, secret)
    return sinks


def sign(secret: str, body: bytes) -> str:
    """The signature header value: ``sha256=`` + hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """True when ``header`` is the signature of ``body`` (constant-time compare)."""
    return header is not None and hmac.compare_digest(sign(secret, body), header)


def render(sink_name: str, doc: dict[str, Any]) -> str:
    """The body a sink receives for the generic document ``doc`` (JSON text)."""
    if sink_name == "slack":
        return payloads.encode(payloads.slack(doc))
    if sink_name == "alertmanager":
        return payloads.encode(payloads.alertmanager(doc))
    return payloads.encode(doc)


_local = threading.local()


def _session() -> requests.Session:
    """This thread's HTTP session: connections to a sink are kept open and reused
    between notifications (requests' pool); sessions are not shared across threads."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
        session.trust_env = False  # no proxy or .netrc from the environment
    return session


def post(sink: Sink, body: str, key: str, *,
         timeout_s: float = default("alerts.timeout_s")) -> int:
    """POST ``body`` to the sink (connect and read timeouts ``timeout_s`` seconds each);
    return the HTTP status or raise DeliveryError. Retries are the outbox's (persisted,
    with backoff: alerts/delivery.py), not the HTTP client's."""
    data = body.encode()
    headers = {"Content-Type": "application/json", KEY_HEADER: key,
               "User-Agent": "gpulens-alerts"}
    if sink.secret:
        headers[SIGNATURE_HEADER] = sign(sink.secret, data)
    try:
        response = _session().post(sink.endpoint, data=data, headers=headers,
                                   timeout=timeout_s)
    except (requests.RequestException, ValueError) as exc:
        raise DeliveryError(f"{sink.name}: {_reason(exc)}") from None
    if response.status_code >= 400:
        raise DeliveryError(f"{sink.name}: HTTP {response.status_code}")
    return response.status_code


def _reason(exc: BaseException) -> str:
    """The class of the innermost cause of a failed request (e.g. ConnectionRefusedError,
    ReadTimeout), never its message: messages carry the URL."""
    if isinstance(exc, requests.Timeout):
        return type(exc).__name__
    while exc.__context__ is not None and exc.__context__ is not exc:
        exc = exc.__context__
    return type(exc).__name__
