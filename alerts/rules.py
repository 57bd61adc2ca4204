"""The default thermal rules, and building the configured rules from settings.

Every rule's threshold, clear level, hold, resolve hold and severity is a setting named
``alerts.<rule>.<field>`` (see gpulens/settings/alerts.py, generated from ``DEFAULTS``);
detector knobs are ``alerts.<rule>.<param>``. Scope and kind are fixed per rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from alerts.model import Rule

# Critical XIDs (NVIDIA's XID catalogue): 48 double-bit ECC, 63/64 row remapping,
# 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained and
# uncontained ECC, 119/120 GSP errors.
CRITICAL_XIDS = "48,63,64,74,79,92,94,95,119,120"

DEFAULTS: tuple[Rule, ...] = (
    Rule("gpu_temp", "gpu_column", "gpu", "critical", threshold=87.0, clear=82.0,
         hold_s=60.0, resolve_hold_s=120.0, unit="C",
         summary="GPU die temperature above its threshold",
         params={"column": "temp_c"}),
    Rule("hbm_temp", "gpu_column", "gpu", "critical", threshold=95.0, clear=90.0,
         hold_s=60.0, resolve_hold_s=120.0, unit="C",
         summary="HBM (memory) temperature above its threshold",
         params={"column": "mem_temp_c"}),
    Rule("thermal_throttle", "gpu_column", "gpu", "warning", threshold=1.0, clear=1.0,
         hold_s=300.0, resolve_hold_s=120.0, unit="",
         summary="GPU clocks held down by thermal slowdown",
         params={"column": "throttle_thermal"}),
    Rule("gpu_hot_vs_peers", "gpu_peers", "gpu", "warning", threshold=10.0, clear=6.0,
         hold_s=300.0, resolve_hold_s=300.0, unit="C",
         summary="GPU much hotter than its rack peers at similar power (fan or cooling "
                 "path of this GPU)",
         params={"min_z": 4.0, "smooth_s": 120.0}),
    Rule("rack_cooling", "rack_hot", "rack", "critical", threshold=4.0, clear=2.0,
         hold_s=30.0, resolve_hold_s=180.0, unit="C",
         summary="Rack running hotter than its own recent baseline or than the other "
                 "racks at similar load (cooling failure)",
         params={"min_z": 1.5, "smooth_s": 60.0, "baseline_s": 180.0,
                 "recent_s": 300.0, "load_margin_c_per_w": 0.01}),
    Rule("temp_rise", "gpu_rate", "gpu", "warning", threshold=4.0, clear=2.0,
         hold_s=30.0, resolve_hold_s=120.0, unit="C/min",
         summary="GPU temperature rising fast at steady power",
         params={"window_s": 180.0, "max_power_change_w": 50.0, "min_temp_c": 60.0}),
    Rule("critical_xid", "xid", "node", "critical", threshold=1.0, clear=1.0,
         hold_s=0.0, resolve_hold_s=0.0, unit="events",
         summary="Critical XID errors on a node (fallen off the bus, uncorrectable ECC, ...)",
         params={"codes": CRITICAL_XIDS, "window_s": 1800.0}),
    Rule("straggler", "straggler", "node", "warning", threshold=15.0, clear=1.0,
         hold_s=0.0, resolve_hold_s=0.0, unit="min",
         summary="A node slows a large multi-node job (straggler): the job runs at its pace",
         params={"min_gpus": 64.0, "open_s": 600.0}),
)

RULE_FIELDS = ("severity", "threshold", "clear", "hold_s", "resolve_hold_s")


def parse_codes(text: str) -> frozenset[int]:
    """``"48, 79"`` -> {48, 79}."""
    return frozenset(int(part) for part in text.replace(" ", "").split(",") if part)


def from_settings(values: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The configured rules from the ``alerts`` section (``{"gpu_temp.threshold": 87,
    "disabled": "temp_rise", ...}``); a setting not given keeps the default."""
    disabled = {r.strip() for r in str(values.get("disabled", "")).split(",") if r.strip()}
    rules = []
    for rule in DEFAULTS:
        if rule.name in disabled:
            continue
        fields = {f: values[f"{rule.name}.{f}"] for f in RULE_FIELDS
                  if f"{rule.name}.{f}" in values}
        params = {p: values.get(f"{rule.name}.{p}", v) for p, v in rule.params.items()}
        rules.append(replace(rule, **fields, params=params))
    return tuple(rules)


def window_s(rules: tuple[Rule, ...]) -> float:
    """Seconds of samples the rules need to look back (at least 10 minutes)."""
    need = [600.0]
    for rule in rules:
        p = rule.params
        need.append(p.get("smooth_s", 0.0) + p.get("baseline_s", 0.0) + rule.hold_s)
        need.append(p.get("recent_s", 0.0) + p.get("baseline_s", 0.0))
        if rule.kind == "gpu_rate":
            need.append(p["window_s"] + 60.0)
    return max(need)
