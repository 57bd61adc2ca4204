"""Every default is written once: in the settings table (gpulens/settings/), or for facts
of the fleet in warehouse/queries/fleet.py. Code that needs a default reads it from there
(issue 14: ``analytics.Options`` once restated 17 defaults, "8 GPUs per node" was
hard-coded in nine places and "stale after 120 s" in eight).

The scan reads the source of the production packages with ``ast``: a parameter default
or a dataclass field whose name is a setting's key (``pue``, ``timeout_s``, ...) and
whose value is that setting's default, written as a number or a non-empty
string, is a second declaration.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from collector.simulator import SimConfig
from gpulens.settings import SETTINGS, default
from warehouse.analytics import Options
from warehouse.queries import fleet
from warehouse.rollups import Retention

ROOT = Path(__file__).resolve().parents[1]
#: The packages scanned for restated settings and fleet facts: all of them.
PACKAGES = ["warehouse", "alerts", "gpulens", "collector", "dashboard"]
#: Parameter names that mean a setting whose key is spelt differently.
ALIASES = {"idle_pct": "energy.idle_util_pct", "p_value": "failures.lemon_p_value",
           "min_failures": "failures.lemon_min_failures",
           "cipher_suite": "bmc.ipmi_cipher_suite"}
#: (file, parameter) whose name matches a setting's key but means something else there:
#: the alert test receiver binds its own host, not the service's.
NOT_SETTINGS = {("receiver.py", "host")}


def _by_key() -> dict[str, list]:
    keys: dict[str, list] = {}
    for s in SETTINGS:
        keys.setdefault(s.name.split(".", 1)[1], []).append(s.name)
    for alias, name in ALIASES.items():
        keys.setdefault(alias, []).append(name)
    return keys


def _defaults(tree: ast.AST):
    """(name, default expression) of every parameter default and annotated assignment."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            pos = a.posonlyargs + a.args
            yield from zip([x.arg for x in pos[len(pos) - len(a.defaults):]], a.defaults,
                           strict=True)
            yield from ((x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
                        if d is not None)
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.value is not None):
            yield node.target.id, node.value


def _is_value(v) -> bool:
    """A number or a non-empty string: a default worth declaring once."""
    return (isinstance(v, int | float) and not isinstance(v, bool)) or (
        isinstance(v, str) and v != "")


def _sources(packages=PACKAGES):
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "settings" not in path.relative_to(ROOT).parts:
                yield path, path.read_text(encoding="utf-8")


def restated_defaults(sources) -> list[str]:
    """``file:line name=value restates setting`` for each second declaration."""
    keys = _by_key()
    found = []
    for path, text in sources:
        for name, expr in _defaults(ast.parse(text)):
            if not (isinstance(expr, ast.Constant) and _is_value(expr.value)):
                continue
            if (path.name, name) in NOT_SETTINGS:
                continue
            for setting in keys.get(name, []):
                if expr.value == default(setting):
                    found.append(f"{path.name}:{expr.lineno} {name}={expr.value!r} "
                                 f"restates {setting}")
    return found


#: Fleet facts: a second definition of the stale horizon, or a literal GPU count per node.
FACTS = [
    (re.compile(r"stale_after_s\s*(:\s*\w+\s*)?=\s*120\b|STALE_AFTER_S\s*=\s*120\b"),
     "stale_after_s = 120 (use warehouse.queries.fleet.STALE_AFTER_S)"),
    (re.compile(r"gpus_per_node\s*(:\s*\w+\s*)?=\s*8\b|coalesce\(\s*n\.gpus\s*,\s*8\s*\)"),
     "8 GPUs per node (read warehouse.queries.fleet.gpus_per_node / NODE_GPUS_SQL)"),
]


def restated_facts(sources) -> list[str]:
    found = []
    for path, text in sources:
        if path == ROOT / "warehouse/queries/fleet.py":
            continue
        for pattern, what in FACTS:
            for m in pattern.finditer(text):
                found.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1} {what}")
    return found


@pytest.mark.parametrize("cls", [Options, Retention, SimConfig])
def test_dataclass_defaults_come_from_the_settings(cls):
    declared = {s.name for s in SETTINGS}
    tied = [f for f in dataclasses.fields(cls) if "setting" in f.metadata]
    assert tied, f"{cls.__name__} reads no setting"
    for f in tied:
        assert f.metadata["setting"] in declared
        assert f.default == default(f.metadata["setting"]), f.name
    if cls is not SimConfig:  # SimConfig has knobs of its own that are not settings
        assert len(tied) == len(dataclasses.fields(cls)), "a field with a default of its own"


def test_options_follow_a_changed_setting():
    opts = Options.from_settings({"goodput.restart_warmup_min": 30.0, "energy.pue": 1.5})
    assert (opts.restart_warmup_min, opts.pue) == (30.0, 1.5)
    assert opts.node_overhead_w == default("energy.node_overhead_w")


def test_no_default_is_written_twice():
    assert restated_defaults(_sources()) == []


def test_fleet_facts_are_defined_once():
    assert restated_facts(_sources()) == []


def test_the_scan_finds_a_restated_default(tmp_path):
    """The checks above can fail: a file restating defaults is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(pue: float = 1.2, *, timeout_s=10.0, idle_pct=5.0,\n"
                   "      chromium='chromium', squeue=''):\n"
                   "    return coalesce(n.gpus, 8)\n"
                   "STALE_AFTER_S = 120\n")
    src = [(bad, bad.read_text())]
    found = {r.split(" ", 1)[1] for r in restated_defaults(src)}
    assert {"pue=1.2 restates energy.pue", "timeout_s=10.0 restates alerts.timeout_s",
            "idle_pct=5.0 restates energy.idle_util_pct",
            "chromium='chromium' restates reports.chromium"} <= found
    assert all(r.startswith(("pue=", "timeout_s=", "idle_pct=", "chromium=")) for r in found)
    assert len(restated_facts(src)) == 2


def test_gpus_per_node_is_read_from_the_warehouse():
    import duckdb

    from warehouse.migrate import migrate

    con = duckdb.connect()
    migrate(con)
    assert fleet.gpus_per_node(con) == fleet.FALLBACK_GPUS_PER_NODE  # no topology yet
    con.execute("INSERT INTO nodes (node, rack, partition, gpus) VALUES"
                " ('a', 'r1', 'p', 4), ('b', 'r1', 'p', 4), ('c', 'r2', 'p', 2)")
    assert fleet.gpus_per_node(con) == 4
