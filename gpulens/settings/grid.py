"""Settings of the grid-intensity providers (collector/grid/, issue 21).

The ``grid`` source runs whenever ``grid.providers`` names one; its readings are stored
under ``carbon.region`` (docs/analytics.md, carbon). Tokens and passwords are best set
through the environment (``GPULENS_GRID_ELECTRICITYMAPS_TOKEN``,
``GPULENS_GRID_WATTTIME_PASSWORD``); they are never logged nor shown in /healthz.
"""

from gpulens.settings.base import Setting, between

PROVIDERS = ("electricitymaps", "watttime", "ukgrid")


def _providers(value: str) -> bool:
    return all(p.strip() in PROVIDERS for p in value.split(",") if p.strip())


def _url(value: str) -> bool:
    return value.startswith(("https://", "http://"))


SETTINGS: tuple[Setting, ...] = (
    Setting("grid.providers", str, "",
            "Grid-intensity providers asked on a schedule, comma-separated: electricitymaps, "
            "watttime, ukgrid (Great Britain's NESO, open data). Empty: none; carbon then "
            "uses imported series and the annual table (docs/analytics.md).",
            _providers, "a comma-separated list of electricitymaps, watttime, ukgrid"),
    Setting("grid.interval_s", float, 900.0, "Seconds between asks of the providers.",
            between(60, 86400), "a number of seconds from 60 to 86400"),
    Setting("grid.timeout_s", float, 20.0, "Seconds one provider may take to answer.",
            between(1, 300), "a number of seconds from 1 to 300"),
    Setting("grid.lookback_h", float, 24.0,
            "Hours of readings asked at each cycle (WattTime, NESO; Electricity Maps "
            "answers its last 24 hours), so a gap or a revised reading is filled later.",
            between(1, 168), "a number of hours from 1 to 168"),
    Setting("grid.electricitymaps_url", str, "https://api.electricitymaps.com",
            "Base URL of the Electricity Maps API.", _url, "an http(s):// URL"),
    Setting("grid.electricitymaps_token", str, "",
            "Electricity Maps API token (set it through GPULENS_GRID_ELECTRICITYMAPS_TOKEN)."),
    Setting("grid.electricitymaps_zone", str, "",
            "Electricity Maps zone of the site (e.g. DE, US-CAL-CISO); empty: carbon.region."),
    Setting("grid.watttime_url", str, "https://api.watttime.org",
            "Base URL of the WattTime API.", _url, "an http(s):// URL"),
    Setting("grid.watttime_username", str, "", "WattTime user name."),
    Setting("grid.watttime_password", str, "",
            "WattTime password (set it through GPULENS_GRID_WATTTIME_PASSWORD)."),
    Setting("grid.watttime_region", str, "",
            "WattTime region of the site (e.g. CAISO_NORTH)."),
    Setting("grid.watttime_signal", str, "co2_moer",
            "WattTime signal: co2_moer (marginal rate) or co2_aoer (average rate, where the "
            "plan includes it).", lambda v: v in ("co2_moer", "co2_aoer"),
            "co2_moer or co2_aoer"),
    Setting("grid.ukgrid_url", str, "https://api.carbonintensity.org.uk",
            "Base URL of NESO's Carbon Intensity API.", _url, "an http(s):// URL"),
)
