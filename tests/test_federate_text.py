"""/federate answers read from their bytes (collector.federate_text) give exactly the
rows promtext gives them answer by answer - the reading the pull used before (issue 17)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.federate_text import LabelMemo, assemble, scan
from collector.promtext import SCHEMA, parse_texts_lenient
from tests.support.promtext import federate_answer, mutated

SELECTORS = ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", '{__name__=~"a|b"}']


def reference(answers: dict[str, str | bytes]) -> tuple[list, Counter]:
    """Each answer decoded (bad UTF-8 as U+FFFD) and parsed by promtext on its own."""
    counts: Counter = Counter()
    tables = []
    for selector, body in answers.items():
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        tables.append(parse_texts_lenient({selector: text}, counts=counts)[0])
    tables = [t for t in tables if t.num_rows]
    table = (pa.concat_tables(tables).unify_dictionaries() if tables
             else SCHEMA.empty_table())
    return rows(table), counts


def read(answers: dict[str, str | bytes]) -> tuple[list, Counter, pa.Table]:
    counts: Counter = Counter()
    table = assemble([scan(s, b) for s, b in answers.items()], counts)
    assert table.schema == SCHEMA
    return rows(table), counts, table


def rows(table: pa.Table) -> list[tuple]:
    """Rows as tuples, NaN made comparable."""
    return [(r["target"], r["name"], r["labels"], repr(r["value"]), r["timestamp_ms"])
            for r in table.to_pylist()]


def same_as_promtext(answers: dict[str, str | bytes]) -> pa.Table:
    got, got_counts, table = read(answers)
    want, want_counts = reference(answers)
    assert got == want
    assert got_counts == want_counts
    return table


REAL = (  # as Prometheus 2.42's /federate writes it (honor_labels), a MIG and an odd value
    "# TYPE DCGM_FI_DEV_GPU_TEMP untyped\n"
    'DCGM_FI_DEV_GPU_TEMP{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="gpu001",'
    'UUID="GPU-0f0e",device="nvidia0",gpu="0",instance="gpu001:9400",job="dcgm",'
    'modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"} 41 1793620800000\n'
    'DCGM_FI_DEV_GPU_TEMP{GPU_I_ID="3",GPU_I_PROFILE="1g.10gb",Hostname="gpu001",'
    'UUID="GPU-0f0f",gpu="1",instance="gpu001:9400",job="dcgm",'
    'note="a } { \\"quoted\\" \\\\ value\\nwith a newline"} NaN 1793620800123\n'
    'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu002",gpu="0",instance="gpu002:9400",job="dcgm",'
    'modelName="Grafikkarte \u00e9\u00e8 \u2603"} +Inf 1793620799000\n'
)


def test_a_real_answer_is_read_fast_and_exactly():
    assert scan("t", REAL).lines is not None  # the fast reading, not the fallback
    table = same_as_promtext({"t": REAL, "u": REAL.encode()})
    assert table.num_rows == 6
    assert len(table["labels"].combine_chunks().dictionary) == 3  # sets shared


def test_every_line_shape_prometheus_does_not_write_falls_back_to_promtext():
    variants = {
        "crlf": REAL.replace("\n", "\r\n"),
        "no timestamp": REAL.replace(" 1793620800000\n", "\n"),
        "tab": REAL.replace("} 41 ", "}\t41 "),
        "blanks": REAL.replace("} 41 ", "}  41 "),
        "blank in the value": REAL.replace("} 41 ", "} 4 1 "),
        "blank after the timestamp": REAL.replace("800000\n", "800000 \n", 1),
        "no labels": "gpu_temp_without_labels 41 1793620800000\n" + REAL,
        "cut": REAL[:-5],
        "bad value": REAL.replace("} 41 ", "} 4x1 "),
        "bad name": "1bad{a=\"1\"} 1 1793620800000\n" + REAL,
        "huge timestamp": REAL.replace("1793620800000", "99999999999999999999"),
        "short": 'a{b="1"} 1 2\n',
    }
    for why, text in variants.items():
        assert scan(why, text).lines is None, why
        same_as_promtext({why: text, "good": REAL})


def test_help_comments_and_blank_lines_stay_fast():
    text = "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n\n" + REAL + "\n# end\n"
    assert scan("t", text).lines is not None
    assert same_as_promtext({"t": text}).num_rows == 3


def test_bad_bytes_read_as_their_replacement_characters():
    body = REAL.encode().replace(b"gpu002", b"gpu\xff\xfe02", 1) + b"\xc3(\n"
    table = same_as_promtext({"t": body})
    assert "gpu\ufffd\ufffd02" in "".join(table["labels"].to_pylist())


def test_one_bad_label_set_costs_its_lines_only():
    bad = REAL.replace('job="dcgm",modelName="Grafik', 'job="dcgm" modelName="Grafik')
    table = same_as_promtext({"a": REAL, "b": bad})
    assert table.num_rows == 5  # 3 + 2: the bad set's one line is gone


def test_empty_and_comment_only_answers():
    table = same_as_promtext({"a": "", "b": b"", "c": "# TYPE x untyped\n" * 8, "d": REAL})
    assert table.num_rows == 3
    assert same_as_promtext({"a": ""}).num_rows == 0


@pytest.mark.property
@given(st.lists(federate_answer(), min_size=1, max_size=3))
def test_property_prometheus_shaped_answers_are_read_fast_and_exactly(texts):
    answers = dict(zip(SELECTORS, texts, strict=False))
    for selector, text in answers.items():
        if len(text.encode()) >= 48:  # shorter answers are left to promtext
            assert scan(selector, text).lines is not None, text
    same_as_promtext(answers)


@st.composite
def varied(draw) -> str | bytes:
    """A Prometheus-shaped answer, then CRLF, comments, lost timestamps, stray bytes."""
    text = draw(federate_answer())
    lines = text.splitlines(True)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["crlf", "no ts", "help", "blank", "comment", "drop"]))
        if op == "crlf":
            lines[i] = lines[i].replace("\n", "\r\n")
        elif op == "no ts" and not lines[i].startswith("#"):
            lines[i] = lines[i].rsplit(" ", 1)[0] + "\n"
        elif op == "help":
            lines.insert(i, "# HELP x some \"help\" text { } \\\n")
        elif op in ("blank", "comment"):
            lines.insert(i, "\n" if op == "blank" else "   # indented comment\n")
        elif op == "drop":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    text = "".join(lines)
    if draw(st.booleans()):
        return text
    data = bytearray(text.encode())
    for _ in range(draw(st.integers(0, 3))):
        data.insert(draw(st.integers(0, len(data))), draw(st.sampled_from([0xFF, 0xC3, 0x80])))
    return bytes(data)


@pytest.mark.property
@given(st.lists(st.one_of(varied(), mutated()), min_size=1, max_size=3))
def test_property_any_answer_reads_exactly_as_promtext_and_never_raises(texts):
    same_as_promtext(dict(zip(SELECTORS, texts, strict=False)))


def same_pull_after_pull(pulls: list[dict[str, str | bytes]]) -> LabelMemo:
    """Each pull read with the label sets kept from the one before (as the source
    reads them every cycle) gives exactly promtext's rows."""
    memo = LabelMemo()
    for answers in pulls:
        counts: Counter = Counter()
        table = assemble([scan(s, b, memo) for s, b in answers.items()], counts, memo)
        assert (rows(table), counts) == reference(answers)
    return memo


