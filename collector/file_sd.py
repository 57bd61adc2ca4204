"""Scrape targets: a comma-separated list, or Prometheus file-based service discovery.

A target list setting is either

- addresses separated by commas: ``gpu001:9400, gpu002:9400`` (or full URLs,
  ``http://gpu001:9400/metrics``); or
- the path of a file_sd file (``.json``, ``.yml``, ``.yaml``; a glob such as
  ``/etc/prometheus/dcgm/*.json`` reads every match), in Prometheus's format::

      [{"targets": ["gpu001:9400", "gpu002:9400"],
        "labels": {"rack": "r01", "__scheme__": "https", "__metrics_path__": "/metrics"}}]

Prometheus's meta labels ``__scheme__`` and ``__metrics_path__`` set the URL; a label
``node`` names the node behind the target (it then wins over the exporter's
``Hostname`` label, which in Kubernetes is the exporter pod's name). Parsing is pure
(:func:`parse_file_sd`, :func:`parse_static`); :class:`TargetFile` re-reads the files
when they change, as Prometheus does.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Target", "TargetFile", "is_file_spec", "parse_file_sd", "parse_static"]

_FILE_SUFFIXES = (".json", ".yml", ".yaml")


@dataclass(frozen=True)
class Target:
    """One scrape target: its URL and the labels file_sd attached to it."""

    url: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        """The target's name in errors and status: ``host:port`` (the URL if odd)."""
        rest = self.url.split("://", 1)[-1]
        return rest.split("/", 1)[0] or self.url

    @property
    def node(self) -> str | None:
        """The node named by the ``node`` label, if any."""
        return self.labels.get("node") or None


_ADDRESS = re.compile(r"^(?:https?://)?[^\s/:]+(?::[0-9]{1,5})?(?:/\S*)?$"
                      r"|^(?:https?://)?\[[0-9a-fA-F:.]+\](?::[0-9]{1,5})?(?:/\S*)?$")


def _url(address: str, scheme: str = "http", path: str = "/metrics") -> str:
    """The URL of ``host:port`` or a full http(s) URL; ValueError when it is neither."""
    address = address.strip()
    if not _ADDRESS.match(address) or scheme not in ("http", "https"):
        raise ValueError(f"{address!r} is not host:port or an http(s) URL"
                         if scheme in ("http", "https") else f"scheme {scheme!r} is not http(s)")
    if "://" in address:
        return address if "/" in address.split("://", 1)[1] else address + path
    return f"{scheme}://{address}{path if path.startswith('/') else '/' + path}"


def parse_static(spec: str) -> list[Target]:
    """Targets from a comma-separated list of addresses or URLs (blank items ignored).

    Raises ValueError naming the item that is not ``host:port`` or an http(s) URL.
    """
    out = []
    for a in spec.split(","):
        if a.strip():
            try:
                out.append(Target(_url(a)))
            except ValueError as exc:
                raise ValueError(f"static target {exc}") from None
    return out


def parse_file_sd(text: str, fmt: str = "json", where: str = "file_sd") -> list[Target]:
    """Targets from the text of one file_sd file (``fmt`` 'json' or 'yaml').

    Raises ValueError naming ``where`` and the entry when the structure is not
    Prometheus's (a list of objects with a ``targets`` list of ``host:port`` strings and
    optional ``labels`` of strings), and nothing else for any text.
    """
    if fmt == "json":
        try:
            groups = json.loads(text) if text.strip() else []
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from None
    else:
        import yaml

        try:
            groups = yaml.safe_load(text) or []
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise ValueError(f"{where}: not YAML: {exc}") from None
    if not isinstance(groups, list):
        raise ValueError(f"{where}: expected a list of target groups")
    out: list[Target] = []
    for i, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise ValueError(f"{where}: group {i} has no 'targets' list")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise ValueError(f"{where}: group {i}: 'labels' is not a mapping of strings")
        scheme = labels.get("__scheme__", "http")
        path = labels.get("__metrics_path__", "/metrics")
        for address in group["targets"]:
            if not isinstance(address, str):
                raise ValueError(f"{where}: group {i}: target {address!r} is not a string")
            try:
                out.append(Target(_url(address, scheme, path), labels))
            except ValueError as exc:
                raise ValueError(f"{where}: group {i}: {exc}") from None
    return out


def is_file_spec(spec: str) -> bool:
    """True when ``spec`` names file_sd files rather than listing addresses."""
    s = spec.strip()
    return "," not in s and (s.endswith(_FILE_SUFFIXES) or os.path.sep in s) and "://" not in s


class TargetFile:
    """The targets of a setting; file_sd files are re-read when their mtime changes."""

    def __init__(self, spec: str):
        self.spec = spec.strip()
        self._stamp: tuple | None = None
        self._targets: list[Target] = []

    def targets(self) -> list[Target]:
        """The current targets; ValueError (naming the file) for a missing, unreadable or
        malformed file, or a target that is no address."""
        if not is_file_spec(self.spec):
            if self._stamp is None:
                self._targets, self._stamp = parse_static(self.spec), ()
            return self._targets
        paths = sorted(glob.glob(self.spec))
        if not paths:
            raise ValueError(f"{self.spec}: no file_sd file matches")
        try:
            stamp = tuple((p, os.stat(p).st_mtime_ns) for p in paths)
            if stamp != self._stamp:
                found: list[Target] = []
                for p in paths:
                    fmt = "json" if p.endswith(".json") else "yaml"
                    with open(p, encoding="utf-8") as fh:
                        found += parse_file_sd(fh.read(), fmt, where=p)
                self._targets, self._stamp = found, stamp
        except (OSError, UnicodeDecodeError) as exc:  # gone meanwhile, unreadable, not UTF-8
            raise ValueError(f"{self.spec}: cannot read a file_sd file: {exc}") from None
        return self._targets
