"""A gap read back under federate keeps what a pull at each tick would have stored
(collector/catchup.py): per GPU the newest raw sample of each step, none of the step of
the newest sample already stored or before it, and the MIG rows of the samples kept.
Against a reference written plainly, on any raw samples (hypothesis)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from collector.catchup import newest_seen, one_per_step

T0 = datetime(2026, 11, 2, 12, 0)

_gpu = st.tuples(st.sampled_from(["gpu001", "gpu002", "n-3"]), st.integers(0, 3))
_raw = st.lists(st.tuples(_gpu, st.integers(0, 900_000_000)), max_size=60,
                unique_by=lambda r: r)


def _samples(rows) -> pa.Table:
    return pa.table({
        "ts": pa.array([T0 + timedelta(microseconds=t) for (_, _), t in rows],
                       pa.timestamp("us")),
        "node": pa.array([n for (n, _), _ in rows], pa.string()),
        "gpu_index": pa.array([g for (_, g), _ in rows], pa.int16()),
        "temp_c": pa.array([float(i) for i in range(len(rows))], pa.float32()),
    })


def _step(t: datetime, step_us: int) -> int:
    return -(-((t - datetime(1970, 1, 1)) // timedelta(microseconds=1)) // step_us)


def _reference(samples: pa.Table, step_s: float, seen: dict) -> list[dict]:
    step_us = max(1, round(step_s * 1e6))
    best: dict = {}
    for r in samples.to_pylist():
        gpu, k = (r["node"], r["gpu_index"]), _step(r["ts"], step_us)
        if gpu in seen and k <= _step(seen[gpu], step_us):
            continue
        if (gpu, k) not in best or r["ts"] > best[(gpu, k)]["ts"]:
            best[(gpu, k)] = r
    return sorted(best.values(), key=lambda r: (r["node"], r["gpu_index"], r["ts"]))


@given(rows=_raw, step_s=st.sampled_from([0.5, 1.0, 7.5, 15.0, 60.0, 1 / 3]),
       seen=st.dictionaries(_gpu, st.integers(-60_000_000, 900_000_000), max_size=6),
       mig=st.booleans())
def test_one_per_step_is_the_newest_sample_of_each_step_after_the_stored(
        rows, step_s, seen, mig):
    samples = _samples(rows)
    stored = {gpu: T0 + timedelta(microseconds=t) for gpu, t in seen.items()}
    seen_table = pa.table({
        "node": pa.array([n for n, _ in stored], pa.string()),
        "gpu_index": pa.array([g for _, g in stored], pa.int16()),
        "ts": pa.array(list(stored.values()), pa.timestamp("us"))}) if stored else None
    instances = pa.table({  # two MIG instances a sample, where asked
        "ts": pa.concat_arrays([samples["ts"].combine_chunks()] * 2),
        "node": pa.concat_arrays([samples["node"].combine_chunks()] * 2),
        "gpu_index": pa.concat_arrays([samples["gpu_index"].combine_chunks()] * 2),
        "gpu_i_id": pa.array([1] * len(rows) + [2] * len(rows), pa.int32()),
    }) if mig else pa.table({"ts": pa.array([], pa.timestamp("us")),
                             "node": pa.array([], pa.string()),
                             "gpu_index": pa.array([], pa.int16()),
                             "gpu_i_id": pa.array([], pa.int32())})
    kept, kept_mig = one_per_step(samples, instances, step_s, seen_table)
    got = sorted(kept.to_pylist(), key=lambda r: (r["node"], r["gpu_index"], r["ts"]))
    assert got == _reference(samples, step_s, stored)
    keys = {(r["ts"], r["node"], r["gpu_index"]) for r in got}
    assert sorted((r["ts"], r["node"], r["gpu_index"], r["gpu_i_id"])
                  for r in kept_mig.to_pylist()) == sorted(
        (ts, n, g, i) for ts, n, g in keys for i in ((1, 2) if mig else ()))
    assert kept.schema == samples.schema and kept_mig.schema == instances.schema


@given(a=_raw, b=_raw)
def test_newest_seen_is_each_gpus_newest_time(a, b):
    first = newest_seen(None, _samples(a)) if a else None
    both = newest_seen(first, _samples(b)) if b else first
    want: dict = {}
    for gpu, t in a + b:
        want[gpu] = max(want.get(gpu, t), t)
    got = {} if both is None else {(r["node"], r["gpu_index"]): r["ts"]
                                   for r in both.to_pylist()}
    assert got == {gpu: T0 + timedelta(microseconds=t) for gpu, t in want.items()}
