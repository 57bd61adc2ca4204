"""Fast, vectorised parsing of the Prometheus text exposition format (version 0.0.4).

prometheus_client's ``text_string_to_metric_families`` parses about 17,000 lines/s; one
scrape of a 24,576-GPU fleet is ~370,000 lines. This module parses the text of many
targets at once with pyarrow.compute (RE2 regular expressions over whole columns), so the
cost is a few passes over the bytes instead of Python work per line.

Output: one row per sample line, columns

- ``target`` (dictionary<string>): the key of ``texts`` the line came from;
- ``name`` (dictionary<string>): the sample name as written (``foo_bucket`` stays so);
- ``labels`` (dictionary<string>): the raw label set between the braces, escapes kept,
  ``""`` for a sample without labels; decode with :func:`label_values` or
  :func:`parse_labels`. Exporters repeat one label set for many metrics, so the
  dictionary is small and label work runs on its few unique entries only;
- ``value`` (float64): NaN, +Inf and -Inf as IEEE values;
- ``timestamp_ms`` (int64, NULL when absent): the optional timestamp, milliseconds.

prometheus_client is the reference: the tests compare this parser against it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "PromTextError",
    "label_values",
    "parse_labels",
    "parse_texts",
    "parse_texts_lenient",
]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
# A float as Python's float() reads it (prometheus_client calls float()), minus exotica.
_FLOAT = r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?|nan))"
_PAIR_RE = (
    rf'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*{_QUOTED}[ \t]*'
)
_LABELS = rf"^(?:{_PAIR_RE}(?:,{_PAIR_RE})*,?)?[ \t]*$"
_PAIR = re.compile(rf'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*({_QUOTED})[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")

SCHEMA = pa.schema(
    [
        ("target", pa.dictionary(pa.int32(), pa.string())),
        ("name", pa.dictionary(pa.int32(), pa.string())),
        ("labels", pa.dictionary(pa.int32(), pa.string())),
        ("value", pa.float64()),
        ("timestamp_ms", pa.int64()),
    ]
)


class PromTextError(ValueError):
    """Some targets' text is not valid exposition format; ``errors`` maps target -> why."""

    def __init__(self, errors: Mapping[str, str]):
        self.errors = dict(errors)
        first = next(iter(self.errors.items()))
        more = f" (and {len(self.errors) - 1} more targets)" if len(self.errors) > 1 else ""
        super().__init__(f"{first[0]}: {first[1]}{more}")


def _unescape(value: str) -> str:
    """Undo the exposition format's label-value escapes (\\\\, \\", \\n)."""
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_labels(raw: str) -> dict[str, str]:
    """Decode one raw label set (``a="1",b="x\\"y"``) into a dict; scalar helper."""
    out: dict[str, str] = {}
    pos = 0
    raw = raw.strip()
    while pos < len(raw):
        m = _PAIR.match(raw, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"invalid label set near {raw[pos:pos + 40]!r}")
        out[m.group(1)] = _unescape(m.group(2)[1:-1])
        pos = m.end()
    return out


def label_values(labels: pa.Array | pa.ChunkedArray, name: str) -> pa.Array:
    """The value of label ``name`` for every row of a ``labels`` column (NULL if absent).

    ``labels`` holds valid label sets, as :func:`parse_texts` returns them.

    Work happens on the dictionary's unique label sets only; the result is a plain string
    array aligned with ``labels``.
    """
    if isinstance(labels, pa.ChunkedArray):
        labels = labels.combine_chunks()
    if not pa.types.is_dictionary(labels.type):
        labels = pc.dictionary_encode(labels)
    uniq = labels.dictionary
    # Only label sets that contain the name at all can hold the label: a literal search
    # (RE2's, faster here than match_substring's) spares the regex the others, and all of
    # them for an absent label.
    candidate = pc.match_substring_regex(uniq, re.escape(name))
    if not pc.any(candidate).as_py():
        return pa.nulls(len(labels), pa.string())
    if not pc.all(candidate).as_py():
        uniq = pc.if_else(candidate, uniq, pa.scalar(None, pa.string()))
    # First the label searched anywhere after a comma (5x cheaper for labels late in a
    # set). In a valid set that can only be fooled where a value ends in `,name=`: its
    # closing quote then looks like the label's opening one, followed by `,` or the end.
    # Only such sets are read again with the anchored pattern,
    # which consumes whole name="value" pairs from the start, so a value that itself
    # contains `name="` can never be mistaken for the label (issue 17: /federate at
    # 100,000 GPUs).
    label = rf'[ \t]*{re.escape(name)}[ \t]*=[ \t]*"(?P<v>(?:[^"\\]|\\.)*)"'
    found = pc.struct_field(pc.extract_regex(uniq, rf"(?:^|,){label}"), [0])
    suspect = pc.fill_null(pc.match_substring_regex(
        uniq, rf'{re.escape(name)}[ \t]*=[ \t]*"[ \t]*(?:,|$)'), False)
    if pc.any(suspect).as_py():
        pattern = rf'^(?:[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*{_QUOTED}[ \t]*,)*?{label}'
        again = pc.struct_field(pc.extract_regex(
            pc.if_else(suspect, uniq, pa.scalar(None, pa.string())), pattern), [0])
        found = pc.if_else(suspect, again, found)
    escaped = pc.fill_null(pc.match_substring(found, "\\"), False)
    if pc.any(escaped).as_py():
        py = found.to_pylist()
        for i in np.flatnonzero(escaped.to_numpy(zero_copy_only=False)):
            py[i] = _unescape(py[i])
        found = pa.array(py, pa.string())
    return pc.take(found, labels.indices)


