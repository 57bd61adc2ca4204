"""The test suite's own layout: test modules share code only through ``tests/support/``
and the fixtures of ``tests/conftest.py``, never by importing each other (issue 14)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The modules of ``tests`` other than ``tests.support...`` that ``source`` imports,
    as dotted names (relative imports are read as relative to the package ``tests``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "tests" if node.level else (node.module or "")
            if node.level and node.module:
                base = f"tests.{node.module}"
            # ``from tests import test_x`` names modules in the alias list
            names = [f"{base}.{a.name}" for a in node.names] if base == "tests" else [base]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "tests" and len(parts) > 1 and parts[1] != "support":
                found.append(name)
    return found


def test_the_check_sees_every_form_of_import():
    src = ("import tests.test_a\nfrom tests.test_b import x\nfrom tests import test_c\n"
           "from .test_d import y\nfrom . import test_e\nfrom tests.browser import z\n"
           "from tests.support.frames import T0\nimport tests.support.slurm\n")
    assert imported_test_modules(src) == [
        "tests.test_a", "tests.test_b", "tests.test_c", "tests.test_d", "tests.test_e",
        "tests.browser"]


def test_no_test_module_imports_another():
    offenders = {
        str(path.relative_to(TESTS.parent)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (names := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, (
        "move what these modules share into tests/support/ or a fixture in "
        f"tests/conftest.py: {offenders}")
