"""Settings of thermal alerting: evaluation, sinks (secrets from the environment), rules.

Per-rule settings (``alerts.<rule>.threshold`` ...) are generated from the shipped
defaults in alerts/rules.py so each default lives in one place.
"""

from alerts.model import SEVERITIES
from alerts.rules import DEFAULTS, RULE_FIELDS
from gpulens.settings.base import Setting, between, positive


def _url(v: str) -> bool:
    return v == "" or v.startswith(("http://", "https://"))


_URL = "an http:// or https:// URL, or empty to turn the sink off"

_GENERAL: tuple[Setting, ...] = (
    Setting("alerts.enabled", bool, True, "Evaluate thermal alert rules in the service."),
    Setting("alerts.evaluate_interval_s", float, 15.0,
            "Seconds between rule evaluations (a rack alert reaches the sinks within about "
            "this plus the rule's hold).", between(1, 600), "a number of seconds from 1 to 600"),
    Setting("alerts.deliver_interval_s", float, 5.0,
            "Seconds between passes over the notification outbox.", between(0.5, 600),
            "a number of seconds from 0.5 to 600"),
    Setting("alerts.retry_initial_s", float, 5.0,
            "First retry delay of a failed delivery; it doubles per failure.",
            between(0.1, 3600), "a number of seconds from 0.1 to 3600"),
    Setting("alerts.retry_max_s", float, 300.0,
            "Longest delay between delivery retries.", between(1, 86400),
            "a number of seconds from 1 to 86400"),
    Setting("alerts.give_up_h", float, 24.0,
            "Hours after which an undeliverable notification is marked dead.", positive,
            "a positive number of hours"),
    Setting("alerts.timeout_s", float, 10.0, "HTTP timeout of one delivery attempt.",
            between(0.1, 120), "a number of seconds from 0.1 to 120"),
    Setting("alerts.dashboard_url", str, "http://127.0.0.1:8050/",
            "Dashboard address put in notifications as the link to open.",
            lambda v: v.startswith(("http://", "https://")), "an http:// or https:// URL"),
    Setting("alerts.webhook_url", str, "",
            "Generic JSON webhook sink (signed with alerts.webhook_secret). Prefer the "
            "environment variable for URLs that carry tokens.", _url, _URL),
    Setting("alerts.webhook_secret", str, "",
            "Shared secret of the HMAC-SHA256 signature of webhook bodies (header "
            "X-Gpulens-Signature). Set it through GPULENS_ALERTS_WEBHOOK_SECRET."),
    Setting("alerts.slack_url", str, "",
            "Slack-compatible incoming-webhook sink. Set it through GPULENS_ALERTS_SLACK_URL.",
            _url, _URL),
    Setting("alerts.alertmanager_url", str, "",
            "Prometheus Alertmanager sink: its base address, e.g. http://am:9093 (alerts "
            "go to /api/v2/alerts).", _url, _URL),
    Setting("alerts.alertmanager_resend_s", float, 60.0,
            "Seconds between re-sends of firing alerts to Alertmanager (it resolves alerts "
            "not re-sent within its resolve_timeout).", between(5, 3600),
            "a number of seconds from 5 to 3600"),
    Setting("alerts.disabled", str, "",
            "Comma-separated rule names to turn off, e.g. \"temp_rise,hbm_temp\"."),
)

_HELP = {
    "severity": "Severity of {r}: info, warning or critical.",
    "threshold": "{r} fires at or above this value ({u}). {s}.",
    "clear": "A firing {r} alert resolves below this value ({u}); hysteresis.",
    "hold_s": "Seconds {r} must hold before it fires.",
    "resolve_hold_s": "Seconds {r} must stay below its clear level before it resolves.",
}


def _rule_settings() -> tuple[Setting, ...]:
    out = []
    for rule in DEFAULTS:
        unit = rule.unit or "1 = active"
        for f in RULE_FIELDS:
            text = _HELP[f].format(r=rule.name, u=unit, s=rule.summary)
            default = getattr(rule, f)
            if f == "severity":
                out.append(Setting(f"alerts.{rule.name}.{f}", str, default, text,
                                   lambda v: v in SEVERITIES, "info, warning or critical"))
            else:
                out.append(Setting(f"alerts.{rule.name}.{f}", float, float(default), text,
                                   lambda v: v >= 0, "a number >= 0"))
        for p, default in rule.params.items():
            if p == "column":
                continue
            kind = str if isinstance(default, str) else float
            out.append(Setting(f"alerts.{rule.name}.{p}", kind, default,
                               f"{rule.name} detector parameter {p} (see docs/alerts.md)."))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _GENERAL + _rule_settings()
