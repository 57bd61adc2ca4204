"""Layout pieces every page shares: the page frame, filter bar, panels, graphs, tables.

Pages compose these instead of repeating markup. Everything here is layout only (no
data is read); strings from jobs, users or logs go in as component children, which Dash
renders as text, never as HTML.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
from dash import dcc, html

from dashboard import context, figures, ids
from dashboard.filters import RANGES, Filters
from dashboard.formatting import DASH, missing

GRAPH_CONFIG = {"displaylogo": False,
                "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}


def filter_bar(f: Filters, *, show: Sequence[str] = ("range", "partition", "rack")) -> html.Div:
    """Time range, partition and rack controls set from the URL's filters ``f``.

    Options beyond the current values arrive from ``filters.register``'s callback.
    """
    def current(value):
        return [{"label": value, "value": value}] if value else []

    controls = []
    if "range" in show:
        controls.append(dcc.Dropdown(
            id=ids.FILTER_RANGE, value=f.range, clearable=False, searchable=False,
            options=[{"label": label, "value": key} for key, (label, _) in RANGES.items()],
            className="filter filter-range",
        ))
    for key, cid, placeholder in (("partition", ids.FILTER_PARTITION, "All partitions"),
                                  ("rack", ids.FILTER_RACK, "All racks")):
        value = getattr(f, key)
        controls.append(dcc.Dropdown(
            id=cid, value=value, options=current(value), placeholder=placeholder,
            className=f"filter filter-{key}", style=None if key in show else {"display": "none"},
        ))
    return html.Div(controls, className="filter-bar")


def page(name: str, title: str, f: Filters, *children, live: bool = True,
         filters: Sequence[str] = ("range", "partition", "rack"),
         intro: str | None = None) -> html.Div:
    """A page: header with the "updated" line and filter bar, then ``children``.

    The page's :class:`Filters` travel in a ``dcc.Store`` its callbacks read; a live page
    gets a ``dcc.Interval`` (``ids.refresh(name)``) its callbacks also listen to.
    """
    header = [html.Div([html.H1(title),
                        html.Span("Loading…", id=ids.updated(name), className="updated")],
                       className="page-title")]
    if filters:
        header.append(filter_bar(f, show=filters))
    extra = [dcc.Interval(id=ids.refresh(name), interval=context.refresh_ms())] if live else []
    return html.Div(
        [html.Div(header, className="page-header"),
         html.P(intro, className="page-intro") if intro else None,
         *children,
         dcc.Store(id=ids.FILTERS, data=f.to_store()), *extra],
        className="page",
    )


def panel(title: str, sub: str | None, *children, wide: bool = True,
          extra: object = None) -> html.Section:
    """A white panel with a title, a one-line explanation and its content."""
    head = [html.Div([html.H2(title), html.P(sub, className="panel-sub") if sub else None]),
            extra]
    return html.Section(
        [html.Div(head, className="panel-header"), *children],
        className="panel" + (" panel-wide" if wide else ""),
    )


def graph(graph_id, message: str = "Loading…", height: int = 320) -> dcc.Graph:
    """A dcc.Graph starting as an empty figure with ``message``."""
    return dcc.Graph(id=graph_id, figure=figures.empty_figure(message, height=height),
                     config=GRAPH_CONFIG)


def grid(*panels) -> html.Div:
    """Panels side by side (two columns on wide screens)."""
    return html.Div(list(panels), className="grid")


def empty(message: str, **kwargs) -> html.Div:
    """A sentence saying why there is nothing to show."""
    return html.Div(message, className="empty", **kwargs)


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    fmt: Callable[[object], str] | None = None  # value -> text; default str()
    href: Callable[[dict], str | None] | None = None  # row -> link target
    numeric: bool = False


def cell_text(value, fmt=None) -> str:
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__") and missing(value):
        return DASH
    if isinstance(value, str) and not value:
        return DASH
    return fmt(value) if fmt else str(value)


def table(df: pd.DataFrame | None, columns: Sequence[Column], *, empty_message: str,
          table_id: str | None = None, max_rows: int = 50) -> html.Div:
    """An HTML table of ``df``'s ``columns``; cells are text (never HTML)."""
    if df is None or len(df) == 0:
        return empty(empty_message)
    head = html.Thead(html.Tr([html.Th(c.title, className="num" if c.numeric else None)
                               for c in columns]))
    rows = []
    for rec in df.head(max_rows).to_dict("records"):
        cells = []
        for c in columns:
            text = cell_text(rec.get(c.key), c.fmt)
            target = c.href(rec) if c.href else None
            # a plain anchor: hundreds of dcc.Link components make a table slow to mount
            content = html.A(text, href=target) if target else text
            cells.append(html.Td(content, className="num" if c.numeric else None))
        rows.append(html.Tr(cells))
    note = []
    if len(df) > max_rows:
        note = [html.P(f"Showing the first {max_rows:,} of {len(df):,} rows.",
                       className="panel-sub")]
    extra = {"id": table_id} if table_id else {}
    return html.Div([html.Table([head, html.Tbody(rows)], className="data-table", **extra),
                     *note], className="table-wrap")


def job_href(rec: dict) -> str | None:
    """Link to a job's page (the id is URL-quoted)."""
    from urllib.parse import quote

    job = rec.get("job_id")
    return f"/jobs/{quote(str(job), safe='')}" if job and not missing(job) else None


def cards(items: Sequence[tuple[str, str, str]]) -> html.Div:
    """Headline cards from ``(title, value, note)`` text triples."""
    return html.Div(
        [html.Div([html.Div(t, className="card-title"), html.Div(v, className="card-value"),
                   html.Div(n, className="card-note")], className="card")
         for t, v, n in items],
        className="cards",
    )
