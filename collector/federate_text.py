"""``/federate`` answers parsed from their raw bytes: Prometheus's own line shape, read fast.

Prometheus writes every federated sample in one shape, ``name{labels} value timestamp\\n``:
a name, braces, one space, a value, one space, a timestamp in milliseconds; the only
other lines are ``# TYPE`` comments. An answer made only of such lines is read here
without copying its text: line ends, the first ``{`` and the last ``}`` of each line
and the two spaces after it are found by numpy over fixed-width windows of the bytes,
names, label sets, values and timestamps become Arrow ``string_view`` arrays pointing
into the answer's buffer, and Arrow's casts read the numbers, as promtext's do. At
100,000 GPUs one pull is 15 answers with samples, 1.5 million lines, 412 MB (issue 17).

Label sets are deduplicated once over all the answers of a pull (:func:`assemble`):
each GPU's label set recurs in every field's answer, so the label grammar
(:data:`collector.promtext._LABELS`) is checked once per GPU instead of once per line.
Successive pulls list the same series in the same order: a :class:`LabelMemo` kept
from one pull to the next compares each line's label bytes with the set the same line
had last time (one bulk comparison, 0.06 s at 100,000 GPUs) and, where all are equal,
reuses the deduplication instead of hashing the 1.5 M sets again; any difference -
another order, a series more or less, one changed byte - takes the full path.

An answer with any line in another shape - no timestamp, tabs, carriage returns, a
missing final line feed, leading blanks, a value Arrow does not read, a label set that
fails the grammar - is read by :func:`collector.promtext.parse_texts_lenient` instead,
so the rows are always exactly promtext's (the tests compare both on varied input):
one bad line costs that line, counted as ``"line: <why>"``. Nothing here raises for any
``str`` or ``bytes`` input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.promtext import _LABELS, _NAME, SCHEMA, parse_texts_lenient

__all__ = ["Answer", "LabelMemo", "assemble", "scan"]

T = TypeVar("T")
_W = 48  # bytes of the window at each line's start (name and "{") and end ("} v ts")
_SAME_MAX = 3  # earlier answers of the same length an answer's label sets are compared with


@dataclass(frozen=True)
class _Lines:
    """One answer's sample lines, read fast: names, label sets (string_view into the
    answer's buffer, not yet deduplicated), values and timestamps (ms)."""

    name: pa.DictionaryArray
    labels: pa.Array
    value: pa.Array
    timestamp_ms: pa.Array
    guided: bool = False  # found by :func:`_guided`


@dataclass(frozen=True)
class Answer:
    """One selector's answer: its body's bytes and either its fast reading or,
    where it has a line of another shape, promtext's table and bad-line counts."""

    selector: str
    data: bytes
    lines: _Lines | None
    table: pa.Table | None = None
    counts: Counter | None = None
    guided: bool = False  # read where the last answer's label-set lengths put the braces


def _utf8(body: str | bytes) -> bytes:
    """The body as bytes, not decoded: a line whose bytes are not UTF-8 fails a check of
    the fast reading (names, numbers, label sets), and promtext's reading decodes the
    answer with U+FFFD for them, as the transport once did (:func:`_slow`)."""
    if isinstance(body, str):
        return body.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    return bytes(body)


def _slow(selector: str, data: bytes) -> Answer:
    """The answer read by promtext, as the pull read every answer before issue 17."""
    counts: Counter = Counter()
    table, _ = parse_texts_lenient({selector: data.decode("utf-8", "replace")},
                                   counts=counts)
    return Answer(selector, data, None, table, counts)


def scan(selector: str, body: str | bytes, memo: LabelMemo | None = None) -> Answer:
    """Read one ``/federate`` answer; fast where every line has Prometheus's shape.

    ``memo`` (the last pull's) gives the length of each line's label set in the same
    selector's last answer: where they fit this answer's lines, the braces are checked
    where they should be instead of searched for (:func:`_guided`)."""
    data = _utf8(body)
    hint = memo.label_lengths(selector) if memo else None
    lines = _fast(data, hint) if data else None
    if lines is None and data:
        return _slow(selector, data)
    return Answer(selector, data, lines, guided=lines is not None and lines.guided)


