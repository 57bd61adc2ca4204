"""Every page of a simulated warehouse says so, naming the demo's raised failure rate
(issue 16); a real cluster's pages carry no such label."""

from __future__ import annotations

import pytest

from dashboard import components, context
from dashboard.filters import Filters
from warehouse import Warehouse, meta


def _texts(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    children = getattr(node, "children", None)
    if children is None:
        return []
    out = []
    for child in children if isinstance(children, list) else [children]:
        out += _texts(child)
    return out


def _page_texts(wh) -> list[str]:
    from dashboard.app import create_app

    create_app(wh)
    return _texts(components.page("failures", "Failures", Filters()))


@pytest.mark.parametrize("profile, shown", [
    ("demo", "simulated, profile demo (raised failure rate)"),
    ("realistic", "simulated, profile realistic"),
])
def test_a_simulated_warehouse_is_labelled_with_its_profile(profile, shown):
    with Warehouse(":memory:") as wh:
        wh.write(lambda con: meta.put(con, meta.SIMULATOR_PROFILE_KEY, profile)).result()
        texts = _page_texts(wh)
    labels = [t for t in texts if t.startswith("simulated")]
    assert len(labels) == 1 and labels[0].startswith(shown)
    assert ("raised failure rate" in labels[0]) == (profile == "demo")


def test_a_real_clusters_pages_carry_no_label():
    with Warehouse(":memory:") as wh:
        texts = _page_texts(wh)
    assert not [t for t in texts if "simulated" in t]
    assert context.simulated_label() is None


def test_a_demo_warehouse_made_before_profiles_gets_its_profile_on_the_next_start():
    from datetime import datetime

    from gpulens.config import load
    from gpulens.sources import build_sources

    config = load(None).with_overrides(simulator__racks=1, simulator__nodes_per_rack=1)
    now = datetime(2026, 11, 9)
    with Warehouse(":memory:") as wh:
        build_sources(config, wh, now=now)  # the first start records the world
        assert meta.simulator_profile(wh.reader()) == "demo"
        wh.write(lambda con: con.execute("DELETE FROM meta WHERE key = $1",
                                         [meta.SIMULATOR_PROFILE_KEY])).result()
        build_sources(config, wh, now=now)  # the same world, started again
        assert meta.simulator_profile(wh.reader()) == "demo"
