"""Settings of the dashboard: live refresh and who may see it, from where, doing what
(issues #5 and #13; the security model is in docs/operations.md)."""

from gpulens.settings.base import Setting, between


def _users_ok(value: str) -> bool:
    from dashboard.auth import parse_users  # the parser is the check: one place

    try:
        parse_users(value)
    except ValueError:
        return False
    return True


def _parses(parser_name: str):
    """A check calling ``dashboard.auth.<parser_name>``: the parser is the check."""

    def check(value: str) -> bool:
        from dashboard import auth

        try:
            getattr(auth, parser_name)(value)
        except ValueError:
            return False
        return True

    return check


def _public_url_ok(value: str) -> bool:
    from urllib.parse import urlsplit

    if value == "":
        return True
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query


SETTINGS: tuple[Setting, ...] = (
    Setting("dashboard.refresh_s", float, 15.0, "Seconds between live page refreshes.",
            between(1, 3600), "a number of seconds from 1 to 3600"),
    Setting("dashboard.users", str, "",
            "Users allowed to log in, as comma-separated name:hash pairs (make a hash "
            "with `gpulens hash-password`). Empty: no login, unless a trusted header is "
            "set. Prefer the environment (GPULENS_DASHBOARD_USERS) to the file.",
            _users_ok, "comma-separated name:hash pairs with scrypt or pbkdf2 hashes",
            max_len=1 << 20),
    Setting("dashboard.trusted_user_header", str, "",
            "HTTP header naming the user, set by an authenticating reverse proxy (e.g. "
            "X-Forwarded-User). Read only from the addresses in dashboard.trusted_proxies. "
            "Empty: not trusted."),
    Setting("dashboard.trusted_proxies", str, "",
            "Addresses of the authenticating proxies whose user header is believed: IP "
            "addresses or CIDR networks separated by commas, e.g. 127.0.0.1/32. Empty: "
            "the header is ignored (the start-up log says so).",
            _parses("parse_networks"), "comma-separated IP addresses or CIDR networks"),
    Setting("dashboard.auto_provision", bool, False,
            "Let a proxy-authenticated user who is not configured (in dashboard.users, "
            "operators or viewers) in, with dashboard.default_role. Off: refused."),
    Setting("dashboard.operators", str, "",
            "Users (comma-separated names) with the operator role: they may acknowledge "
            "and silence alerts and make reports. Proxy users listed here need no hash.",
            _parses("parse_names"), "comma-separated user names"),
    Setting("dashboard.viewers", str, "",
            "Users (comma-separated names) with the viewer role: read only. Proxy users "
            "listed here need no hash.", _parses("parse_names"), "comma-separated user names"),
    Setting("dashboard.default_role", str, "viewer",
            "Role of a user listed in neither dashboard.operators nor dashboard.viewers "
            "(and of auto-provisioned users): viewer or operator. Without any login "
            "everyone who reaches the service is an operator.",
            lambda v: v in ("viewer", "operator"), "viewer or operator"),
    Setting("dashboard.groups_header", str, "",
            "HTTP header with the user's groups set by the trusted proxy (e.g. "
            "X-Forwarded-Groups, comma-separated). Empty: groups are not read."),
    Setting("dashboard.operator_groups", str, "",
            "Groups (comma-separated) whose members get the operator role, from "
            "dashboard.groups_header.", _parses("parse_names"), "comma-separated group names"),
    Setting("dashboard.public_url", str, "",
            "The address users open, e.g. https://gpulens.example.com/ behind a proxy. "
            "Requests that change state must come from this origin (or the one of the "
            "Host they were sent to); its host is an allowed Host. Empty: none.",
            _public_url_ok, "an http:// or https:// URL, or empty"),
    Setting("dashboard.allowed_hosts", str, "",
            "Host names (comma-separated) the dashboard answers to besides IP addresses, "
            "localhost and the host of dashboard.public_url; other Host headers get 400 "
            "(DNS rebinding).", _parses("parse_names"), "comma-separated host names"),
    Setting("dashboard.cookie_secure", str, "auto",
            "Mark cookies Secure (sent over HTTPS only): true, false, or auto (when "
            "dashboard.public_url is https, e.g. behind a TLS proxy).",
            lambda v: v in ("auto", "true", "false"), "auto, true or false"),
    Setting("dashboard.login_limits", str, "5 per minute; 20 per hour; 100 per day",
            "Failed logins allowed per account and per address, as limits separated by "
            "semicolons; past one, logins answer 429 until its window passes.",
            _parses("parse_limits"), "limits like '5 per minute; 20 per hour'"),
    Setting("dashboard.secret_key", str, "",
            "Key signing session cookies and CSRF tokens. Empty: a random key kept in "
            "<service.db>.auth.key (mode 0600), so logins and open pages outlive a "
            "restart. Set it with GPULENS_DASHBOARD_SECRET_KEY."),
    Setting("dashboard.session_hours", float, 12.0, "Hours a login lasts.",
            between(0.1, 720), "a number of hours from 0.1 to 720"),
)