def _next_scrape(text: str) -> str:
    """The same series, later: other values and timestamps, the labels untouched."""
    return text.replace("} 41 1793620800000", "} 42.5 1793620815000").replace(
        "} NaN 1793620800123", "} 7 1793620815123").replace(
        "} +Inf 1793620799000", "} -1e-3 1793620814000")


def test_the_next_pull_of_the_same_series_reuses_the_label_sets():
    second = _next_scrape(REAL)
    assert second != REAL
    memo = same_pull_after_pull([{"a": REAL, "b": REAL}, {"a": second, "b": second},
                                 {"a": REAL, "b": second}])
    assert memo.reused == {"sets": 2, "lengths": 4}  # the braces found where they were


@pytest.mark.parametrize("change, lengths, sets", [
    ("a longer label", 1, 0), ("a label byte", 2, 0), ("a brace in a value", 1, 0),
    ("a blank in a value", 1, 0), ("a shorter timestamp", 1, 1), ("two names", 1, 1),
    ("a line more", 1, 0)])
def test_label_lengths_of_the_last_answer_only_guide_the_reading(change, lengths, sets):
    """Where the last answer's label-set lengths do not fit a line, its braces are
    searched for as in any answer; where they fit but the bytes changed, the sets
    are read again: the rows stay promtext's."""
    nxt = _next_scrape(REAL)
    if change == "a longer label":
        nxt = nxt.replace('Hostname="gpu002"', 'Hostname="gpu0002"')
    elif change == "a label byte":
        nxt = nxt.replace('Hostname="gpu002"', 'Hostname="gpu003"')
    elif change == "a brace in a value":
        nxt = nxt.replace("} 42.5 ", "} 4}.5 ")
    elif change == "a blank in a value":
        nxt = nxt.replace("} 42.5 ", "} 4 .5 ")
    elif change == "a shorter timestamp":
        nxt = nxt.replace(" 1793620815123\n", " 179362081512\n")
    elif change == "two names":
        nxt = nxt.replace("\nDCGM_FI_DEV_GPU_TEMP{Hostname=", "\nDCGM_FI_DEV_GPU_TEMQ{Hostname=")
    else:
        nxt = nxt + nxt.splitlines(True)[-1]
    assert nxt != _next_scrape(REAL)
    memo = same_pull_after_pull([{"a": REAL, "b": REAL}, {"a": nxt, "b": REAL}])
    assert (memo.reused["lengths"], memo.reused["sets"]) == (lengths, sets)