def _gather(data: bytes, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes from each offset ``at`` of ``data`` (each at most
    ``len(data) - width``), one row each: a gather of fixed-size items (numpy's void
    type), several times faster than indexing a strided window view."""
    items = np.ndarray(shape=(len(data) - width + 1,), dtype=np.dtype((np.void, width)),
                       buffer=data, strides=(1,))
    return items[at].view(np.uint8).reshape(len(at), width)


def _views(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``[starts, ends)`` of ``data`` (``buf`` its numpy view) as a
    string_view array, no copy of the strings.

    A view is 16 bytes: the length, then up to 12 bytes inline, or for longer strings
    a 4-byte prefix, buffer 0 and the offset (the Arrow columnar format).
    """
    n = len(starts)
    size = ends - starts
    first = _gather(data, np.minimum(starts, len(buf) - 12), 12)
    first *= np.arange(12) < size[:, None]  # no bytes past a short string's end
    v = np.empty((n, 4), np.uint32)
    v[:, 0] = size
    v[:, 1:] = first.view(np.uint32)
    long = np.flatnonzero(size > 12)
    v[long, 2] = 0
    v[long, 3] = starts[long]
    for i in np.flatnonzero(starts > len(buf) - 12).tolist():  # the last bytes: exact
        st, sz = int(starts[i]), int(size[i])
        v[i, 1:] = np.frombuffer(data[st:st + min(sz, 12)].ljust(12, b"\0"), np.uint32)
        if sz > 12:
            v[i, 2:] = (0, st)
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(v),
                                                      pa.py_buffer(data)])


def _fast(data: bytes, hint: np.ndarray | None = None) -> _Lines | None:
    """The answer's lines, or None where one is not ``name{labels} value ts``;
    ``hint``: each line's label-set length, as last time (None: unknown)."""
    if len(data) < _W or data[-1:] != b"\n" or b"\r" in data or b"\t" in data:
        return None
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    sample = (starts < ends) & (buf[starts] != ord("#"))
    starts, ends = starts[sample], ends[sample]
    n = len(starts)
    if n == 0:
        return _Lines(pa.DictionaryArray.from_arrays(pa.array([], pa.int32()),
                                                     pa.array([], pa.string())),
                      pa.array([], pa.string_view()), pa.array([], pa.float64()),
                      pa.array([], pa.int64()))
    if hint is not None and len(hint) == n:
        lines = _guided(data, buf, starts, ends, hint)
        if lines is not None:
            return lines
    # Windows of _W bytes at each line's start and before its end; near the buffer's
    # ends a window is moved inwards, and the bytes of other lines in it are masked.
    rows, cols = np.arange(n), np.arange(_W)
    head_at = np.minimum(starts, len(buf) - _W)
    head = _gather(data, head_at, _W)
    is_open = head == ord("{")
    if (head_at < starts).any():
        is_open &= cols >= (starts - head_at)[:, None]
    o = np.argmax(is_open, axis=1)  # the first "{" (0 where none: caught below)
    opens = head_at + o
    tail_at = np.maximum(ends - _W, 0)
    tail = _gather(data, tail_at, _W)
    is_close, blank = tail == ord("}"), tail == ord(" ")
    if (tail_at + _W > ends).any():
        inside = cols < (ends - tail_at)[:, None]
        is_close &= inside
        blank &= inside
    c = _W - 1 - np.argmax(is_close[:, ::-1], axis=1)  # the last "}"
    closes = tail_at + c
    spaces = tail_at + _W - 1 - np.argmax(blank[:, ::-1], axis=1)  # the last blank
    # A blank right after "}", and the last one before the timestamp: a third blank
    # would lie in the value, which Arrow's cast then refuses (promtext reads it).
    ok = (is_open[rows, o] & (opens > starts) & (opens < ends) & is_close[rows, c]
          & (closes > opens) & (buf[closes + 1] == ord(" "))
          & (spaces > closes + 2) & (spaces < ends - 1))
    if not ok.all():
        return None
    name = _names(data, buf, head, head_at, starts, opens)
    if name is None:
        return None
    try:  # Arrow's readers, as promtext casts: what one refuses, promtext explains
        value = pc.cast(_views(data, buf, closes + 2, spaces), pa.float64())
        ts = _timestamps(data, buf, spaces + 1, ends)
    except (pa.ArrowInvalid, ValueError):
        return None
    return _Lines(name, _views(data, buf, opens + 1, closes), value, ts)


