"""One way to name a node on every telemetry path, and the mapping to scheduler names.

A GPU row's ``node`` must equal the node name Slurm uses, or jobs never meet their GPUs.
Both the direct-scrape path (:mod:`collector.dcgm`) and the Prometheus path
(:mod:`collector.prometheus`) name a node the same way:

1. a name given by the operator for the target (file_sd label ``node``; Prometheus's
   ``prometheus.node_label``), used as is;
2. else the exporter's ``Hostname`` (releases) or ``hostname`` (newer builds) label;
3. else the host of the scraped address, port removed: ``gpu001:9400`` and
   ``http://gpu001:9400/metrics`` -> ``gpu001``, ``[fe80::1]:9400`` -> ``fe80::1``.

Names from 2 and 3 then pass through :class:`NodeNames`, the configured mapping
(settings ``nodes.strip_domain``, ``nodes.rename_regex``, ``nodes.rename_to``):
first the domain is stripped (``gpu001.cluster.example`` -> ``gpu001``; IP addresses are
kept whole), then a regex that matches the whole name is replaced (``re`` syntax,
``\\1`` or ``\\g<name>`` for groups); a name the regex does not match is kept.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

__all__ = ["NodeNames", "host_of"]


def host_of(address: str | None) -> str | None:
    """The host part of ``host:port``, ``[v6]:port`` or a URL; None for an empty one."""
    if not address:
        return None
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):  # [ipv6]:port
        return rest[1:].split("]", 1)[0] or None
    if rest.count(":") == 1:  # host:port (a bare IPv6 address has several colons)
        rest = rest.rsplit(":", 1)[0]
    return rest or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass
class NodeNames:
    """Exporter host names -> scheduler node names (see the module docstring).

    Raises ValueError naming the setting when ``regex`` is not a valid expression.
    """

    strip_domain: bool = False
    regex: str = ""
    replace: str = ""
    _compiled: re.Pattern | None = field(default=None, init=False, repr=False)
    _cache: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.regex:
            try:
                self._compiled = re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"nodes.rename_regex {self.regex!r}: {exc}") from None
            for num, name in re.findall(r"\\(\d+)|\\g<([^>]*)>", self.replace):
                ref = num or name
                ok = (int(ref) <= self._compiled.groups if ref.isdigit()
                      else ref in self._compiled.groupindex)
                if not ok:
                    raise ValueError(f"nodes.rename_to {self.replace!r}: no group {ref!r} "
                                     f"in nodes.rename_regex {self.regex!r}")

    def __call__(self, name: str) -> str:
        """The scheduler's name for exporter host ``name``."""
        out = self._cache.get(name)
        if out is None:
            out = name
            if self.strip_domain and not _is_ip(out):
                out = out.split(".", 1)[0] or out
            if self._compiled is not None:
                m = self._compiled.fullmatch(out)
                if m is not None:
                    out = m.expand(self.replace) or out
            if len(self._cache) < 1_000_000:
                self._cache[name] = out
        return out
