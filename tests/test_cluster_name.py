"""Issue 18: the cluster's name (the ``cluster.name`` setting) in the dashboard header.

Its own module: building a second Dash app replaces the dashboard context, which other
modules' app fixtures hold for their whole module."""

from __future__ import annotations

import json

from tests.support.dash_seed import NOW, seed_overview
from warehouse import Warehouse


def test_the_header_names_the_cluster():
    from dashboard import ids
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_overview(wh)
        app = create_app(wh, now=lambda: NOW, cluster="rsc-1")
        layout = json.dumps(app.server.test_client().get("/_dash-layout").get_json())
    assert f'"id": "{ids.CLUSTER}"' in layout and '"children": "rsc-1"' in layout