def _guided(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
            label_len: np.ndarray) -> _Lines | None:
    """The lines read where each label set is ``label_len`` bytes long, as in the
    selector's last answer: one name, its ``{`` at the same place in every line, the
    ``}`` and a blank where the label set's length puts them, and a blank before a
    timestamp as long as the first line's. Single bytes checked per line instead of
    windows searched (a third of the reading's CPU, issue 17). None where any check
    or cast fails: the windows then find the braces (:func:`_fast`).

    The split is the one the windows would find: the name is valid, so its ``{`` is
    the first; a ``}`` or blank after the set's ``}`` would lie in the value or the
    timestamp, which Arrow's casts refuse. The label set itself is checked later, as
    every one (:func:`assemble`)."""
    first = buf[starts[0]:min(ends[0], starts[0] + _W)]
    size = int(np.argmax(first == ord("{")))  # the name's length
    blanks = np.flatnonzero(buf[starts[0]:ends[0]] == ord(" "))
    if size == 0 or not len(blanks):
        return None
    opens = starts + size
    closes = opens + 1 + label_len
    spaces = ends - (ends[0] - starts[0] - blanks[-1])  # the timestamp's blank
    if not ((closes + 2 < spaces).all() and (buf[opens] == ord("{")).all()
            and (buf[closes] == ord("}")).all() and (buf[closes + 1] == ord(" ")).all()
            and (buf[spaces] == ord(" ")).all()):
        return None
    if not (_gather(data, starts, size) == buf[starts[0]:opens[0]]).all():
        return None
    name = _one_name(data, starts[0], opens[0], len(starts))
    if name is None:
        return None
    try:
        value = pc.cast(_views(data, buf, closes + 2, spaces), pa.float64())
        ts = _timestamps(data, buf, spaces + 1, ends)
    except (pa.ArrowInvalid, ValueError):
        return None
    return _Lines(name, _views(data, buf, opens + 1, closes), value, ts, guided=True)


def _timestamps(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
                ) -> pa.Array:
    """The integers written in ``[starts, ends)`` (Unix ms), as Arrow's cast reads them:
    where all have the same number of digits (at most 18) and nothing else, as
    Prometheus writes its timestamps, read with numpy (a fifth of the cast's CPU);
    else by the cast, which raises ``ArrowInvalid`` for anything else."""
    width = int(ends[0] - starts[0])
    if 0 < width <= 18 and (ends - starts == width).all():
        digits = _gather(data, starts, width) - np.uint8(ord("0"))  # others wrap past 9
        if (digits <= 9).all():
            return pa.array(digits @ 10 ** np.arange(width - 1, -1, -1, dtype=np.int64))
    return pc.cast(_views(data, buf, starts, ends), pa.int64())


def _one_name(data: bytes, start: int, end: int, n: int) -> pa.DictionaryArray | None:
    """``n`` lines of the one name ``data[start:end]``; None where it is no valid
    metric name (or not UTF-8)."""
    try:
        uniq = pa.array([data[start:end].decode("utf-8")], pa.string())
    except UnicodeDecodeError:
        return None
    if not pc.all(pc.match_substring_regex(uniq, rf"^{_NAME}$")).as_py():
        return None
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), uniq)


