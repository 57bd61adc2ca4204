"""The configuration reference, generated from ``gpulens.config.SETTINGS``.

``python -m gpulens.config_doc toml`` prints the commented example file
(gpulens.example.toml); ``python -m gpulens.config_doc markdown`` the README table. The
tests check that both committed copies match, so every setting stays documented.
"""

from __future__ import annotations

import sys
import textwrap

from gpulens.config import SETTINGS


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def render_toml() -> str:
    """The commented example configuration, every setting at its default."""
    lines = [
        "# gpulens configuration: every setting with its default.",
        "# Copy to gpulens.toml, keep what you change, and run:",
        "#   gpulens serve --config gpulens.toml",
        "# Any setting can also come from the environment: service.port is GPULENS_SERVICE_PORT.",
    ]
    section = None
    for s in SETTINGS:
        head, key = s.name.split(".", 1)
        if head != section:
            lines += ["", f"[{head}]"]
            section = head
        for text in textwrap.wrap(s.help, 86):
            lines.append(f"# {text}")
        if s.expected:
            lines.append(f"# Expected: {s.expected}.")
        lines.append(f"{key} = {_toml_value(s.default)}")
    return "\n".join(lines) + "\n"


def render_markdown() -> str:
    """The README's configuration table."""
    rows = ["| setting | default | environment | meaning |", "| --- | --- | --- | --- |"]
    for s in SETTINGS:
        rows.append(f"| `{s.name}` | `{_toml_value(s.default)}` | `{s.env}` | {s.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print({"toml": render_toml, "markdown": render_markdown}[sys.argv[1]](), end="")