_WS = (32, 9)  # space, tab


def _substrings(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``[starts[i], ends[i])`` of ``data`` as a string array, in one copy.

    The ranges are increasing and disjoint, so ``starts[0], ends[0], starts[1], ends[1],
    ...`` is a valid offsets buffer for 2n-1 strings: the wanted ranges are the even
    ones, the gaps between them the odd ones, which one ``take`` drops.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.string())
    # 32-bit offsets while the text is under 2 GiB: ``take`` then gives the string array
    # itself, where a cast from large strings would copy every substring once more (the
    # label sets of a 24,576-GPU scrape are ~70 MiB).
    small = data.size < _OFFSETS32_BYTES
    offsets = np.empty(2 * n, dtype=np.int32 if small else np.int64)
    offsets[0::2] = starts
    offsets[1::2] = ends
    kind = pa.StringArray if small else pa.LargeStringArray
    both = kind.from_buffers(2 * n - 1, pa.py_buffer(offsets), data)
    out = pc.take(both, pa.array(np.arange(0, 2 * n - 1, 2)))
    return out if small else pc.cast(out, pa.string())


#: Texts of fewer bytes get 32-bit string offsets (Arrow's ``string``); larger ones
#: 64-bit (``large_string``), cast to ``string`` once cut into lines.
_OFFSETS32_BYTES = 2**31

#: Lines copied and encoded at a time by :func:`_encoded_substrings`.
_ENCODE_LINES = 1 << 16


def _encoded_substrings(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray
                        ) -> pa.DictionaryArray:
    """``pc.dictionary_encode(_substrings(data, starts, ends))``, 65,536 lines at a time.

    The label sets of a 24,576-GPU scrape copied whole are ~70 MiB, and twice that while
    ``take`` builds them; in slices only one slice's copy is alive, and the dictionaries
    (the few distinct label sets) are unified once at the end.
    """
    parts = [pc.dictionary_encode(_substrings(data, starts[lo : lo + _ENCODE_LINES],
                                              ends[lo : lo + _ENCODE_LINES]))
             for lo in range(0, len(starts), _ENCODE_LINES)]
    if not parts:
        return pc.dictionary_encode(pa.array([], pa.string()))
    return pa.chunked_array(parts).combine_chunks()


#: Bytes compared per pass when finding a byte in the text (4 MiB): a mask of the whole
#: text at once would be as large as the text (84 MiB for a 24,576-GPU scrape).
_SCAN_BYTES = 1 << 22


def _positions(buf: np.ndarray, chars: tuple[int, ...]) -> np.ndarray:
    """Sorted positions (int64) in ``buf`` of any byte of ``chars``."""
    parts = [np.empty(0, np.int64)]
    for lo in range(0, len(buf), _SCAN_BYTES):
        part = buf[lo : lo + _SCAN_BYTES]
        hit = part == chars[0]
        for c in chars[1:]:
            hit |= part == c
        parts.append(np.flatnonzero(hit).astype(np.int64) + lo)
    return np.concatenate(parts)


