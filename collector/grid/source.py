"""The ``grid`` source: the configured intensity providers, asked on their own schedule.

Each cycle asks every provider (collector/grid/) for its recent readings and hands them
to the warehouse as kind ``grid`` (table ``grid_intensity``: ts, region, gCO2e/kWh,
source = the provider's name, fetched_at = the cycle's time); a reading a provider
revises later replaces the stored one of that provider. One provider that fails costs
that provider's readings of this cycle (listed in ``targets_down`` with its reason and in
``providers`` for /healthz); a refused reading costs that reading (counted in
``dropped``). The cycle fails only when every provider failed. Tokens and passwords are
never in an error, a log line or /healthz.
"""

from __future__ import annotations

import threading
from datetime import datetime

import pyarrow as pa

from collector.grid import GridParseError, Provider, TransportError
from collector.http import session
from collector.sanitize import DropCounter
from warehouse.clock import naive_utc
from warehouse.schema import SCHEMAS

__all__ = ["GridSource", "build_providers"]


def build_providers(grid: dict, *, region: str) -> list[Provider]:
    """The providers ``grid.providers`` names, from the ``grid`` settings (short names);
    ValueError names what is missing."""
    from collector.grid.electricitymaps import ElectricityMaps
    from collector.grid.ukgrid import UkGrid
    from collector.grid.watttime import WattTime

    out: list[Provider] = []
    for name in dict.fromkeys(p.strip() for p in grid["providers"].split(",") if p.strip()):
        if name == "electricitymaps":
            out.append(ElectricityMaps(url=grid["electricitymaps_url"],
                                       token=grid["electricitymaps_token"],
                                       zone=grid["electricitymaps_zone"] or region,
                                       timeout_s=grid["timeout_s"]))
        elif name == "watttime":
            out.append(WattTime(url=grid["watttime_url"], username=grid["watttime_username"],
                                password=grid["watttime_password"],
                                zone=grid["watttime_region"], signal=grid["watttime_signal"],
                                lookback_h=grid["lookback_h"], timeout_s=grid["timeout_s"]))
        elif name == "ukgrid":
            out.append(UkGrid(url=grid["ukgrid_url"], lookback_h=grid["lookback_h"],
                              timeout_s=grid["timeout_s"]))
        else:
            raise ValueError(f"grid.providers: unknown provider {name!r}")
    return out


class GridSource:
    """Readings of ``providers`` stored under the site's ``region`` (carbon.region)."""

    name = "grid"

    def __init__(self, providers: list[Provider], *, region: str, interval_s: float,
                 http=None):
        self.interval_s = interval_s
        self._providers = list(providers)
        self._region = region or ""
        self._http = http or session(hosts=len(self._providers),
                                     headers={"User-Agent": "gpulens-grid"})
        self.dropped = DropCounter()
        self.targets_down: dict[str, str] = {}
        self.targets_total = len(self._providers)
        self._status: dict[str, dict] = {
            p.name: {"zone": p.zone, "last_success": None, "readings": 0,
                     "last_error": None, "last_error_at": None, "last_rejected": None}
            for p in self._providers}
        self._lock = threading.Lock()

    def providers(self) -> dict[str, dict]:
        """Per provider (/healthz): zone, last_success, readings (of the last success),
        last_error and last_error_at (ISO times, UTC), last_rejected (why the last
        refused reading was)."""
        with self._lock:
            return {k: dict(v) for k, v in self._status.items()}

    def _ask(self, provider: Provider, ts: datetime):
        try:
            return provider.fetch(self._http, ts), None
        except (GridParseError, TransportError, ValueError) as exc:
            return None, str(exc)
        except Exception as exc:  # one provider's surprise never costs the others
            return None, f"{type(exc).__name__}: {exc}"

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """Every provider's readings, fetched at ``ts``; raises when all failed."""
        ts = naive_utc(ts)
        rows, down, refused = [], {}, {}
        for provider in self._providers:
            parsed, error = self._ask(provider, ts)
            with self._lock:
                st = self._status[provider.name]
                if error is not None:
                    down[provider.name] = error
                    st["last_error"], st["last_error_at"] = error, ts.isoformat() + "Z"
                    continue
                st["last_success"], st["readings"] = ts.isoformat() + "Z", len(parsed.readings)
                if parsed.rejected:
                    st["last_rejected"] = parsed.rejected[-1]
            if parsed.rejected:
                refused[f"reading: {provider.name}"] = len(parsed.rejected)
            rows += [{"ts": r.ts, "region": self._region, "g_co2_per_kwh": r.g_co2_per_kwh,
                      "source": provider.name, "fetched_at": ts} for r in parsed.readings]
        self.dropped.add(refused)
        self.targets_down = down
        if self._providers and len(down) == len(self._providers):
            raise RuntimeError("every grid provider failed: " + "; ".join(
                f"{k}: {v}" for k, v in sorted(down.items())))
        return [("grid", pa.Table.from_pylist(rows, schema=SCHEMAS["grid"]))]
