"""Time as the warehouse stores it: naive datetimes in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def utcnow() -> datetime:
    """Now, as the naive UTC timestamp the warehouse stores."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(ts: datetime) -> datetime:
    """``ts`` as a naive UTC datetime (a zone-aware one is converted; naive is UTC)."""
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo is not None else ts


HOUR = timedelta(hours=1)


def floor_hour(ts: datetime) -> datetime:
    """``ts`` floored to its hour."""
    return ts.replace(minute=0, second=0, microsecond=0)


def ceil_hour(ts: datetime) -> datetime:
    """``ts`` rounded up to an hour (itself when whole)."""
    floor = floor_hour(ts)
    return floor if floor == ts else floor + HOUR


def floor_to(ts: datetime, step: timedelta) -> datetime:
    """``ts`` floored to a multiple of ``step`` since the Unix epoch (naive UTC)."""
    return ts - (ts - datetime(1970, 1, 1)) % step


def ceil_to(ts: datetime, step: timedelta) -> datetime:
    """``ts`` rounded up to a multiple of ``step`` since the Unix epoch (itself when one)."""
    floor = floor_to(ts, step)
    return floor if floor == ts else floor + step