def _names(data: bytes, buf: np.ndarray, head: np.ndarray, head_at: np.ndarray,
           starts: np.ndarray, opens: np.ndarray) -> pa.DictionaryArray | None:
    """Each line's metric name, dictionary-encoded; None where one is not valid."""
    length = opens - starts
    first = int(length[0])
    if ((head_at == starts).all() and (length == first).all()
            and (head[:, :first] == head[0, :first]).all()):
        # one name, as in an answer per metric: no per-line strings at all
        return _one_name(data, int(starts[0]), int(opens[0]), len(starts))
    enc = pc.dictionary_encode(_views(data, buf, starts, opens))
    try:
        name = pa.DictionaryArray.from_arrays(enc.indices, pc.cast(enc.dictionary, pa.string()))
    except (pa.ArrowInvalid, ValueError):
        return None
    if not pc.all(pc.match_substring_regex(name.dictionary, rf"^{_NAME}$")).as_py():
        return None
    return name


def _dedupe(chunks: list[pa.Array]) -> tuple[pa.Array, list[np.ndarray]]:
    """The distinct strings of ``chunks`` and each chunk's indices into them.

    The answers of one pull list the same series in the same order (each field's
    answer every GPU's set): a chunk equal, string for string, to an earlier one takes
    its indices (one bulk comparison), and only the others are hashed (issue 17). The
    strings and indices are those of hashing every chunk.
    """
    first: list[int] = []  # each chunk's earliest equal chunk
    for k, c in enumerate(chunks):
        same = [j for j in dict.fromkeys(first) if len(chunks[j]) == len(c)][:_SAME_MAX]
        first.append(next((j for j in same if _equal(chunks[j], c)), k))
    kept = list(dict.fromkeys(first))
    uniq, indices = _hash([chunks[j] for j in kept])
    of = dict(zip(kept, indices, strict=True))
    return uniq, [of[j] for j in first]


def _equal(a: pa.Array, b: pa.Array) -> bool:
    """Whether two string arrays of one length hold the same strings (their heads
    compared first: most unequal pairs differ there)."""
    head = min(len(a), 256)
    return (pc.all(pc.equal(a.slice(0, head), b.slice(0, head))).as_py()
            and pc.all(pc.equal(a, b)).as_py() and not a.null_count and not b.null_count)


