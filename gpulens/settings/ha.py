"""Settings of a high-availability pair (issue 20): the twin, its liveness, who pages.

See alerts/ha.py and docs/operations.md (HA deployment).
"""

from gpulens.settings.base import Setting, between

ROLES = ("primary", "standby")


def _url(v: str) -> bool:
    return v == "" or v.startswith(("http://", "https://"))


SETTINGS: tuple[Setting, ...] = (
    Setting("ha.peer_url", str, "",
            "Base URL of this instance's twin in an HA pair, e.g. http://gpulens-b:8050/ "
            "(its /healthz is polled). Empty: no pair, this instance pages alone.",
            _url, "an http:// or https:// URL, or empty for no pair"),
    Setting("ha.role", str, "primary",
            "This instance's role in the pair. Direct sinks (webhook, Slack, e-mail, the "
            "weekly report's) are sent by the primary; the standby holds its copies and "
            "sends those the primary did not deliver once the primary is gone. "
            "Alertmanager gets every alert from both (it deduplicates).",
            lambda v: v in ROLES, "primary or standby"),
    Setting("ha.name", str, "",
            "Name of this instance, as its twin's twin_gone alert and /healthz show it "
            "(empty: host name and port).", max_len=128),
    Setting("ha.poll_interval_s", float, 5.0,
            "Seconds between polls of the twin's /healthz.", between(0.2, 3600),
            "a number of seconds from 0.2 to 3600"),
    Setting("ha.poll_timeout_s", float, 3.0,
            "Seconds one poll of the twin may take before it counts as unanswered.",
            between(0.1, 60), "a number of seconds from 0.1 to 60"),
    Setting("ha.twin_gone_after_s", float, 60.0,
            "The twin counts as gone when it has not answered for this long: the "
            "twin_gone alert fires and a standby starts sending direct notifications.",
            between(1, 86400), "a number of seconds from 1 to 86400"),
    Setting("ha.match_s", float, 120.0,
            "A notification the twin delivered under another key stands for one of this "
            "instance's own of the same group, kind and sink when their creation times are "
            "at most this far apart (about twice the key's one-minute slot) and its key is "
            "not one of this instance's.",
            between(0, 600), "a number of seconds from 0 to 600"),
)
