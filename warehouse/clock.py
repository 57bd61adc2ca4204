"""Time as the warehouse stores it: naive datetimes in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, as the naive UTC timestamp the warehouse stores."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(ts: datetime) -> datetime:
    """``ts`` as a naive UTC datetime (a zone-aware one is converted; naive is UTC)."""
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo is not None else ts
