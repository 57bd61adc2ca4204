"""The top navigation bar: registered pages as links, planned ones greyed out.

Adding a page is adding one module to ``dashboard/pages`` that calls
``dash.register_page(__name__, path=..., name=..., order=...)``; the bar picks it up.
"""

from __future__ import annotations

from dash import dcc, html

#: The pages gpulens will have, in bar order: (name, path). Unregistered ones show greyed.
PLANNED: tuple[tuple[str, str], ...] = (
    ("Overview", "/"),
    ("Utilisation", "/utilization"),
    ("Failures", "/failures"),
    ("Goodput", "/goodput"),
    ("Energy", "/energy"),
    ("Thermal", "/thermal"),
    ("Placement", "/placement"),
    ("Jobs", "/jobs"),
    ("Reports", "/reports"),
)


def nav_items(registry: dict, pathname: str | None = None, search: str | None = None) -> list:
    """Links for the pages in ``registry`` (dash.page_registry), placeholders for the rest.

    The link whose path is ``pathname`` is marked active. The global filters of the
    current URL's ``search`` (range, partition, rack; not the drill-down node) travel
    with every link, so they stay set from page to page.
    """
    from dashboard.filters import from_search

    query = from_search(search).drill(node=None).query_string()
    pages = sorted(registry.values(), key=lambda p: (p.get("order") or 0, p["path"]))
    by_path = {p["path"]: p for p in pages}
    items, seen = [], set()
    for name, path in PLANNED:
        page = by_path.get(path)
        if page is None:
            items.append(html.Span(name, className="nav-link nav-soon", title="Coming soon"))
        else:
            items.append(_link(page["name"], path, pathname, query))
        seen.add(path)
    items += [_link(p["name"], p["path"], pathname, query)
              for p in pages if p["path"] not in seen and not p.get("path_template")
              and p.get("nav", True)]  # pages of one thing (a node) are linked, not listed
    return items


def _link(name: str, path: str, pathname: str | None, query: str = ""):
    active = pathname == path or (path != "/" and (pathname or "").startswith(path + "/"))
    return dcc.Link(name, href=path + query, className="nav-link" + (" active" if active else ""))