@pytest.mark.parametrize("change", [
    "order", "a series less", "a series more", "a label value", "a label's last byte",
    "not UTF-8", "a bad label set", "an answer less", "an answer read by promtext"])
def test_any_change_of_the_series_reads_them_again(change):
    lines = REAL.splitlines(True)
    if change == "order":
        nxt = {"a": "".join([lines[0], lines[2], lines[1], lines[3]]), "b": REAL}
    elif change == "a series less":
        nxt = {"a": "".join(lines[:3]), "b": REAL}
    elif change == "a series more":
        nxt = {"a": REAL + lines[1].replace('gpu="0"', 'gpu="7"'), "b": REAL}
    elif change == "a label value":  # same length: the GPU of another host
        nxt = {"a": REAL.replace('"gpu001:9400"', '"gpu009:9400"', 1), "b": REAL}
    elif change == "a label's last byte":
        nxt = {"a": REAL.replace('00:18:00.0"}', '00:18:00.1"}'), "b": REAL}
    elif change == "not UTF-8":
        nxt = {"a": REAL.encode().replace(b"gpu002", b"gpu\xff02"), "b": REAL}
    elif change == "a bad label set":
        nxt = {"a": REAL.replace('job="dcgm",modelName="Grafik', 'job="dcgm" modelName="Grafik'),
               "b": REAL}
    elif change == "an answer less":
        nxt = {"a": REAL}
    else:
        nxt = {"a": REAL.replace("\n", "\r\n"), "b": REAL}
    memo = same_pull_after_pull([{"a": REAL, "b": REAL}, nxt, {"a": REAL, "b": REAL}])
    assert memo.reused["sets"] == 0


@st.composite
def pulls(draw) -> list[dict[str, str | bytes]]:
    """A pull of Prometheus-shaped answers, then pulls that change it: new values,
    lines swapped, dropped or repeated with another label, a label byte changed,
    a byte that is not UTF-8."""
    texts = draw(st.lists(federate_answer(), min_size=1, max_size=3))
    out = [dict(zip(SELECTORS, texts, strict=False))]
    for _ in range(draw(st.integers(1, 3))):
        answers = {}
        for selector, text in out[-1].items():
            data = bytearray(text.encode() if isinstance(text, str) else text)
            lines = data.splitlines(True)
            i = draw(st.integers(0, len(lines) - 1))
            line = lines[i]
            op = draw(st.sampled_from(["values", "swap", "drop", "repeat", "label", "byte"]))
            brace = line.find(b"{")
            if op == "values" and brace >= 0:
                head = line.rsplit(b"}", 1)[0]
                value = draw(st.sampled_from([b"1", b"2.5", b"NaN", b"4}1", b"4 1", b"1}"]))
                lines[i] = head + b"} " + value + b" %d\n" % draw(st.integers(0, 2**41))
            elif op == "swap":
                j = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
            elif op == "drop":
                del lines[i]
            elif op == "repeat" and brace >= 0:
                lines.insert(i, line.replace(b'job="dcgm"', b'job="other"'))
            elif op in ("label", "byte") and brace >= 0 and line.rfind(b"}") > brace + 1:
                k = draw(st.integers(brace + 1, line.rfind(b"}") - 1))
                new = draw(st.sampled_from(b"a0_Z")) if op == "label" else 0xFF
                lines[i] = line[:k] + bytes([new]) + line[k + 1:]
            answers[selector] = b"".join(lines)
        out.append(answers)
    return out


