"""Settings of the dashboard: live refresh and who may see it (issue #5)."""

from gpulens.settings.base import Setting, between


def _users_ok(value: str) -> bool:
    from dashboard.auth import parse_users  # the parser is the check: one place

    try:
        parse_users(value)
    except ValueError:
        return False
    return True


SETTINGS: tuple[Setting, ...] = (
    Setting("dashboard.refresh_s", float, 15.0, "Seconds between live page refreshes.",
            between(1, 3600), "a number of seconds from 1 to 3600"),
    Setting("dashboard.users", str, "",
            "Users allowed to log in, as comma-separated name:hash pairs (make a hash "
            "with `gpulens hash-password`). Empty: no login, unless a trusted header is "
            "set. Prefer the environment (GPULENS_DASHBOARD_USERS) to the file.",
            _users_ok, "comma-separated name:hash pairs with scrypt or pbkdf2 hashes"),
    Setting("dashboard.trusted_user_header", str, "",
            "HTTP header naming the user, set by an authenticating reverse proxy (e.g. "
            "X-Forwarded-User). Only safe when the dashboard is reachable through that "
            "proxy alone. Empty: not trusted."),
    Setting("dashboard.secret_key", str, "",
            "Key signing login sessions. Empty: a random key at each start, so logins "
            "end when the service restarts. Set it with GPULENS_DASHBOARD_SECRET_KEY."),
    Setting("dashboard.session_hours", float, 12.0, "Hours a login lasts.",
            between(0.1, 720), "a number of hours from 0.1 to 720"),
)
