"""The Placement page's callbacks called directly: on the hand-built cluster of
tests/support/placement.py (numbers worked out in tests/test_placement.py) and on an
empty warehouse, where every view says why it is empty."""

from __future__ import annotations

import sys
from datetime import timedelta

import pandas as pd
import pytest

from dashboard import context
from dashboard.filters import from_query
from tests.support.placement import NOW, seed_placement
from warehouse import Warehouse
from warehouse.analytics import Options


@pytest.fixture(scope="module")
def page():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_placement(wh)
        create_app(wh, refresh_s=5, now=lambda: NOW)
        yield wh, sys.modules["dashboard.pages.placement"]


def _text(component) -> str:
    """All text under a Dash component."""
    if isinstance(component, str | int | float):
        return str(component)
    if isinstance(component, list | tuple):
        return " ".join(_text(c) for c in component)
    children = getattr(component, "children", None)
    return "" if children is None else _text(children)


def _rows(component) -> list[dict]:
    """The rows of the DataTable under a Dash component."""
    if hasattr(component, "data") and isinstance(component.data, list):
        return component.data
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str) and (rows := _rows(child)):
            return rows
    return []


def test_callbacks_on_the_hand_built_cluster(page):
    wh, p = page
    context.set_context(wh, lambda: NOW, refresh_s=5, options=Options(large_job_gpus=10))
    data = from_query({"range": "24h"}).to_store()
    fig, now, waits, updated = p.update_frag(data)
    assert [t.name for t in fig.data][0] == "Free" and list(fig.data[0].y)[-1] == 30
    assert "1 of 1 large jobs" in _text(waits)
    assert "Stranded GPUs 6 free of 30; usual job 8 GPUs" in _text(now)
    scores, table, cards = p.update_jobs(data)
    assert "0.83" in _text(cards) and "16 GPU·h" in _text(cards)
    assert [list(t.text) for t in scores.data] == [["J1"], ["J2"]]  # tight, then spread
    (row,) = _rows(table)  # the misplaced run, named (only the table's rows are)
    assert (row["name"], row["user_name"]) == ("job-J2", "ann") and "r2" in row["rack_names"]


def test_an_empty_warehouse_says_why(page):
    _, p = page
    with Warehouse(":memory:") as empty:
        context.set_context(empty, lambda: NOW, refresh_s=5)
        data = from_query({"range": "24h"}).to_store()
        fig, now, waits, _ = p.update_frag(data)
        assert "No topology or no allocation" in fig.layout.annotations[0].text
        assert "—" in _text(now) and "No large job waited" in _text(waits)
        scores, table, cards = p.update_jobs(data)
        assert "No multi-node job" in scores.layout.annotations[0].text
        assert "—" in _text(cards)


def test_the_cards_now_are_the_charts_last_point(page):
    """The cards' "now" is the fragmentation chart's last point, with the chart's usual
    job size: over 24 h that is the median of the multi-node runs started in the window
    and the 7 days before it. Two 10-GPU runs started 7.5 days before now are among them
    (usual 9: whole free nodes of 12 and 16 GPUs in zones A and B fit one 9-GPU job
    each, so 30 - 18 = 12 stranded); the cards once read the 7 days before now alone
    (usual 8: 6 stranded). A window that ends before now has no "now" card."""
    _, p = page
    with Warehouse(":memory:") as wh:
        seed_placement(wh)
        old = NOW - timedelta(days=7.5)
        wh.ingest("allocations", pd.DataFrame([
            {"job_id": f"old{k}", "run_index": 0, "node": f"n{1 + i // 4 + 4 * k}",
             "gpu_index": i % 4, "start_ts": old, "end_ts": old + timedelta(hours=1)}
            for k in (0, 1) for i in range(10)])).result()
        context.set_context(wh, lambda: NOW, refresh_s=5)
        fig, now, _, _ = p.update_frag(from_query({"range": "24h"}).to_store())
        stranded = next(t for t in fig.data if t.name == "Stranded")
        assert list(stranded.y)[-1] == 12
        assert "Stranded GPUs 12 free of 30; usual job 9 GPUs" in _text(now)
        past = from_query({"from": "2026-10-30", "to": "2026-10-30"})
        _, now, _, _ = p.update_frag(past.to_store())
        assert "Largest job in a rack — GPUs that could start now" in _text(now)
