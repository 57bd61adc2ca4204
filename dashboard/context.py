"""What callbacks reach without importing the app: the warehouse, the clock, settings.

``create_app`` calls :func:`set_context` once; page modules call :func:`reader` and
:func:`now` inside their callbacks (never at import time). One app per process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpulens.settings import default
from warehouse.analytics import Options
from warehouse.clock import utcnow as utcnow_naive


@dataclass(frozen=True)
class Context:
    warehouse: object  # warehouse.Warehouse (anything with .reader())
    now: Callable[[], datetime]
    refresh_s: float  # seconds between live page refreshes
    title: str = "gpulens"  # product name shown in the bar and tab titles
    reports_dir: str | None = None  # where weekly report files are listed from
    options: Options = Options()  # the analytics settings (PUE, idle threshold, ...)
    simulated: str | None = None  # label of a simulated warehouse (simulated_label_for)
    config: object | None = None  # gpulens.config.Config of the service (the rule tuner)
    rules_saved: Callable[[dict], None] | None = None  # the service reloads its rules


_context: Context | None = None


def set_context(warehouse, now: Callable[[], datetime] = utcnow_naive, *,
                refresh_s: float = default("dashboard.refresh_s"), title: str = "gpulens",
                reports_dir: str | None = None, options: Options | None = None,
                simulated: str | None = None, config=None,
                rules_saved: Callable[[dict], None] | None = None) -> None:
    """Point every page's callbacks at ``warehouse`` and the clock ``now``; ``options``:
    the configured analytics settings (``Options.from_settings(config)``; None: defaults);
    ``simulated``: the label every page header shows of a simulated warehouse;
    ``config``: the service's configuration (the Thermal page's rule tuner reads the rules
    and the file to save to); ``rules_saved(values)``: called after the tuner saved rule
    settings (``{"alerts.gpu_temp.threshold": 90.0}``) so the service reloads them."""
    global _context
    _context = Context(warehouse=warehouse, now=now, refresh_s=float(refresh_s), title=title,
                       reports_dir=reports_dir, options=options or Options(),
                       simulated=simulated, config=config, rules_saved=rules_saved)


def _get() -> Context:
    if _context is None:
        raise RuntimeError(
            "dashboard context not set: build the app with dashboard.app.create_app(...) "
            "or call dashboard.context.set_context(warehouse, now) first"
        )
    return _context


def warehouse():
    """The warehouse itself (for the few writes a page makes: acknowledge, silence)."""
    return _get().warehouse


def config():
    """The service's configuration (``gpulens.config.Config``), or None (an app built
    without one: the rule tuner then uses the defaults and cannot save)."""
    return _get().config


def rules_saved(values: dict) -> bool:
    """Tell the service the tuner saved ``values``; False when nothing listens (the
    change then takes effect at the next start)."""
    hook = _get().rules_saved
    if hook is None:
        return False
    hook(values)
    return True


def reports_dir() -> str | None:
    """The directory weekly report files are listed from (None: not configured)."""
    return _get().reports_dir


def options() -> Options:
    """The analytics settings the pages compute with, as the refresh and report do."""
    return _get().options


def reader():
    """A fresh read cursor on the warehouse (``Warehouse.reader()``), for one query.

    Each call opens a new DuckDB cursor (about 0.1 ms) in UTC that sees every committed
    write; pass it to one ``warehouse.queries`` function and drop it. It is not cached
    per thread: a kept cursor holds its last result's transaction open and blocks the
    writer's checkpoints.
    """
    return _get().warehouse.reader()


def now() -> datetime:
    """The current time (naive UTC) from the injected clock."""
    return _get().now()


def refresh_ms() -> int:
    """Milliseconds between live page refreshes (for dcc.Interval)."""
    return int(_get().refresh_s * 1000)


def page_title(page: str) -> str:
    """A browser-tab title: ``"Overview · gpulens"``."""
    name = _context.title if _context is not None else "gpulens"
    return f"{page} · {name}"


#: what the page header says of a simulated warehouse, by simulator profile (issue 16)
SIMULATED_LABELS = {
    "demo": "simulated, profile demo (raised failure rate): its failure rates are not a "
            "real fleet's",
    "realistic": "simulated, profile realistic (calibrated to published fleets)",
}


def simulated_label_for(profile: str | None) -> str | None:
    """The label of a warehouse simulated with ``profile`` (None: a real cluster's)."""
    if profile is None:
        return None
    return SIMULATED_LABELS.get(profile, f"simulated, profile {profile}")


def simulated_label() -> str | None:
    """The page header's label of a simulated warehouse, None for a real cluster's."""
    return _get().simulated
