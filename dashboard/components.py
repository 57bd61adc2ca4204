"""Layout pieces every page shares: the page frame, filter bar, panels, graphs, tables.

Pages compose these instead of repeating markup. Everything here is layout only (no
data is read); strings from jobs, users or logs go in as component children or plain
DataTable cells, which Dash renders as text, never as HTML (a table's link column is
Markdown with escaped text, see :func:`md_link`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath
from urllib.parse import quote

import pandas as pd
from dash import dash_table, dcc, html
from dash.dash_table.Format import Format, Group, Scheme, Symbol

from dashboard import context, ids
from dashboard.figures.base import empty_layout
from dashboard.filters import CUSTOM, RANGES, WEEK, Filters, week_options
from dashboard.formatting import DASH, missing

GRAPH_CONFIG = {"displaylogo": False,
                "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}


def range_options() -> list[dict]:
    """The window dropdown: rolling ranges, an ISO week, a custom range of days."""
    return [*({"label": label, "value": key} for key, (label, _) in RANGES.items()),
            {"label": "ISO week", "value": WEEK}, {"label": "Custom days", "value": CUSTOM}]


def filter_bar(f: Filters, *, show: Sequence[str] = ("range", "partition", "rack")) -> html.Div:
    """Window, partition and rack controls set from the URL's filters ``f``.

    The week picker shows with an ISO week, the day picker with a custom range. Options
    beyond the current values arrive from ``filters.register``'s callback.
    """
    def current(value):
        return [{"label": value, "value": value}] if value else []

    def shown(visible: bool) -> dict | None:
        return None if visible else {"display": "none"}

    now = context.now()
    start, end = f.window(now)
    controls = [
        dcc.Dropdown(id=ids.FILTER_RANGE, value=f.range, clearable=False, searchable=False,
                     options=range_options(), className="filter filter-range",
                     style=shown("range" in show)),
        dcc.Dropdown(id=ids.FILTER_WEEK, value=f.week or week_options(now, 1)[0]["value"],
                     clearable=False, options=week_options(now),
                     className="filter filter-week",
                     style=shown("range" in show and f.range == WEEK)),
        html.Div(dcc.DatePickerRange(
            id=ids.FILTER_DAYS, start_date=f.start_day or start.date().isoformat(),
            end_date=f.end_day or (end - timedelta(seconds=1)).date().isoformat(),
            display_format="YYYY-MM-DD", first_day_of_week=1, minimum_nights=0,
            max_date_allowed=now.date().isoformat(), clearable=False),
            className="filter filter-days",
            style=shown("range" in show and f.range == CUSTOM)),
    ]
    for key, cid, placeholder in (("partition", ids.FILTER_PARTITION, "All partitions"),
                                  ("rack", ids.FILTER_RACK, "All racks")):
        value = getattr(f, key)
        controls.append(dcc.Dropdown(
            id=cid, value=value, options=current(value), placeholder=placeholder,
            className=f"filter filter-{key}", style=shown(key in show),
        ))
    return html.Div(controls, className="filter-bar")


def page(name: str, title: str, f: Filters, *children, live: bool = True,
         filters: Sequence[str] = ("range", "partition", "rack"),
         intro: str | None = None) -> html.Div:
    """A page: header with the "updated" line, the simulated-warehouse label (with the
    demo profile's raised failure rate named) and filter bar, then ``children``.

    The page's :class:`Filters` travel in a ``dcc.Store`` its callbacks read; a live page
    gets a ``dcc.Interval`` (``ids.refresh(name)``) its callbacks also listen to.
    """
    header = [html.Div([html.H1(title),
                        html.Span("Loading…", id=ids.updated(name), className="updated")],
                       className="page-title")]
    simulated = context.simulated_label()  # every page of a simulated warehouse says so
    if simulated:
        header.append(html.Span(simulated, className="simulated-label"))
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
    """A dcc.Graph starting as an empty figure with ``message`` (a plain dict: plotly's
    validation of a placeholder cost ~10 ms per graph in every page's layout)."""
    return dcc.Graph(id=graph_id, config=GRAPH_CONFIG,
                     figure={"data": [], "layout": empty_layout(message, height=height)})


def grid(*panels) -> html.Div:
    """Panels side by side (two columns on wide screens)."""
    return html.Div(list(panels), className="grid")


def empty(message: str, **kwargs) -> html.Div:
    """A sentence saying why there is nothing to show."""
    return html.Div(message, className="empty", **kwargs)


@dataclass(frozen=True)
class Column:
    """A table column. ``digits`` set: a number column, shipped as the number (so it
    sorts, filters with ``> 10`` and exports as a number) and shown with ``digits``
    decimals, thousands separators and ``unit``; otherwise text from ``fmt``."""

    key: str
    title: str
    fmt: Callable[[object], str] | None = None  # value -> text; default str()
    href: Callable[[dict], str | None] | None = None  # row -> link target
    numeric: bool = False
    digits: int | None = None  # a number column with this many decimals
    unit: str = ""  # shown after a number column's values: "GPU·h", "°C"


def num(key: str, title: str, digits: int = 0, unit: str = "") -> Column:
    """A number column (see :class:`Column`): right-aligned, sortable as numbers."""
    return Column(key, title, numeric=True, digits=digits, unit=unit)


def _number_format(c: Column) -> dict:
    fmt = Format(precision=c.digits, scheme=Scheme.fixed, group=Group.yes).nully(DASH)
    if c.unit:
        fmt = fmt.symbol(Symbol.yes).symbol_suffix(f" {c.unit}")
    return fmt.to_plotly_json()


def _number(value, digits: int):
    """A cell's number (rounded to what is shown), or None for a missing value."""
    if value is None or isinstance(value, str) or missing(value):
        return None
    try:
        return round(float(value), digits) if digits else int(round(float(value)))
    except (TypeError, ValueError, OverflowError):
        return None


def cell_text(value, fmt=None) -> str:
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__") and missing(value):
        return DASH
    if isinstance(value, str) and not value:
        return DASH
    return fmt(value) if fmt else str(value)


#: Rows a table ships to the browser (beyond them a note says how many there were) and
#: rows on one page of it. A DataTable is one React component, so hundreds of rows cost
#: a few milliseconds to mount, not ~3 ms per cell as a tree of html.Td components did.
MAX_TABLE_ROWS = 500
PAGE_SIZE = 50

_MD_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark
_SAFE_HREF = re.compile(r"^(/(?!/)|https?://)")  # a site path or an http(s) URL
_HREF_SAFE = "/?&=#%:;,@+$~.-_!*"  # URL characters kept; ( ) < > space are quoted

# Cell styles as DataTable props (inline): they win over the table's own stylesheet.
# Colours and sizes follow assets/gpulens.css (.data-table).
_STYLE_CELL = {
    "fontFamily": "var(--font)", "fontSize": "13px", "color": "var(--ink)",
    "padding": "7px 10px", "textAlign": "left", "backgroundColor": "transparent",
    "border": "none", "borderBottom": "1px solid #f0f2f5", "whiteSpace": "normal",
    "height": "auto", "maxWidth": "420px", "overflowWrap": "anywhere",
    "fontVariantNumeric": "tabular-nums",
}
_STYLE_HEADER = {
    "color": "var(--muted)", "fontWeight": 600, "fontSize": "12px",
    "borderBottom": "1px solid var(--line)", "padding": "8px 10px",
    "whiteSpace": "nowrap", "backgroundColor": "transparent",
}


def md_escape(text: str) -> str:
    """``text`` as literal Markdown: every ASCII punctuation mark backslash-escaped and
    line breaks made spaces, so names like ``<img ...>`` or ``[x](y)`` stay text."""
    return _MD_PUNCT.sub(r"\\\1", " ".join(str(text).splitlines()))


def md_link(text: str, href: str) -> str:
    """A Markdown link with escaped ``text``; ``href`` must be a site path or an
    http(s) URL (anything else, e.g. ``javascript:``, gives the bare text)."""
    if not _SAFE_HREF.match(href):
        return md_escape(text)
    return f"[{md_escape(text)}]({quote(href, safe=_HREF_SAFE)})"


def table(df: pd.DataFrame | None, columns: Sequence[Column], *, empty_message: str,
          table_id: str | None = None, max_rows: int = MAX_TABLE_ROWS,
          page_size: int = PAGE_SIZE) -> html.Div:
    """``df``'s ``columns`` as one ``dash_table.DataTable`` (paged by ``page_size``),
    sortable and filterable in the browser, with an Export button writing the rows as CSV.

    Cells are plain text or numbers, never HTML or Markdown: only a column with ``href``
    is a Markdown column, holding a link whose text is escaped (:func:`md_link`)."""
    if df is None or len(df) == 0:
        return empty(empty_message)
    records = df.head(max_rows).to_dict("records")
    data = []
    for rec in records:
        row = {}
        for c in columns:
            if c.digits is not None and not c.href:
                row[c.key] = _number(rec.get(c.key), c.digits)
                continue
            text = cell_text(rec.get(c.key), c.fmt)
            target = c.href(rec) if c.href else None
            row[c.key] = md_link(text, target) if target else (
                md_escape(text) if c.href else text)
        data.append(row)
    spec = [{"id": c.key, "name": c.title,
             **({"presentation": "markdown"} if c.href else {}),
             **({"type": "numeric", "format": _number_format(c)}
                if c.digits is not None and not c.href else {})} for c in columns]
    right = [{"if": {"column_id": c.key}, "textAlign": "right"} for c in columns if c.numeric]
    with warnings.catch_warnings():
        # DataTable is deprecated in favour of dash-ag-grid, which is not a dependency
        warnings.simplefilter("ignore", DeprecationWarning)
        grid = dash_table.DataTable(
            data=data, columns=spec, page_action="native" if len(data) > page_size else "none",
            page_size=page_size, cell_selectable=False, style_as_list_view=True,
            sort_action="native", sort_mode="single", filter_action="native",
            filter_options={"case": "insensitive", "placeholder_text": "filter…"},
            export_format="csv", export_headers="display",
            markdown_options={"link_target": "_self", "html": False},
            style_table={"overflowX": "auto"}, style_cell=_STYLE_CELL,
            style_header=_STYLE_HEADER, style_cell_conditional=right,
            **({"id": table_id} if table_id else {}),
        )
    note = []
    if len(df) > max_rows:
        note = [html.P(f"Showing the first {max_rows:,} of {len(df):,} rows.",
                       className="panel-sub")]
    return html.Div([grid, *note], className="table-wrap data-table")


def job_href(rec: dict) -> str | None:
    """Link to a job's page (the id is URL-quoted)."""
    job = rec.get("job_id")
    return f"/jobs/{quote(str(job), safe='')}" if job and not missing(job) else None


def node_href(rec: dict) -> str | None:
    """Link to a node's page (``/node?node=...``)."""
    node = rec.get("node")
    return f"/node?node={quote(str(node), safe='')}" if node and not missing(node) else None


def report_href(rec: dict) -> str | None:
    """Link to a weekly report file as the service serves it
    (``/api/reports/files/<name>``, dashboard/report/api.py)."""
    path = rec.get("path")
    if not isinstance(path, str) or not path:
        return None
    return f"/api/reports/files/{quote(PurePath(path).name, safe='')}"


def cards(items: Sequence[tuple[str, str, str]]) -> html.Div:
    """Headline cards from ``(title, value, note)`` text triples."""
    return html.Div(
        [html.Div([html.Div(t, className="card-title"), html.Div(v, className="card-value"),
                   html.Div(n, className="card-note")], className="card")
         for t, v, n in items],
        className="cards",
    )
