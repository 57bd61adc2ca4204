"""The Dash application: a shell (top bar + page container) over ``dashboard/pages``.

    app = create_app(warehouse, refresh_s=15)
    waitress.serve(app.server)

Each page is one module in ``dashboard/pages`` registering itself with
``dash.register_page``; its callbacks reach the warehouse through
:mod:`dashboard.context`, so no page imports this module and nothing is read at import.
Dash collects ``@callback`` registrations in module globals and hands them to the first
app that serves a request; building an app re-executes the page modules, so
:func:`create_app` first forgets page callbacks that an earlier, never-served app left
behind (else the new app would get each twice and the old one's would be lost anyway).
The context is process-wide: one live app per process.

Shared behaviour is registered on the app itself (``app.callback``), never as module
globals: the filter bar (:mod:`dashboard.filters`), the drill-down panel
(:mod:`dashboard.drilldown`) and the navigation highlight. :mod:`dashboard.web_security`
checks every request's Host, Origin and CSRF token and adds the security headers;
:mod:`dashboard.auth` guards every route but ``/healthz`` and ``/login`` when a login or
a trusted proxy is set, and gives each user a role.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import dash
from dash import Input, Output, dcc, html

from dashboard import auth, context, drilldown, filters, ids, web_security
from dashboard.nav import nav_items
from gpulens.settings import default
from warehouse import meta
from warehouse.analytics import Options
from warehouse.clock import utcnow as utcnow_naive

HERE = Path(__file__).resolve().parent
PAGES_PACKAGE = "dashboard.pages."


def _forget_unclaimed_page_callbacks() -> None:
    """Drop page callbacks still waiting in Dash's globals from an earlier create_app."""
    from dash import _callback  # Dash's registry of @callback (no public API to reset it)

    stale = {
        key
        for key, spec in _callback.GLOBAL_CALLBACK_MAP.items()
        if getattr(spec.get("callback"), "__module__", "").startswith(PAGES_PACKAGE)
    }
    for key in stale:
        del _callback.GLOBAL_CALLBACK_MAP[key]
    _callback.GLOBAL_CALLBACK_LIST[:] = [
        c for c in _callback.GLOBAL_CALLBACK_LIST if c.get("output") not in stale
    ]


def create_app(
    warehouse,
    *,
    refresh_s: float = default("dashboard.refresh_s"),
    now: Callable[[], datetime] = utcnow_naive,
    title: str = "gpulens",
    auth_config: auth.AuthConfig | None = None,
    reports_dir: str | None = None,
    options: Options | None = None,
    cluster: str = default("cluster.name"),
    config=None,
    rules_saved: Callable[[dict], None] | None = None,
) -> dash.Dash:
    """Build the Dash app reading ``warehouse``; live pages refresh every ``refresh_s`` s.

    ``now`` is the clock (naive UTC) every query is evaluated at; tests pass a fixed one.
    ``auth_config`` (``AuthConfig.from_settings(config)``) turns on the login or the
    trusted proxy header; ``reports_dir`` is where weekly report files are listed from;
    ``options`` (``Options.from_settings(config)``) the analytics settings the pages use
    (PUE, node overhead, carbon region, idle threshold, checkpoint interval, lemon test);
    ``cluster`` (the ``cluster.name`` setting) is named in the header; ``config`` and
    ``rules_saved``: the Thermal page's rule tuner (dashboard.context.set_context).
    """
    context.set_context(warehouse, now, refresh_s=refresh_s, title=title,
                        reports_dir=reports_dir, options=options,
                        simulated=context.simulated_label_for(_simulator_profile(warehouse)),
                        config=config, rules_saved=rules_saved)
    _forget_unclaimed_page_callbacks()
    app = dash.Dash(
        "dashboard",
        use_pages=True,
        pages_folder=str(HERE / "pages"),
        assets_folder=str(HERE / "assets"),
        title=title,
        update_title=None,  # no "Updating..." tab title on every refresh
        suppress_callback_exceptions=True,  # page components come and go
    )
    auth_config = auth_config or auth.AuthConfig()
    web_security.install(app, auth_config)  # Host, Origin, CSRF, headers: before the login
    auth.install(app.server, auth_config)
    web_security.install_callback_check(app)
    app.layout = _shell(title, cluster)

    @app.callback(Output(ids.NAV, "children"), Input(ids.URL, "pathname"),
                  Input(ids.URL, "search"))
    def highlight(pathname, search):
        return nav_items(dash.page_registry, pathname, search)

    filters.register(app)
    drilldown.register(app)
    return app


def freeze_startup_objects() -> int:
    """Move every object alive now out of the garbage collector's generations
    (``gc.freeze``, after a collection so that no garbage is kept), and return how many.

    The service calls it once its app and routes are built. A full collection walks every
    tracked object; the ~150,000 that importing Dash, plotly and the pages and building
    the app leave (functions, dicts, validators) made each one 90-127 ms, and it falls on
    whichever callback allocates at that moment: 3 of a bench pass's 504 callback calls
    at 24,576 GPUs, enough to put the p95 of a callback at ~0.2 s over 300 ms (issue 17).
    Nearly all of those objects live as long as the process (a few made at startup and
    dropped later in a cycle are then never freed); frozen, they are never walked again,
    and a full collection took 7-14 ms in the same pass. Objects made later are collected
    as before."""
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _simulator_profile(warehouse) -> str | None:
    """The profile a simulated warehouse was made with, read once when the app is built
    (a warehouse's profile never changes; every page header names it, issue 16)."""
    return meta.simulator_profile(warehouse.reader()) if hasattr(warehouse, "reader") else None


def user_badge() -> html.Div | None:
    """Who is logged in and as what, with a log-out button (only when a login is
    configured). Logging out is a POST carrying the CSRF token, like every change."""
    from flask_wtf.csrf import generate_csrf

    who = auth.identity()
    if who.user is None:
        return None
    logout = html.Form([dcc.Input(type="hidden", name="csrf_token", value=generate_csrf()),
                        html.Button("Log out", type="submit", className="user-logout")],
                       action="/logout", method="POST")
    return html.Div([html.Span(who.user, className="user-name"),  # text, never HTML
                     html.Span(who.role, className="user-role"), logout],
                    id=ids.USER, className="user")


def _shell(title: str, cluster: str):
    """The frame around every page, built per request (it shows the logged-in user)."""

    def layout():
        return _frame(title, user_badge(), cluster)

    return layout


def _frame(title: str, user, cluster: str) -> html.Div:
    return html.Div(
        [
            # callback-nav: filters and drill-down rewrite the URL without a reload
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            html.Header(
                html.Div(
                    [
                        dcc.Link(
                            [html.Span(className="brand-mark"), html.Span(title)],
                            href="/", className="brand",
                        ),
                        # which cluster this is, when several gpulens run (issue 18)
                        html.Span(cluster, id=ids.CLUSTER, className="cluster",
                                  title="cluster.name"),
                        html.Nav(nav_items(dash.page_registry), id=ids.NAV, className="nav"),
                        user,
                    ],
                    className="topbar-inner",
                ),
                className="topbar",
            ),
            html.Main(dash.page_container, className="content"),
        ],
        className="shell",
    )