def _first_at_or_after(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each line, the first of ``positions`` in ``[start, end)``, else ``end``."""
    i = np.searchsorted(positions, starts)
    pos = np.append(positions, np.iinfo(np.int64).max)[i]
    return np.minimum(pos, ends)


def _last_before(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each line, the last of ``positions`` in ``[start, end)``, else -1."""
    i = np.searchsorted(positions, ends) - 1
    pos = np.where(i >= 0, positions[np.maximum(i, 0)] if len(positions) else -1, -1)
    return np.where(pos >= starts, pos, -1)


def _trim(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, chars: tuple[int, ...]):
    """Move ``starts`` right and ``ends`` left past any of ``chars`` (in place)."""
    while True:
        m = (starts < ends) & np.isin(buf[np.minimum(starts, len(buf) - 1)], chars)
        if not m.any():
            break
        starts[m] += 1
    while True:
        m = (ends > starts) & np.isin(buf[np.maximum(ends - 1, 0)], chars)
        if not m.any():
            break
        ends[m] -= 1


class _Bad:
    """Marks bad sample lines; keeps per target their count and the first reason."""

    def __init__(self, targets: list[str], data: bytes | bytearray, target: np.ndarray):
        self.targets, self.data, self.target = targets, data, target
        self.mask = np.zeros(len(target), dtype=bool)
        self.first: dict[int, tuple[int, str]] = {}  # target -> (line position, why)
        self.reasons: dict[str, int] = {}  # why -> lines

    def add(self, mask: np.ndarray, starts, ends, why: str) -> None:
        new = mask & ~self.mask
        if not new.any():
            return
        self.mask |= new
        rows = np.flatnonzero(new)
        self.reasons[why] = self.reasons.get(why, 0) + len(rows)
        uniq, first = np.unique(self.target[rows], return_index=True)
        for t, i in zip(uniq.tolist(), rows[first].tolist(), strict=True):
            line = self.data[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
            prev = self.first.get(t)
            if prev is None or int(starts[i]) < prev[0]:
                self.first[t] = (int(starts[i]), f"{why}: {line[:120]!r}")

    def errors(self) -> dict[str, str]:
        """target -> 'N invalid line(s); first: <why>: <line>', in target order."""
        counts = np.bincount(self.target[self.mask], minlength=len(self.targets))
        out = {}
        for t in sorted(self.first):
            n = int(counts[t])
            out[self.targets[t]] = (f"{n} invalid line{'s' if n > 1 else ''}; first: "
                                    f"{self.first[t][1]}")
        return out


def _joined(values: list[str]) -> tuple[bytearray, list[int]]:
    """The texts' UTF-8 bytes, each followed by a line feed, in one buffer; and each
    text's size in bytes. Written text by text into the buffer, so the only whole copy of
    the fleet's text besides ``values`` is the buffer (a joined ``str`` encoded whole
    would be a third)."""
    sizes = [len(v) if v.isascii() else len(v.encode()) for v in values]
    data = bytearray(sum(sizes) + len(sizes))
    pos = 0
    for v, n in zip(values, sizes, strict=True):
        data[pos : pos + n] = v.encode()
        data[pos + n] = 10
        pos += n + 1
    return data, sizes


def _parse(texts: Mapping[str, str], counts=None) -> tuple[pa.Table, dict[str, str]]:
    targets = list(texts)
    if not targets:
        return SCHEMA.empty_table(), {}
    values = [texts[t] for t in targets]
    data, sizes = _joined(values)
    text_starts = np.cumsum([0] + [n + 1 for n in sizes[:-1]], dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    pbuf = pa.py_buffer(data)

    ends = _positions(buf, (10,))
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    # The format ends every line with a line feed: a text without one was cut off, and
    # its last line may be cut inside a number ("12" of "1234"), so it is not trusted.
    cut = np.isin(ends, [s + n for s, n, v in zip(text_starts.tolist(), sizes, values,
                                                   strict=True) if v and v[-1] != "\n"])
    _trim(buf, starts, ends, (32, 9, 13))
    keep_line = (starts < ends) & (buf[np.minimum(starts, len(buf) - 1)] != ord("#"))
    starts, ends, cut = starts[keep_line], ends[keep_line], cut[keep_line]
    target = np.searchsorted(text_starts, starts, side="right") - 1
    bad = _Bad(targets, data, target)
    bad.add(cut, starts, ends, "truncated (no line feed after the last line)")

    spaces = _positions(buf, (32, 9) if b"\t" in data else (32,))  # tabs are rare
    opens = _positions(buf, (ord("{"),))
    closes = _positions(buf, (ord("}"),))
    space1 = _first_at_or_after(spaces, starts, ends)
    open1 = _first_at_or_after(opens, starts, ends)
    has_labels = open1 < space1
    # `name {labels} value`: whitespace between the name and the brace.
    after = np.minimum(space1, len(buf) - 1)
    gap = ~has_labels & (open1 < ends)
    if gap.any():
        nxt = after.copy()
        for _ in range(8):
            m = gap & np.isin(buf[nxt], _WS)
            if not m.any():
                break
            nxt[m] += 1
        has_labels |= gap & (nxt == open1)
    name_end = np.where(has_labels, np.minimum(open1, space1), space1)
    _trim(buf, starts.copy(), name_end, _WS)  # name_end moves left past blanks
    close = _last_before(closes, starts, ends)
    broken = has_labels & (close < open1)
    tail = np.where(has_labels, close + 1, name_end)
    vstart = tail.copy()
    vend = ends.copy()
    _trim(buf, vstart, vend, _WS)
    sp = _first_at_or_after(spaces, vstart, vend)
    ts_start = sp.copy()
    ts_end = vend.copy()
    _trim(buf, ts_start, ts_end, _WS)
    has_ts = ts_start < ts_end
    vend = sp
    broken |= (vstart >= vend) | (name_end <= starts)
    # A timestamp may not contain blanks.
    broken |= has_ts & (_first_at_or_after(spaces, ts_start, ts_end) < ts_end)
    bad.add(broken, starts, ends, "invalid sample line")
    # Broken lines get empty ranges at their start, so every range stays inside its line
    # and the ranges stay increasing (what _substrings needs).
    name_end = np.where(broken, starts, name_end)
    has_labels &= ~broken
    has_ts &= ~broken
    vstart = np.where(broken, starts, vstart)
    vend = np.where(broken, starts, vend)

    name = _encoded_substrings(pbuf, starts, name_end)
    labels = _encoded_substrings(pbuf, np.where(has_labels, open1 + 1, starts),
                                 np.where(has_labels, np.maximum(close, open1 + 1), starts))
    value_s = _substrings(pbuf, vstart, vend)
    ts_s = _substrings(pbuf, np.where(has_ts, ts_start, vend), np.where(has_ts, ts_end, vend))

    ok_name = pc.match_substring_regex(name.dictionary, rf"^{_NAME}$").to_numpy(
        zero_copy_only=False)
    bad.add(~ok_name[name.indices.to_numpy()], starts, ends, "invalid metric name")
    ok_labels = pc.match_substring_regex(labels.dictionary, _LABELS).to_numpy(
        zero_copy_only=False)
    bad.add(~ok_labels[labels.indices.to_numpy()], starts, ends, "invalid label set")

    value = _cast_checked(value_s, pa.float64(), rf"^{_FLOAT}$", starts, ends, bad)
    ts_s = pc.if_else(pc.equal(ts_s, ""), None, ts_s)
    ts = _cast_checked(ts_s, pa.int64(), r"^-?[0-9]{1,18}$", starts, ends, bad)

    keep = ~bad.mask
    mask = pa.array(keep)
    table = pa.table(
        [
            pa.DictionaryArray.from_arrays(pa.array(target[keep].astype(np.int32)),
                                           pa.array(targets, pa.string())),
            pc.filter(name, mask),
            pc.filter(labels, mask),
            pc.filter(value, mask),
            pc.filter(ts, mask),
        ],
        schema=SCHEMA,
    )
    if counts is not None:
        for why, n in bad.reasons.items():
            counts[f"line: {why}"] += n
    return table, bad.errors()


def _cast_checked(strings, typ, pattern, starts, ends, bad: _Bad) -> pa.Array:
    """Cast strings to ``typ``; rows that do not match ``pattern`` become NULL and bad.

    A timestamp of more than 18 digits (beyond int64 milliseconds) is bad too; a float
    beyond float64's range (``1e999``) reads as infinity, as Python's ``float`` does.
    """
    try:
        return pc.cast(strings, typ)
    except (pa.ArrowInvalid, ValueError):
        ok = pc.fill_null(pc.match_substring_regex(strings, pattern), True)
        bad.add(~ok.to_numpy(zero_copy_only=False), starts, ends, "invalid number")
        strings = pc.if_else(ok, strings, None)
        try:
            return pc.cast(strings, typ)
        except (pa.ArrowInvalid, ValueError):  # matched the pattern, beyond arrow's parser
            conv = float if pa.types.is_floating(typ) else int
            return pa.array([None if x is None else conv(x) for x in strings.to_pylist()],
                            typ)


def parse_texts(texts: Mapping[str, str]) -> pa.Table:
    """Parse the exposition text of many targets at once (``target -> text``).

    Raises :class:`PromTextError` (naming each bad target, its count of bad lines and the
    first) when any non-comment line is not a valid sample line, or a non-empty text does
    not end with a line feed (it was cut off). Raises nothing else for any ``str`` input.
    """
    table, errors = _parse(texts)
    if errors:
        raise PromTextError(errors)
    return table


def parse_texts_lenient(
    texts: Mapping[str, str], counts: MutableMapping[str, int] | None = None
) -> tuple[pa.Table, dict[str, str]]:
    """Like :func:`parse_texts`, but a bad line costs that line only; never raises.

    Returns ``(table, errors)``: the table holds every valid sample line of every target;
    ``errors`` maps each target that had bad lines to ``"N invalid line(s); first: <why>:
    <line>"``. A text cut off without its final line feed loses its last line. When
    ``counts`` (a ``collections.Counter``) is given, the bad lines are added to it per
    reason, as ``"line: <why>"``.
    """
    return _parse(texts, counts)

