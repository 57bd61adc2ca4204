"""The global filters (time range, partition, rack) and the drill-down node, in the URL.

The URL's query string is the one source of truth, so a link reproduces a view:
``/utilization?range=7d&partition=gpu&rack=r01``. A page's ``layout(**query)`` turns its
query into :class:`Filters` (:func:`from_query`), draws the filter bar with those values
and keeps them in a ``dcc.Store`` (:data:`ids.FILTERS`) its callbacks read. Changing a
control rewrites the query string (:func:`register`'s callback); Dash's page router then
renders the page again for the new URL. Values from the URL are checked here: an unknown
range falls back to the default, names are cut to :data:`MAX_NAME` characters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from urllib.parse import parse_qsl, urlencode

#: Selectable time ranges: key -> (label, length). Keys appear in URLs.
RANGES: dict[str, tuple[str, timedelta]] = {
    "1h": ("Last hour", timedelta(hours=1)),
    "6h": ("Last 6 hours", timedelta(hours=6)),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}
DEFAULT_RANGE = "24h"
MAX_NAME = 128
KEYS = ("range", "partition", "rack", "node")


@dataclass(frozen=True)
class Filters:
    range: str = DEFAULT_RANGE
    partition: str | None = None
    rack: str | None = None
    node: str | None = None  # drill-down below the rack (not a filter of every chart)

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """``(start, end)``: the selected range ending at ``now`` (naive UTC)."""
        return now - RANGES[self.range][1], now

    @property
    def label(self) -> str:
        return RANGES[self.range][0]

    def to_store(self) -> dict:
        return asdict(self)

    def query_string(self) -> str:
        """``"?range=7d&rack=r01"`` (defaults and empty values left out)."""
        pairs = [(k, v) for k, v in asdict(self).items()
                 if v and not (k == "range" and v == DEFAULT_RANGE)]
        return "?" + urlencode(pairs) if pairs else ""

    def drill(self, *, rack: str | None = None, node: str | None = None) -> Filters:
        """The view one level down (or up, with None): a new rack forgets the node."""
        if rack is not None and rack != self.rack:
            return replace(self, rack=rack, node=node)
        return replace(self, node=node)

    def with_(self, **changes) -> Filters:
        return from_query({**asdict(self), **changes})


def _name(value) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    text = str(value).strip()[:MAX_NAME]
    return text or None


def from_query(query: dict | None) -> Filters:
    """Filters from a page's query parameters (or a stored dict); bad values dropped."""
    query = query or {}
    rng = query.get("range")
    rack = _name(query.get("rack"))
    return Filters(
        range=rng if rng in RANGES else DEFAULT_RANGE,
        partition=_name(query.get("partition")),
        rack=rack,
        node=_name(query.get("node")) if rack else None,
    )


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
        Input(ids.FILTER_PARTITION, "value"),
        Input(ids.FILTER_RACK, "value"),
        State(ids.FILTERS, "data"),
        prevent_initial_call=True,
    )
    def filters_to_url(rng, partition, rack, data):
        """A changed control rewrites the query string (the router re-renders the page)."""
        old = from_query(data)
        new = old.with_(range=rng, partition=partition, rack=rack,
                        node=old.node if rack == old.rack else None)
        return no_update if new == old else new.query_string()
