"""Every setting of gpulens, declared once; one module per area.

To add an area: write ``gpulens/settings/<area>.py`` with a ``SETTINGS`` tuple and list
it below. Then regenerate the docs (see gpulens/config_doc.py); a test fails until then.
"""

from gpulens.settings import alerts, analytics, core, dashboard, reports, sources
from gpulens.settings.base import Setting

SETTINGS: tuple[Setting, ...] = (core.SETTINGS + analytics.SETTINGS + dashboard.SETTINGS
                                  + alerts.SETTINGS + reports.SETTINGS + sources.SETTINGS)

__all__ = ["SETTINGS", "Setting"]
