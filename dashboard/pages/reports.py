"""Reports (``/reports``): the archive of weekly reports.

Lists the ``reports`` table (or the report files in the configured directory). Until
the first report is written the page says when one will be, instead of an empty table.
"""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, callback, html

from dashboard import components, context, ids
from dashboard.components import Column, num, report_href
from dashboard.formatting import fmt_time
from warehouse.queries import reports

dash.register_page(
    __name__, path="/reports", name="Reports", order=8,
    title=lambda **_: context.page_title("Reports"),
    description="The archive of weekly reports.",
)

NO_REPORTS = ("No weekly reports yet. The service writes one on the schedule of "
              "reports.cron (Monday 08:00 by default); `gpulens report --week 2026-W47` "
              "makes one now.")


REPORT_COLUMNS = (
    Column("week_start", "Week of", lambda v: f"{pd.Timestamp(v):%d %b %Y}"),
    Column("title", "Title (open the file)", href=report_href),
    Column("format", "Format", lambda v: str(v).upper()),
    Column("generated_at", "Generated", lambda v: f"{pd.Timestamp(v):%d %b %Y %H:%M} UTC"),
    num("size_kib", "Size", 0, "KiB"),
)


def layout(**query) -> html.Div:
    from dashboard.filters import from_query

    return components.page(
        "reports", "Reports", from_query(query),
        components.panel("Weekly reports", "Newest first.",
                         html.Div(components.empty("Loading…"), id=ids.REPORTS_LIST)),
        live=False, filters=(),
    )


@callback(Output(ids.REPORTS_LIST, "children"), Output(ids.updated("reports"), "children"),
          Input(ids.FILTERS, "data"))
def update_reports(_data):
    df = reports.list_reports(context.reader())
    if len(df) == 0:
        df = reports.list_report_files(context.reports_dir())
    df = df.assign(size_kib=df["size_bytes"] / 1024) if "size_bytes" in df else df
    return (components.table(df, REPORT_COLUMNS, table_id=ids.REPORTS_LIST + "-table",
                             empty_message=NO_REPORTS),
            f"{len(df):,} reports · {fmt_time(context.now())}")
