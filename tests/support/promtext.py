"""Reading the vectorised parser's output row by row, for tests (slow; no production
code needs it, so it lives here and not in collector/promtext.py), and the hypothesis
strategies that write exposition text, shared by the promtext and /federate tests."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from hypothesis import strategies as st

from collector.promtext import parse_labels


def to_dicts(table: pa.Table) -> Iterator[tuple[str, str, dict[str, str], float, int | None]]:
    """Rows of a parsed table as ``(target, name, labels dict, value, timestamp_ms)``."""
    for row in table.to_pylist():
        yield (row["target"], row["name"], parse_labels(row["labels"]), row["value"],
               row["timestamp_ms"])


_LABEL_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(
    ['"', "\\", "\n", "{", "}", ",", "=", " ", "#"])


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def sample_lines(draw) -> str:
    name = draw(st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True))
    names = draw(st.lists(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True)
                          .filter(lambda n: not n.startswith("__")),  # reserved, invalid
                          max_size=4, unique=True))
    pairs = [f'{k}="{_escape(draw(st.text(_LABEL_CHARS, max_size=8)))}"' for k in names]
    value = draw(st.one_of(
        st.floats(allow_nan=False).map(repr),
        st.integers(-(2**62), 2**62).map(str),
        st.sampled_from(["NaN", "+Inf", "-Inf", "1e-3", ".5", "7."]),
    ))
    ts = draw(st.one_of(st.just(""), st.integers(-(2**40), 2**40).map(lambda t: f" {t}")))
    body = f"{name}{{{','.join(pairs)}}}" if pairs or draw(st.booleans()) else name
    return f"{body} {value}{ts}"


@st.composite
def exposition(draw) -> str:
    lines = draw(st.lists(st.one_of(sample_lines(), st.sampled_from(
        ["", "# a comment", "# HELP x help", "   "])), min_size=0, max_size=12))
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines) + "\n"


@st.composite
def mutated(draw) -> str:
    """Valid text with bytes inserted, deleted or cut off; or any text at all."""
    text = draw(exposition())
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "cut"]))
        if op == "insert":
            text = text[:i] + draw(st.text(_LABEL_CHARS, min_size=1, max_size=3)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i]
    return draw(st.one_of(st.just(text), st.text(max_size=60)))


_FEDERATE_VALUE = st.one_of(
    st.floats(allow_nan=False).map(repr),
    st.integers(-(2**62), 2**62).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e-3", ".5", "7.", "0", "1980"]),
)


@st.composite
def federate_answer(draw) -> str:
    """An answer as Prometheus's ``/federate`` writes it: per metric a ``# TYPE`` line,
    then ``name{labels} value timestamp`` lines, labels with ``instance`` and ``job``
    (honor_labels) and any escaped value (braces, quotes, blanks, newlines, non-ASCII)."""
    out = []
    for name in draw(st.lists(st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,30}", fullmatch=True),
                              min_size=1, max_size=3, unique=True)):
        out.append(f"# TYPE {name} untyped\n")
        for _ in range(draw(st.integers(1, 6))):
            keys = draw(st.lists(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True)
                                 .filter(lambda n: not n.startswith("__")
                                         and n not in ("instance", "job")),
                                 max_size=3, unique=True))
            pairs = [f'{k}="{_escape(draw(st.text(_LABEL_CHARS, max_size=12)))}"'
                     for k in keys]
            host = draw(st.sampled_from(["gpu001", "gpu002", "n-3.example.org"]))
            pairs += [f'instance="{host}:9400"', 'job="dcgm"']
            ts = draw(st.integers(0, 2**41))
            out.append(f"{name}{{{','.join(pairs)}}} {draw(_FEDERATE_VALUE)} {ts}\n")
    return "".join(out)
