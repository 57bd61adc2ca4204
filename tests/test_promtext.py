"""The vectorised exposition parser agrees with prometheus_client, the reference."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector.promtext import (
    PromTextError,
    label_values,
    parse_labels,
    parse_texts,
    parse_texts_lenient,
)
from tests.support.promtext import exposition, mutated, to_dicts

FIXTURES = Path(__file__).parent / "fixtures"
TRICKY = (
    "# HELP weird A metric with \"odd\" help\n"
    "# TYPE weird gauge\n"
    'weird{a="x\\"y",b="back\\\\slash",c="new\\nline"} 1.5\n'
    'weird{a="}{,=",b="a,b=\\"c\\""} -2\n'
    'weird{a="x\\\\",b="1"} 3\n'
    "\n"
    "no_labels 42\n"
    "empty_braces{} 7\n"
    'trailing_comma{a="1",} 8\n'
    "# a free comment line\n"
    "nan_value NaN\n"
    "pos_inf +Inf\n"
    "neg_inf -Inf\n"
    "exp_value 1.5e-3\n"
    'with_ts{a="1"} 12 1700000000123\n'
    "no_labels_ts 5 -1000\n"
    'spaces { a = "1" , b="2"}   9  \r\n'
    "crlf_line 10\r\n"
    "tabbed\t11\n"
    "  indented_line 12\n"
)


def reference(text: str) -> list[tuple]:
    """prometheus_client's samples as (name, labels, value, ts_ms), counter names undone."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            if fam.type == "counter" and name not in text and name.endswith("_total"):
                name = name[: -len("_total")]  # the client adds _total to counters
            ts = None if s.timestamp is None else round(float(s.timestamp) * 1000)
            out.append((name, dict(s.labels), float(s.value), ts))
    return out


def ours(text: str, target: str = "t") -> list[tuple]:
    return [(n, lab, v, ts) for _, n, lab, v, ts in to_dicts(parse_texts({target: text}))]


def same(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x[0] != y[0] or x[1] != y[1] or x[3] != y[3]:
            return False
        if not (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2]))):
            return False
    return True


def test_tricky_cases_match_prometheus_client():
    assert same(ours(TRICKY), reference(TRICKY))


def test_fixture_texts_match_prometheus_client():
    for path in sorted((FIXTURES / "dcgm").glob("*.txt")):
        text = path.read_text()
        assert same(ours(text), reference(text)), path.name


def _random_text(rng: random.Random) -> str:
    alphabet = 'ab ,={}"\\\n#é:_'
    lines = []
    for i in range(rng.randint(1, 30)):
        name = rng.choice(["m", "metric_x", "a:b", "_u"]) + str(i % 3)
        labels = {
            rng.choice(["gpu", "UUID", "x", "le", "_q"]) + str(k): "".join(
                rng.choice(alphabet) for _ in range(rng.randint(0, 8))
            )
            for k in range(rng.randint(0, 4))
        }
        esc = ",".join(
            f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
            .replace("\n", "\\n")
            for k, v in labels.items()
        )
        value = rng.choice(["0", "1", "-3.25", "1e9", "NaN", "+Inf", "-Inf", "0.000001"])
        ts = rng.choice(["", f" {rng.randint(0, 2**40)}"])
        body = f"{name}{{{esc}}}" if labels or rng.random() < 0.3 else name
        lines.append(f"{body} {value}{ts}")
        if rng.random() < 0.2:
            lines.append(rng.choice(["", "# comment", "# HELP x y"]))
    return rng.choice(["\n", "\r\n"]).join(lines) + "\n"


def test_generated_texts_match_prometheus_client():
    rng = random.Random(7)
    for _ in range(150):
        text = _random_text(rng)
        assert same(ours(text), reference(text)), text


def test_many_targets_keep_their_rows():
    texts = {f"n{i}": f'up{{i="{i}"}} {i}\nother {i * 2}\n' for i in range(50)}
    table = parse_texts(texts)
    assert table.num_rows == 100
    rows = list(to_dicts(table))
    for target, name, labels, value, _ in rows:
        i = int(target[1:])
        assert value == (i if name == "up" else 2 * i)
        assert labels == ({"i": str(i)} if name == "up" else {})


@pytest.mark.parametrize(
    "bad",
    ["up{a=\"1\" 3", "up 1 2 3", "up abc", "9up 1", 'up{a=1} 2', "up", 'up{a="1"}'],
)
def test_one_bad_line_costs_that_line_only(bad):
    texts = {"good": "up 1\n", "bad": f"up 1\n{bad}\nup 3\n", "also_good": "x 2\n"}
    table, errors = parse_texts_lenient(texts)
    assert set(errors) == {"bad"}
    assert errors["bad"].startswith("1 invalid line; first: invalid") and bad in errors["bad"]
    rows = [(t, v) for t, _, _, v, _ in to_dicts(table)]
    assert rows == [("good", 1), ("bad", 1), ("bad", 3), ("also_good", 2)]
    with pytest.raises(PromTextError) as info:
        parse_texts(texts)
    assert "bad" in info.value.errors
    if bad != "up 1 2 3":  # prometheus_client is laxer there; Go's parser rejects it
        with pytest.raises(ValueError):  # the reference rejects it too
            list(text_string_to_metric_families(f"{bad}\n"))


