"""Writing settings back into the TOML configuration file (the Thermal page's rule tuner,
issue 22), keeping the file's comments, order and every other setting.

    set_values("gpulens.toml", {"alerts.rack_cooling.threshold": 5.0})

Python reads TOML but does not write it, and rewriting the whole file would drop the
operator's comments; so this edits lines: a key already set (``threshold = 4`` under
``[alerts.rack_cooling]``, ``rack_cooling.threshold = 4`` under ``[alerts]``, or
``alerts.rack_cooling.threshold = 4`` before any table) gets its value replaced in place;
a new key goes under its ``[alerts.<rule>]`` table, which is appended when missing. The
result is read back with :func:`gpulens.config.load` before it replaces the file
(atomically): it must hold exactly the old settings plus the new values, or nothing is
written and :class:`ConfigError` says why.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from gpulens.config import BY_NAME, Config, ConfigError, load

_TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_ARRAY_TABLE = re.compile(r"^\s*\[\[")


def _literal(value) -> str:
    """A TOML literal for a setting's value (numbers, booleans, plain strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if not math.isfinite(float(value)):
            raise ConfigError(f"{value!r} is not a finite number")
        return repr(float(value)) if isinstance(value, float) else str(value)
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dotted(text: str) -> str:
    return ".".join(part.strip().strip('"').strip("'") for part in text.split("."))


def _key_line(line: str, key: str) -> bool:
    m = re.match(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=", line)
    return m is not None and _dotted(m.group(1)) == key


def _edit(text: str, name: str, value) -> str:
    """``text`` with setting ``name`` (``alerts.rack_cooling.threshold``) set to ``value``."""
    lines = text.splitlines()
    table = ""  # the current [table], "" before the first
    owner_end: int | None = None  # index after the last line of [alerts.<rule>]
    dotted_end: tuple[int, str] | None = None  # after a sibling set by dotted key, its form
    parent, leaf = name.rsplit(".", 1)
    for i, line in enumerate(lines):
        if _ARRAY_TABLE.match(line):
            table = "\0"
            continue
        m = _TABLE.match(line)
        if m:
            table = _dotted(m.group(1))
            continue
        if table == "\0" or "=" not in line:
            if table == parent and line.strip():
                owner_end = i + 1
            continue
        relative = name if not table else (name[len(table) + 1:]
                                           if name.startswith(table + ".") else None)
        if relative is not None and _key_line(line, relative):
            head = line[:line.index("=") + 1]
            comment = re.search(r"\s+#[^\"']*$", line)
            lines[i] = f"{head} {_literal(value)}{comment.group(0) if comment else ''}"
            return "\n".join(lines) + "\n"
        if table == parent:
            owner_end = i + 1
        elif relative is not None and "." in relative:
            key = _dotted(line[:line.index("=")])
            if key.rsplit(".", 1)[0] == relative.rsplit(".", 1)[0]:
                dotted_end = (i + 1, relative)  # e.g. rack_cooling.clear under [alerts]
    entry = f"{leaf} = {_literal(value)}"
    if owner_end is None and dotted_end is not None:
        # the rule's table exists through dotted keys: a [table] header would be invalid
        lines.insert(dotted_end[0], f"{dotted_end[1]} = {_literal(value)}")
        return "\n".join(lines) + "\n"
    if owner_end is None:
        header = next((i for i, line in enumerate(lines)
                       if (m := _TABLE.match(line)) and _dotted(m.group(1)) == parent), None)
        if header is None:
            return "\n".join([*lines, "", f"[{parent}]", entry]) + "\n"
        owner_end = header + 1
    lines.insert(owner_end, entry)
    return "\n".join(lines) + "\n"


def set_values(path: str | os.PathLike, values: Mapping[str, object]) -> None:
    """Set ``values`` (setting name -> value) in the configuration file ``path``; raises
    ConfigError (nothing written) when the file is missing or unreadable, a setting is
    unknown or invalid, or the edited file would not hold exactly these changes."""
    path = Path(path)
    for name in values:
        if name not in BY_NAME:
            raise ConfigError(f"unknown setting {name!r}")
    before = load(path, env={})  # the file must be valid to start with
    Config(dict(before._values), before.source).update(values, str(path))  # values valid
    try:
        original = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    text = original
    for name, value in values.items():
        text = _edit(text, name, value)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: cannot add {', '.join(values)} by line (TOML: {exc}); "
                          "set them by hand") from None
    tmp = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                      suffix=".tmp", delete=False)
    try:
        with tmp:
            tmp.write(text)
        after = load(tmp.name, env={})
        expected = {**{n: before[n] for n in BY_NAME}, **{
            n: after[n] for n in values}}
        for name, value in values.items():
            if after[name] != value:
                raise ConfigError(f"{path}: {name} reads back as {after[name]!r}, not "
                                  f"{value!r}; set it by hand")
        changed = [n for n in BY_NAME if after[n] != expected[n]]
        if changed:
            raise ConfigError(f"{path}: editing would also change {', '.join(changed)}; "
                              "set the rule by hand")
        os.chmod(tmp.name, path.stat().st_mode & 0o7777)
        os.replace(tmp.name, path)
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)
