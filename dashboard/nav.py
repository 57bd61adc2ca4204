"""The top navigation bar: registered pages as links, planned ones greyed out.

Adding a page is adding one module to ``dashboard/pages`` that calls
``dash.register_page(__name__, path=..., name=..., order=...)``; the bar picks it up.
"""

from __future__ import annotations

from dash import dcc, html

#: The pages gpulens will have, in bar order: (name, path). Unregistered ones show greyed.
PLANNED: tuple[tuple[str, str], ...] = (
    ("Overview", "/"),
    ("Utilisation", "/utilisation"),
    ("Failures", "/failures"),
    ("Goodput", "/goodput"),
    ("Energy", "/energy"),
    ("Thermal", "/thermal"),
    ("Jobs", "/jobs"),
    ("Reports", "/reports"),
)


def nav_items(registry: dict, pathname: str | None = None) -> list:
    """Links for the pages in ``registry`` (dash.page_registry), placeholders for the rest.

    The link whose path is ``pathname`` is marked active.
    """
    pages = sorted(registry.values(), key=lambda p: (p.get("order") or 0, p["path"]))
    by_path = {p["path"]: p for p in pages}
    items, seen = [], set()
    for name, path in PLANNED:
        page = by_path.get(path)
        if page is None:
            items.append(html.Span(name, className="nav-link nav-soon", title="Coming soon"))
        else:
            items.append(_link(page["name"], path, pathname))
        seen.add(path)
    items += [_link(p["name"], p["path"], pathname) for p in pages if p["path"] not in seen]
    return items


def _link(name: str, path: str, pathname: str | None):
    active = pathname == path or (path != "/" and (pathname or "").startswith(path + "/"))
    return dcc.Link(name, href=path, className="nav-link" + (" active" if active else ""))
