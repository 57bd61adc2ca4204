"""Configuration: one TOML file plus ``GPULENS_*`` environment overrides.

Every setting is declared once in ``SETTINGS`` (name, type, default, help, check). The
commented example ``gpulens.example.toml`` and the README's reference are checked
against this table by the tests, so an undocumented setting fails the build.

An unknown key, a wrong type or a bad value raises ``ConfigError`` with one line that
names the key, the value and what is expected. Environment overrides: the setting
``service.port`` is ``GPULENS_SERVICE_PORT``; they exist so secrets (webhook URLs,
passwords) need not be written into the file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or out of range."""


@dataclass(frozen=True)
class Setting:
    name: str  # dotted: section.key
    type: type
    default: Any
    help: str
    check: Callable[[Any], bool] | None = None
    expected: str = ""  # what a good value looks like, for the error message

    @property
    def env(self) -> str:
        return "GPULENS_" + self.name.replace(".", "_").upper()


def _between(lo, hi):
    return lambda v: lo <= v <= hi


def _positive(v) -> bool:
    return v > 0


SETTINGS: tuple[Setting, ...] = (
    Setting("service.host", str, "127.0.0.1",
            "Address the web server binds. Keep 127.0.0.1 unless a reverse proxy or "
            "firewall protects the dashboard."),
    Setting("service.port", int, 8050, "TCP port of the dashboard and /healthz.",
            _between(0, 65535), "an integer from 0 to 65535"),
    Setting("service.db", str, "gpulens.duckdb", "Path of the DuckDB warehouse file."),
    Setting("service.threads", int, 8, "Web server worker threads.",
            _between(1, 64), "an integer from 1 to 64"),
    Setting("service.log_level", str, "INFO", "Logging level.",
            lambda v: v.upper() in {"DEBUG", "INFO", "WARNING", "ERROR"},
            "one of DEBUG, INFO, WARNING, ERROR"),
    Setting("collect.source", str, "simulator",
            "Where telemetry and scheduler state come from. Only 'simulator' for now; "
            "real collectors (NVML, dcgm-exporter, Prometheus, Slurm) come next.",
            lambda v: v in {"simulator"}, "'simulator'"),
    Setting("collect.interval_s", float, 15.0, "Seconds between collection cycles.",
            _between(1, 3600), "a number of seconds from 1 to 3600"),
    Setting("rollup.interval_s", float, 60.0, "Seconds between rollup runs.",
            _between(5, 3600), "a number of seconds from 5 to 3600"),
    Setting("retention.raw_days", float, 14.0, "Days of raw samples kept.",
            _positive, "a positive number of days"),
    Setting("retention.minute_days", float, 90.0, "Days of 1-minute rollups kept.",
            _positive, "a positive number of days"),
    Setting("retention.hour_days", float, 730.0,
            "Days of 1-hour rollups and GPU events kept.", _positive,
            "a positive number of days"),
    Setting("simulator.racks", int, 8, "Racks in the simulated cluster.",
            _between(1, 2000), "an integer from 1 to 2000"),
    Setting("simulator.nodes_per_rack", int, 8, "Nodes per simulated rack.",
            _between(1, 64), "an integer from 1 to 64"),
    Setting("simulator.gpus_per_node", int, 8, "GPUs per simulated node.",
            _between(1, 16), "an integer from 1 to 16"),
    Setting("simulator.seed", int, 0, "Seed of the simulation (same seed, same cluster)."),
    Setting("simulator.history_days", float, 7.0,
            "Days of history written in bulk when the service starts on an empty "
            "database.", _between(0, 400), "a number of days from 0 to 400"),
    Setting("simulator.infra_failures_per_1000_node_days", float, 50.0,
            "Infrastructure failure rate of the simulated fleet (Meta measured 2.34 to "
            "6.5; the demo raises it so failures show).", _between(0, 10000),
            "a number from 0 to 10000"),
    Setting("simulator.checkpoint_interval_h", float, 2.0,
            "Hours between checkpoints of simulated training jobs.", _positive,
            "a positive number of hours"),
    Setting("simulator.restart_overhead_min", float, 15.0,
            "Minutes from a failure until the requeued run is productive again.",
            _between(0, 1440), "a number of minutes from 0 to 1440"),
    Setting("dashboard.refresh_s", float, 15.0, "Seconds between live page refreshes.",
            _between(1, 3600), "a number of seconds from 1 to 3600"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


class Config:
    """Validated settings; read as ``config["service.port"]``."""

    def __init__(self, values: Mapping[str, Any], source: str = "defaults"):
        self._values = dict(values)
        self.source = source

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def section(self, prefix: str) -> dict[str, Any]:
        """The settings under ``prefix.`` as a plain dict keyed by their short names."""
        head = prefix + "."
        return {k[len(head):]: v for k, v in self._values.items() if k.startswith(head)}

    def with_overrides(self, **dotted: Any) -> Config:
        """A copy with some settings replaced (keys with '__' for '.'), validated."""
        values = dict(self._values)
        for key, raw in dotted.items():
            if raw is None:
                continue
            name = key.replace("__", ".")
            values[name] = _validate(BY_NAME[name], raw, "command line")
        return Config(values, self.source)


def _validate(setting: Setting, value: Any, where: str) -> Any:
    kind = setting.type
    ok_type = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok_type = float(value), True
    expected = setting.expected or f"a {kind.__name__}"
    if not ok_type:
        raise ConfigError(
            f"{where}: {setting.name} = {value!r} is a {type(value).__name__}; expected {expected}"
        )
    if setting.check is not None and not setting.check(value):
        raise ConfigError(f"{where}: {setting.name} = {value!r} is out of range; expected {expected}")
    return value


def _from_env(setting: Setting, raw: str) -> Any:
    try:
        if setting.type is bool:
            return {"1": True, "true": True, "0": False, "false": False}[raw.lower()]
        return setting.type(raw)
    except (ValueError, KeyError):
        expected = setting.expected or f"a {setting.type.__name__}"
        raise ConfigError(
            f"environment: {setting.env} = {raw!r} cannot be read; expected {expected}"
        ) from None


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in BY_NAME:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the TOML file (if given), then ``GPULENS_*`` variables."""
    env = os.environ if env is None else env
    values = {s.name: s.default for s in SETTINGS}
    where = "defaults"
    if path is not None:
        where = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"{where}: no such file; copy gpulens.example.toml and edit it"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not valid TOML: {exc}") from None
        for name, value in _flatten(data).items():
            if name not in BY_NAME:
                raise ConfigError(
                    f"{where}: unknown setting {name!r}; the settings are listed in "
                    "gpulens.example.toml"
                )
            values[name] = _validate(BY_NAME[name], value, where)
    for setting in SETTINGS:
        if setting.env in env:
            values[setting.name] = _validate(
                setting, _from_env(setting, env[setting.env]), "environment"
            )
    return Config(values, where)
