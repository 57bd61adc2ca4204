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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulens.settings import SETTINGS, Setting
from gpulens.settings.base import limits_error

__all__ = ["SETTINGS", "BY_NAME", "Config", "ConfigError", "Setting", "load"]


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or out of range."""

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

    def update(self, values: Mapping[str, Any], where: str = "dashboard") -> None:
        """Replace some settings in place (``{"alerts.gpu_temp.threshold": 90.0}``),
        validated first: the running service's rules after the Thermal page's tuner
        saved them (issue 22). All or nothing."""
        checked = {}
        for name, raw in values.items():
            if name not in BY_NAME:
                raise ConfigError(f"{where}: unknown setting {name!r}")
            checked[name] = _validate(BY_NAME[name], raw, where)
        self._values.update(checked)


def _validate(setting: Setting, value: Any, where: str) -> Any:
    kind = setting.type
    ok_type = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok_type = float(value), True
    expected = setting.expected or ("a finite number" if kind is float else f"a {kind.__name__}")
    if not ok_type:
        raise ConfigError(
            f"{where}: {setting.name} = {_shown(value)} is a {type(value).__name__}; "
            f"expected {expected}"
        )
    shown = _shown(value)
    problem = limits_error(setting, value)
    if problem is not None:
        raise ConfigError(f"{where}: {setting.name} = {shown} {problem}; expected {expected}")
    if setting.check is not None and not setting.check(value):
        raise ConfigError(
            f"{where}: {setting.name} = {shown} is out of range; expected {expected}"
        )
    return value


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _from_env(setting: Setting, raw: str) -> Any:
    try:
        if setting.type is bool:
            return {"1": True, "true": True, "0": False, "false": False}[raw.lower()]
        return setting.type(raw)
    except (ValueError, KeyError):
        expected = setting.expected or f"a {setting.type.__name__}"
        raise ConfigError(
            f"environment: {setting.env} = {_shown(raw)} cannot be read; expected {expected}"
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
