"""The shared table helper: one DataTable, plain-text cells, escaped Markdown links."""

from __future__ import annotations

import pandas as pd
from dash import html
from dash.dash_table import DataTable

from dashboard.components import Column, job_href, md_escape, md_link, table

MARKUP = "<img src=x onerror=alert(1)> [x](javascript:alert(1)) *b* \\ `c`"


def _grid(div: html.Div) -> DataTable:
    return div.children[0]


def test_cells_are_plain_text_and_only_link_columns_are_markdown():
    df = pd.DataFrame({"job_id": ["1004", "a b/(c)", None], "name": [MARKUP, "x", None],
                       "gpus": [8, 16, None]})
    cols = (Column("job_id", "Job", href=job_href), Column("name", "Name"),
            Column("gpus", "GPUs", lambda v: f"{int(v):,}", numeric=True))
    grid = _grid(table(df, cols, empty_message="none", table_id="t"))
    assert isinstance(grid, DataTable) and grid.id == "t"
    assert [c.get("presentation") for c in grid.columns] == ["markdown", None, None]
    assert grid.markdown_options == {"link_target": "_self", "html": False}
    first, second, third = grid.data
    assert first == {"job_id": "[1004](/jobs/1004)", "name": MARKUP, "gpus": "8"}
    assert second["job_id"] == r"[a b\/\(c\)](/jobs/a%20b%2F%28c%29)"
    assert third == {"job_id": "—", "name": "—", "gpus": "—"}  # missing: a dash, no link
    assert grid.style_cell_conditional == [{"if": {"column_id": "gpus"}, "textAlign": "right"}]


def test_markdown_escaping():
    escaped = md_escape(MARKUP)
    assert "<" not in escaped.replace("\\<", "") and "[" not in escaped.replace("\\[", "")
    assert md_escape("line\nbreak") == "line break"
    assert md_link(MARKUP, "/jobs/1") == f"[{escaped}](/jobs/1)"
    # only site paths and http(s) URLs become links
    assert md_link("x", "javascript:alert(1)") == "x"
    assert md_link("x", "//evil.example/") == "x"
    assert md_link("x", "https://example.org/a b") == "[x](https://example.org/a%20b)"


def test_empty_rows_cap_and_pages():
    assert table(pd.DataFrame(), (Column("a", "A"),), empty_message="Nothing").children == (
        "Nothing")
    df = pd.DataFrame({"a": range(120)})
    div = table(df, (Column("a", "A"),), empty_message="-", max_rows=100, page_size=25)
    grid = _grid(div)
    assert len(grid.data) == 100 and grid.page_action == "native" and grid.page_size == 25
    assert div.children[1].children == "Showing the first 100 of 120 rows."
    small = _grid(table(df.head(3), (Column("a", "A"),), empty_message="-"))
    assert small.page_action == "none" and len(small.data) == 3
