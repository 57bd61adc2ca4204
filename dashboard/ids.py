"""Component ids, kept in one place so layouts, callbacks and tests agree.

Each page owns a block of ids prefixed with its name; shell ids belong to the app frame.
"""

# -- shell (dashboard/app.py) --------------------------------------------------------
URL = "shell-url"
NAV = "shell-nav"

# -- overview page (dashboard/pages/overview.py) --------------------------------------
OVERVIEW_REFRESH = "overview-refresh"  # dcc.Interval
OVERVIEW_UPDATED = "overview-updated"  # "updated 12:00:05 UTC" line
OVERVIEW_FLOOR_MAP = "floor-map"  # dcc.Graph

#: Headline cards: key of warehouse.queries.overview.headline()-derived card -> ids.
OVERVIEW_CARDS = ("gpus", "allocated", "util", "power", "lost", "alerts")


def card_value(key: str) -> str:
    """Id of a headline card's big number."""
    return f"overview-card-{key}-value"


def card_note(key: str) -> str:
    """Id of a headline card's small note under the number."""
    return f"overview-card-{key}-note"