def _hash(chunks: list[pa.Array]) -> tuple[pa.Array, list[np.ndarray]]:
    """:func:`_dedupe` by hashing: the chunks in two halves at once (Arrow releases the
    GIL), then the two dictionaries, a GPU's label set in each, merged: the label sets
    are hashed once, on both cores (issue 17)."""
    halves = [chunks[: len(chunks) // 2], chunks[len(chunks) // 2:]]
    if not halves[0]:
        halves = halves[1:]
    with ThreadPoolExecutor(max_workers=len(halves)) as ex:
        encoded = list(ex.map(lambda h: pc.dictionary_encode(pa.chunked_array(h)), halves))
    merged = pc.dictionary_encode(pa.chunked_array([e.chunk(0).dictionary for e in encoded]))
    indices = [merged.chunk(k).indices.to_numpy()[c.indices.to_numpy()]
               for k, e in enumerate(encoded) for c in e.chunks]
    return pc.cast(merged.chunk(0).dictionary, pa.string()), indices


class LabelMemo:
    """A pull's distinct label sets, kept for the next pull of the same series.

    :func:`assemble` reuses them where every line of the next pull's fast answers has,
    byte for byte, the label set the same line had (the same answers, series and order);
    anything else is read in full and kept instead. :meth:`derived` keeps one figure
    computed from a label-set array (:func:`collector.federate.parse_federate`'s reading
    of the sets) while that array stays the same. Holds the sets, two 4-byte integers
    per line and that reading: about 58 MB at 100,000 GPUs. Not for two pulls at once.
    """

    def __init__(self) -> None:
        self._uniq: pa.Array | None = None  # string
        self._views: np.ndarray | None = None  # its string_view items (16 bytes each)
        self._data: list[pa.Buffer] = []  # the buffers those views point into
        self._indices: list[np.ndarray] = []
        self._valid: np.ndarray | None = None
        self._derived: tuple | None = None  # (label sets, key, value)
        self._per_set: tuple | None = None  # (label sets, key, {name: one item per set})
        self._lengths: dict[str, np.ndarray] = {}  # selector -> its lines' set lengths
        # what was reused, how often: "sets" (a pull's), "derived" (a reading of them),
        # "lengths" (an answer's label-set lengths, to read it: :func:`scan`), "per set"
        # (label sets whose reading was the last one's: :meth:`per_set`)
        self.reused: Counter = Counter()

    def distinct(self, chunks: list[pa.Array]) -> tuple[pa.Array, list[np.ndarray], np.ndarray]:
        """The distinct strings of ``chunks``, each chunk's indices into them, and
        whether each is a valid UTF-8 label set: the kept ones where every chunk's
        strings equal them line for line, else computed (and kept)."""
        if self._same(chunks):
            self.reused["sets"] += 1
            return self._uniq, self._indices, self._valid
        uniq, indices = _dedupe(chunks)
        valid = _valid_sets(uniq)
        self._uniq, self._indices, self._valid = uniq, indices, valid
        self._views, self._data = None, []  # the last sets' views go with them
        return uniq, indices, valid

    def _same(self, chunks: list[pa.Array]) -> bool:
        """Whether each chunk's strings are the kept sets at the kept indices."""
        if self._uniq is None or len(chunks) != len(self._indices):
            return False
        if any(len(c) != len(i) for c, i in zip(chunks, self._indices, strict=True)):
            return False
        if self._views is None:  # each kept set as a string_view item, made once
            views = self._uniq.cast(pa.string_view())
            self._views = np.frombuffer(views.buffers()[1], np.dtype((np.void, 16)),
                                        count=len(views), offset=16 * views.offset)
            self._data = views.buffers()[2:]
        for c, idx in zip(chunks, self._indices, strict=True):
            expect = pa.Array.from_buffers(pa.string_view(), len(idx),
                                           [None, pa.py_buffer(self._views[idx]), *self._data])
            if c.null_count or not pc.all(pc.equal(c, expect)).as_py():
                return False
        return True

    def label_lengths(self, selector: str) -> np.ndarray | None:
        """The length of each line's label set (bytes) in ``selector``'s last answer
        read fast; None where there was none."""
        return self._lengths.get(selector)

    def keep_lengths(self, answers: Sequence[Answer]) -> None:
        """Keep the label-set lengths of ``answers`` read fast, for the next pull."""
        self._lengths = {a.selector: _view_lengths(a.lines.labels) for a in answers
                         if a.lines is not None and len(a.lines.labels)}

    def per_set(self, sets: pa.Array, key: Hashable,
                read: Callable[[pa.Array], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """``read(sets)``: arrays of one item per string of ``sets``, read only for the
        strings the last call with the same ``key`` did not have (a series added, or
        listed elsewhere); the others' items are the last call's."""
        kept = self._per_set
        pos = None
        if kept is not None and kept[1] == key and len(kept[0]) and len(sets):
            pos = pc.fill_null(pc.index_in(sets, value_set=kept[0]), -1).to_numpy()
        if pos is None or (pos < 0).all():
            values = read(sets)
        else:
            new = np.flatnonzero(pos < 0)
            got = read(sets.take(pa.array(new))) if len(new) else {}
            values = {}
            for name, old in kept[2].items():
                values[name] = old[np.maximum(pos, 0)]
                if len(new):
                    values[name][new] = got[name]
            self.reused["per set"] += len(sets) - len(new)
        self._per_set = (sets, key, values)
        return values

    def derived(self, sets: pa.Array, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, computed once while ``sets`` (compared by content) and ``key``
        stay those of the last call; only the last is kept."""
        kept = self._derived
        if kept is not None and kept[1] == key and kept[0].equals(sets):
            self.reused["derived"] += 1
            return kept[2]
        value = make()
        self._derived = (sets, key, value)
        return value


def _view_lengths(views: pa.Array) -> np.ndarray:
    """The byte length of each string of a string_view array (the views' first field)."""
    items = np.frombuffer(views.buffers()[1], np.uint32, count=4 * len(views),
                          offset=16 * views.offset)
    return items[::4].copy()


def _valid_sets(uniq: pa.Array) -> np.ndarray:
    """Per label set, whether it is a valid label set and UTF-8.

    The bytes were not decoded: a set that is not UTF-8 sends its answers to promtext,
    which reads them as the transport decoded them (U+FFFD)."""
    valid = pc.match_substring_regex(uniq, _LABELS).to_numpy(zero_copy_only=False)
    wide = np.flatnonzero(~pc.string_is_ascii(uniq).to_numpy(zero_copy_only=False))
    for i, raw in zip(wide.tolist(), uniq.take(pa.array(wide)).cast(pa.binary())
                      .to_pylist(), strict=True):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            valid[i] = False
    return valid


def assemble(answers: Sequence[Answer], counts: Counter | None = None,
             memo: LabelMemo | None = None) -> pa.Table:
    """The answers' lines as one table of :data:`collector.promtext.SCHEMA`, in answer
    order, with ``target`` the selector: the same rows promtext gives answer by answer.

    Label sets of the fast answers are deduplicated together and checked against the
    label grammar once (through ``memo``, the previous pull's, where one is given); an
    answer with a set that fails it is read by promtext (its bad lines cost themselves).
    Bad lines are added to ``counts`` as ``"line: <why>"``.
    """
    counts = Counter() if counts is None else counts
    answers = list(answers)
    fast = [i for i, a in enumerate(answers) if a.lines is not None and len(a.lines.value)]
    labels: dict[int, np.ndarray] = {}
    if fast:
        uniq, indices, valid = (memo or LabelMemo()).distinct(
            [answers[i].lines.labels for i in fast])
        for i, idx in zip(fast, indices, strict=True):
            if valid[idx].all():
                labels[i] = idx
            else:
                answers[i] = _slow(answers[i].selector, answers[i].data)
        fast = list(labels)
    if memo is not None:
        memo.reused["lengths"] += sum(a.guided for a in answers)
        memo.keep_lengths(answers)
    for a in answers:
        if a.counts:
            counts.update(a.counts)
    if fast and all(a.table is None or not a.table.num_rows for a in answers):
        return _table([answers[i] for i in fast], [labels[i] for i in fast], uniq)
    tables = [_table([a], [labels[i]], uniq) if i in labels else a.table
              for i, a in enumerate(answers)]
    tables = [t for t in tables if t is not None and t.num_rows]
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables(tables).unify_dictionaries().combine_chunks()


def _table(answers: list[Answer], label_idx: list[np.ndarray], uniq: pa.Array) -> pa.Table:
    """The fast answers' rows in one table, their label indices into ``uniq``."""
    sizes = [len(i) for i in label_idx]
    target = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(answers), dtype=np.int32), sizes)),
        pa.array([a.selector for a in answers], pa.string()))
    names = pa.chunked_array([a.lines.name for a in answers]).unify_dictionaries()
    name = pa.DictionaryArray.from_arrays(
        pa.concat_arrays([c.indices for c in names.chunks]), names.chunk(0).dictionary)
    labels = pa.DictionaryArray.from_arrays(
        pa.array(np.concatenate(label_idx).astype(np.int32)), uniq)
    return pa.table([target, name, labels,
                     pa.concat_arrays([a.lines.value for a in answers]),
                     pa.concat_arrays([a.lines.timestamp_ms for a in answers])],
                    schema=SCHEMA)