@pytest.mark.property
@given(pulls())
def test_property_pulls_read_with_the_last_pulls_sets_read_as_promtext(sequence):
    same_pull_after_pull(sequence)


@st.composite
def fields_of_one_fleet(draw) -> dict[str, bytes]:
    """One pull's answers as Prometheus gives them for one fleet: the same series (label
    sets, in the same order) under each field's name; some answers with a label byte
    changed, a series less or the series swapped."""
    text = draw(federate_answer()).encode()
    lines = [x for x in text.splitlines(True) if not x.startswith(b"#")]
    out = {}
    for k, selector in enumerate(SELECTORS):
        mine = [b"field%d{" % k + x.split(b"{", 1)[1] for x in lines]
        op = draw(st.sampled_from(["same", "same", "byte", "less", "swap"]))
        i = draw(st.integers(0, len(mine) - 1))
        if op == "byte" and mine[i].rfind(b"}") > mine[i].find(b"{") + 1:
            j = draw(st.integers(mine[i].find(b"{") + 1, mine[i].rfind(b"}") - 1))
            mine[i] = mine[i][:j] + bytes([draw(st.sampled_from(b"aZ9_\xff"))]) + mine[i][j + 1:]
        elif op == "less" and len(mine) > 1:
            del mine[i]
        elif op == "swap":
            mine.insert(0, mine.pop(i))
        out[selector] = b"".join(mine)
    return out


@pytest.mark.property
@given(fields_of_one_fleet())
def test_property_answers_listing_the_same_series_read_as_promtext(answers):
    """An answer whose label sets equal an earlier answer's, line for line, takes its
    deduplication (issue 17); the rows stay promtext's whatever differs."""
    same_as_promtext(answers)
    same_pull_after_pull([answers, answers])


def test_answers_differing_far_into_their_series_are_hashed_apart():
    """The label sets of two long answers compared whole, not only at their heads."""
    series = [f'{{Hostname="gpu{i:04d}",gpu="{i % 8}",job="dcgm"}} {i} 1793620800000\n'
              for i in range(600)]
    changed = series.copy()
    changed[555] = changed[555].replace("gpu0555", "gpu9555")
    answers = {"a": "".join("temp" + x for x in series),
               "b": "".join("power" + x for x in changed),
               "c": "".join("clock" + x for x in series)}
    table = same_as_promtext(answers)
    assert len(table["labels"].combine_chunks().dictionary) == 601


@pytest.mark.property
@given(federate_answer(), st.integers(1, 20), st.data())
def test_property_timestamps_of_one_width_read_as_promtext(text, width, data):
    """Timestamps of one number of digits, as Prometheus writes them, are read with numpy
    (issue 17): leading zeros, up to 20 digits, a sign or a stray byte in one, as
    promtext reads them."""
    lines = []
    for x in text.splitlines(True):
        if not x.startswith("#"):
            ts = data.draw(st.text("0123456789", min_size=width, max_size=width))
            x = x.rsplit(" ", 1)[0] + f" {ts}\n"
        lines.append(x)
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(lines) - 1))
        if not lines[i].startswith("#"):
            odd = data.draw(st.sampled_from(["-", "+", "x", "\xe9", " "]))
            lines[i] = lines[i][:-2] + odd + "\n"
    same_as_promtext({"a": "".join(lines), "b": "".join(lines).encode()})
    same_pull_after_pull([{"a": "".join(lines)}, {"a": "".join(lines)}])


@pytest.mark.parametrize("ts", ["9223372036854775807", "9223372036854775808",
                                "99999999999999999999", "000000000000000001793620800000"])
def test_timestamps_beyond_int64_or_18_digits_read_as_promtext(ts):
    text = "".join(x.rsplit(" ", 1)[0] + f" {ts}\n" if not x.startswith("#") else x
                   for x in REAL.splitlines(True))
    same_as_promtext({"a": text})