def test_label_values_ignores_lookalikes_inside_other_values():
    raw = ['x="gpu=\\"9\\"",gpu="1"', 'gpu="2"', "", 'x=",gpu=\\"3"', 'gpu="a\\"b"']
    got = label_values(pa.array(raw), "gpu").to_pylist()
    assert got == [parse_labels(r).get("gpu") for r in raw] == ["1", "2", None, None, 'a"b']


def test_empty_input():
    assert parse_texts({}).num_rows == 0
    assert parse_texts({"a": ""}).num_rows == 0


# --------------------------------------------------------------- property-based tests
# Bounded in `make test`; HYPOTHESIS_PROFILE=fuzz (`make fuzz`) runs many more examples.

@pytest.mark.property
@given(exposition())
def test_property_valid_text_agrees_line_for_line_with_the_reference(text):
    assert same(ours(text), reference(text)), text


@pytest.mark.property
@given(st.dictionaries(st.sampled_from(["n1:9400", "n2:9400", "n3"]), mutated(), max_size=3))
def test_property_bad_input_costs_its_lines_and_raises_only_promtext_error(texts):
    table, errors = parse_texts_lenient(texts)  # never raises
    assert set(errors) <= set(texts)
    rows = {t: 0 for t in texts}
    for t in table["target"].to_pylist():
        rows[t] += 1
    for target, text in texts.items():
        sample = [ln for ln in text.split("\n") if ln.strip(" \t\r")
                  and not ln.strip(" \t\r").startswith("#")]
        bad = int(errors[target].split(" ", 1)[0]) if target in errors else 0
        assert rows[target] + bad == len(sample), (target, text, errors)
        if target in errors:
            assert "invalid" in errors[target] or "truncated" in errors[target]
    try:
        strict = parse_texts(texts)
    except PromTextError as exc:
        assert errors and exc.errors == errors
        assert str(exc).startswith(next(iter(errors)))  # names the target
    else:
        assert not errors  # the same rows (repr: NaN equals NaN)
        assert [repr(r) for r in to_dicts(strict)] == [repr(r) for r in to_dicts(table)]


_BLANK = st.sampled_from(["", "", "", " ", "\t", "  "])
_LOOKALIKE = st.lists(st.sampled_from(['a', ',', '=', '"', '\\', ' ', 'gpu', 'xgpu', '\n', 'é']),
                      max_size=8).map("".join)


@st.composite
def label_set(draw) -> str:
    """A valid label set: names that contain each other (gpu, xgpu, gpu_i), values with
    lookalikes (``,gpu=`` at the end, escaped quotes), blanks where the grammar allows."""
    keys = draw(st.lists(st.sampled_from(["gpu", "xgpu", "gpu_i", "UUID", "a", "Hostname"]),
                         max_size=5, unique=True))
    pairs = []
    for k in keys:
        value = draw(_LOOKALIKE).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        pairs.append(f'{draw(_BLANK)}{k}{draw(_BLANK)}={draw(_BLANK)}"{value}"{draw(_BLANK)}')
    return ",".join(pairs) + (draw(st.sampled_from(["", "", ","])) if pairs else "")


@pytest.mark.property
@given(st.lists(label_set(), min_size=1, max_size=8))
def test_property_label_values_read_every_set_as_parse_labels_does(sets):
    """The numpy reading of Prometheus-written pairs and the regexes for the rest give,
    over many sets at once, each set's own value (issue 17)."""
    for name in ("gpu", "xgpu", "UUID", "absent"):
        want = [parse_labels(s).get(name) for s in sets]
        assert label_values(pa.array(sets), name).to_pylist() == want, name
        assert label_values(pa.array(sets).dictionary_encode(), name).to_pylist() == want


@pytest.mark.property
@given(st.dictionaries(st.sampled_from(["n1:9400", "n2:9400", "n3"]), mutated(), max_size=3),
       st.integers(1, 9), st.integers(1, 4), st.booleans())
def test_property_text_read_in_slices_parses_as_read_whole(texts, scan_bytes, lines, wide):
    """The parser finds bytes a few MiB at a time and copies label sets 65,536 lines at a
    time, to bound its memory (issue 17); slices of any size give the whole reading, with
    32-bit offsets or (``wide``: as for a text over 2 GiB) 64-bit ones."""
    import collector.promtext as promtext

    whole = parse_texts_lenient(texts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(promtext, "_SCAN_BYTES", scan_bytes)
        mp.setattr(promtext, "_ENCODE_LINES", lines)
        mp.setattr(promtext, "_OFFSETS32_BYTES", 0 if wide else promtext._OFFSETS32_BYTES)
        sliced = parse_texts_lenient(texts)
    assert sliced[1] == whole[1]
    assert [repr(r) for r in to_dicts(sliced[0])] == [repr(r) for r in to_dicts(whole[0])]
    assert sliced[0].schema == whole[0].schema
