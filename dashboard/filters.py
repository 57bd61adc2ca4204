"""The global filters (time window, partition, rack) and the drill-down node, in the URL.

The URL's query string is the one source of truth, so a link reproduces a view:
``/utilization?range=7d&partition=gpu&rack=r01``. A page's ``layout(**query)`` turns its
query into :class:`Filters` (:func:`from_query`), draws the filter bar with those values
and keeps them in a ``dcc.Store`` (:data:`ids.FILTERS`) its callbacks read. Changing a
control rewrites the query string (:func:`register`'s callback), keeping parameters that
are not filters (``node`` on the node page); Dash's page router then renders the page
again for the new URL. Values from the URL are checked here: an unknown range falls
back to the default, a malformed week or date is dropped, names are cut to
:data:`MAX_NAME` characters.

Windows (naive UTC, ``[start, end)``, never past ``now``):

- a rolling range: ``range=24h`` (the last 24 hours);
- an ISO week: ``week=2026-W47`` (Monday 00:00 to Monday 00:00 UTC, the weekly report's
  week; up to now while it runs); ``range=week`` alone is the current week since Monday,
  the Overview's "this week";
- a custom range of days: ``from=2026-11-16&to=2026-11-18`` (from 00:00 of the first day
  to 24:00 of the last).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import date, datetime, timedelta
from urllib.parse import parse_qsl, urlencode

from warehouse.queries import weekly

#: Selectable rolling ranges: key -> (label, length). Keys appear in URLs.
RANGES: dict[str, tuple[str, timedelta]] = {
    "1h": ("Last hour", timedelta(hours=1)),
    "6h": ("Last 6 hours", timedelta(hours=6)),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}
WEEK, CUSTOM = "week", "custom"  # range keys of an ISO week and of a custom range
DEFAULT_RANGE = "24h"
MAX_NAME = 128
MAX_CUSTOM_DAYS = 366
KEYS = ("range", "week", "from", "to", "partition", "rack", "node")


def _day(value) -> str | None:
    """An ISO date ``YYYY-MM-DD`` (a longer ISO timestamp is cut to its date), or None."""
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value.strip()[:10]).isoformat()
    except ValueError:
        return None


def _week(value) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return weekly.week_name(weekly.parse_week(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class Filters:
    range: str = DEFAULT_RANGE  # a RANGES key, WEEK or CUSTOM
    partition: str | None = None
    rack: str | None = None
    node: str | None = None  # drill-down below the rack (not a filter of every chart)
    week: str | None = None  # "2026-W47" with range WEEK (None: the current week)
    start_day: str | None = None  # "2026-11-16" with range CUSTOM
    end_day: str | None = None  # "2026-11-18" (inclusive) with range CUSTOM

    def _bounds(self, now: datetime) -> tuple[datetime, datetime]:
        """The window before it is cut at ``now``."""
        if self.range == WEEK:
            return weekly.week_range(self.week or weekly.week_name(now.date()))
        if self.range == CUSTOM:
            start = datetime.fromisoformat(self.start_day or now.date().isoformat())
            last = datetime.fromisoformat(self.end_day or now.date().isoformat())
            return start, max(last, start) + timedelta(days=1)
        return now - RANGES[self.range][1], now

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """``(start, end)`` of the selected window, naive UTC, ``end`` at most ``now``."""
        start, end = self._bounds(now)
        end = min(end, now)
        return min(start, end), end

    @property
    def label(self) -> str:
        if self.range == WEEK:
            return f"Week {self.week}" if self.week else "This week (since Monday)"
        if self.range == CUSTOM:
            first = date.fromisoformat(self.start_day) if self.start_day else None
            last = date.fromisoformat(self.end_day) if self.end_day else None
            if first and last and first != last:
                return f"{first:%d %b %Y} – {last:%d %b %Y}"
            return f"{(first or last):%d %b %Y}" if (first or last) else "Today"
        return RANGES[self.range][0]

    def is_partial(self, now: datetime) -> bool:
        """True when the window ends at ``now`` (a rolling range, this week, today): its
        last bucket is still filling and is drawn as such."""
        return self.range in RANGES or self._bounds(now)[1] > now

    def to_store(self) -> dict:
        return asdict(self)

    def query_pairs(self) -> list[tuple[str, str]]:
        """The URL parameters of these filters (defaults and empty values left out)."""
        pairs: list[tuple[str, str]] = []
        if self.range == WEEK and self.week:
            pairs.append(("week", self.week))
        elif self.range == CUSTOM:
            pairs += [(k, v) for k, v in (("from", self.start_day), ("to", self.end_day)) if v]
        elif self.range != DEFAULT_RANGE:
            pairs.append(("range", self.range))
        pairs += [(k, v) for k, v in (("partition", self.partition), ("rack", self.rack),
                                      ("node", self.node)) if v]
        return pairs

    def query_string(self) -> str:
        """``"?range=7d&rack=r01"`` (defaults and empty values left out)."""
        pairs = self.query_pairs()
        return "?" + urlencode(pairs) if pairs else ""

    def drill(self, *, rack: str | None = None, node: str | None = None) -> Filters:
        """The view one level down (or up, with None): a new rack forgets the node."""
        if rack is not None and rack != self.rack:
            return replace(self, rack=rack, node=node)
        return replace(self, node=node)

    def with_(self, **changes) -> Filters:
        return from_query({**self.to_store(), **changes})


def _name(value) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    text = str(value).strip()[:MAX_NAME]
    return text or None


def from_query(query: dict | None) -> Filters:
    """Filters from a page's query parameters (or a stored dict); bad values dropped.

    ``week`` selects an ISO week, ``from``/``to`` (or a stored dict's ``start_day`` /
    ``end_day``) a custom range of days; either wins over ``range``."""
    query = query or {}
    rng = query.get("range")
    rack = _name(query.get("rack"))
    week = _week(query.get("week"))
    first = _day(query.get("from", query.get("start_day")))
    last = _day(query.get("to", query.get("end_day")))
    if first and last and first > last:
        first, last = last, first
    if first and last and (date.fromisoformat(last)
                           - date.fromisoformat(first)).days > MAX_CUSTOM_DAYS:
        first = (date.fromisoformat(last) - timedelta(days=MAX_CUSTOM_DAYS)).isoformat()
    explicit = rng in RANGES
    if rng == WEEK or (week and not explicit and rng != CUSTOM):
        rng = WEEK
    elif rng == CUSTOM or ((first or last) and not explicit):
        rng = CUSTOM if (first or last) else DEFAULT_RANGE
    elif not explicit:
        rng = DEFAULT_RANGE
    return Filters(
        range=rng,
        partition=_name(query.get("partition")),
        rack=rack,
        node=_name(query.get("node")) if rack else None,
        week=week if rng == WEEK else None,
        start_day=first if rng == CUSTOM else None,
        end_day=last if rng == CUSTOM else None,
    )


def week_options(now: datetime, weeks: int = 12) -> list[dict]:
    """The last ``weeks`` ISO weeks for the week picker, newest first."""
    monday = now.date() - timedelta(days=now.weekday())
    names = [weekly.week_name(monday - timedelta(days=7 * i)) for i in range(weeks)]
    return [{"label": f"{n} (this week)" if i == 0 else n, "value": n}
            for i, n in enumerate(names)]


def from_search(search: str | None) -> Filters:
    """Filters from a URL query string (``"?range=7d"``)."""
    return from_query(dict(parse_qsl((search or "").lstrip("?"))))


def register(app) -> None:
    """The callbacks of the filter bar, on ``app`` (every page shares the bar's ids)."""
    from dash import Input, Output, State, no_update

    from dashboard import context, ids
    from warehouse.queries import topology

    @app.callback(
        Output(ids.FILTER_PARTITION, "options"),
        Output(ids.FILTER_RACK, "options"),
        Input(ids.FILTERS, "data"),
    )
    def filter_options(data):
        """Partitions and racks of the topology (the rack list follows the partition)."""
        f = from_query(data)
        opts = topology.filter_options(context.reader(), partition=f.partition)
        return ([{"label": p, "value": p} for p in opts["partitions"]],
                [{"label": r, "value": r} for r in opts["racks"]])

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.FILTER_RANGE, "value"),
        Input(ids.FILTER_WEEK, "value"),
        Input(ids.FILTER_DAYS, "start_date"),
        Input(ids.FILTER_DAYS, "end_date"),
        Input(ids.FILTER_PARTITION, "value"),
        Input(ids.FILTER_RACK, "value"),
        State(ids.FILTERS, "data"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def filters_to_url(rng, week, first, last, partition, rack, data, search=None):
        """A changed control rewrites the query string (the router re-renders the page);
        parameters that are not filters (``node`` of the node page) stay."""
        old = from_query(data)
        new = updated(old, rng=rng, week=week, first=first, last=last,
                      partition=partition, rack=rack, today=context.now().date())
        if new == old:
            return no_update
        return merged_search(new, search)


def updated(old: Filters, *, rng, week, first, last, partition, rack, today: date) -> Filters:
    """The filters after the bar's controls changed to these values."""
    changes = {"range": rng, "partition": partition, "rack": rack,
               "node": old.node if rack == old.rack else None,
               "week": week if rng == WEEK else None,
               "start_day": None, "end_day": None}
    if rng == CUSTOM:
        changes["start_day"] = _day(first) or old.start_day or today.isoformat()
        changes["end_day"] = _day(last) or old.end_day or changes["start_day"]
    return old.with_(**changes)


def merged_search(f: Filters, search: str | None) -> str:
    """``f``'s query string with the parameters of ``search`` that are not filters (and
    a ``node`` without a rack: the node page's subject, not a drill-down)."""
    params = parse_qsl((search or "").lstrip("?"))
    page_node = not any(k == "rack" for k, _ in params)
    keep = [(k, v) for k, v in params
            if k not in KEYS or (k == "node" and page_node and not f.rack)]
    pairs = f.query_pairs() + keep
    return "?" + urlencode(pairs) if pairs else ""
