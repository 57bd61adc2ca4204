"""Renderers speak the real formats: parse(render(x)) == x for generated tables."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.dcgm import parse_scrapes
from collector.slurm import parse_sacct, parse_squeue
from collector.wire import render_dcgm, render_sacct, render_squeue
from warehouse.schema import SCHEMAS

TS = datetime(2026, 11, 2, 12, 0)
FLOAT_TOL = {"sm_active_pct": 1e-3, "tensor_active_pct": 1e-3, "dram_active_pct": 1e-3, "power_w": 1e-5, "energy_j": 1e-3}


def samples(n_nodes: int = 6, seed: int = 1, nulls: bool = True) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = n_nodes * 8
    def ints(lo, hi):
        return rng.integers(lo, hi, n).astype(np.float32)
    cols = {
        "ts": [TS] * n,
        "node": np.repeat([f"gpu{i:03d}" for i in range(n_nodes)], 8),
        "gpu_index": np.tile(np.arange(8, dtype=np.int16), n_nodes),
        "gpu_uuid": [f"GPU-{seed:04x}-{i:08x}" for i in range(n)],
        "interval_s": np.full(n, 15.0, np.float32),
        "util_pct": ints(0, 101), "mem_util_pct": ints(0, 101),
        "sm_active_pct": (rng.random(n) * 100).astype(np.float32),
        "mem_used_mib": ints(0, 81560), "power_w": (rng.random(n) * 700).astype(np.float32),
        "energy_j": np.round(rng.random(n) * 1e9, 3), "temp_c": ints(25, 95),
        "mem_temp_c": ints(25, 95), "sm_clock_mhz": ints(210, 1981),
        "throttle_thermal": rng.random(n) < 0.2, "throttle_power": rng.random(n) < 0.2,
        "ecc_sbe_volatile": rng.integers(0, 9, n), "ecc_dbe_volatile": rng.integers(0, 2, n),
        "xid_last": rng.choice([0, 0, 13, 48, 79], n).astype(np.int32),
        "tensor_active_pct": np.round(rng.random(n) * 60, 1).astype(np.float32),
        "dram_active_pct": np.round(rng.random(n) * 80, 1).astype(np.float32),
    }
    t = pa.table(cols, schema=SCHEMAS["samples"])
    if nulls:  # knock out random cells, both throttle flags together
        for name in ["util_pct", "sm_active_pct", "mem_temp_c", "energy_j", "xid_last",
                     "tensor_active_pct", "dram_active_pct"]:
            i = t.schema.get_field_index(name)
            mask = rng.random(n) < 0.2
            t = t.set_column(i, name, pa.array(t[name].to_numpy(), t.schema.field(name).type,
                                                mask=mask))
        mask = rng.random(n) < 0.2
        for name in ["throttle_thermal", "throttle_power"]:
            i = t.schema.get_field_index(name)
            t = t.set_column(i, name, pa.array(t[name].to_numpy(), pa.bool_(), mask=mask))
    return t


def test_dcgm_round_trip():
    original = samples()
    texts = render_dcgm(original)
    assert set(texts) == set(original["node"].to_pylist())
    back = parse_scrapes(texts, TS)
    assert back.errors == {}
    assert back.samples.schema.equals(SCHEMAS["samples"])
    key = [("node", "ascending"), ("gpu_index", "ascending")]
    a, b = original.sort_by(key).to_pylist(), back.samples.sort_by(key).to_pylist()
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for col, v in x.items():
            w = y[col]
            if v is None or w is None or col not in FLOAT_TOL:
                assert v == w or (v is not None and w is not None and abs(v - w) < 1e-3), col
            else:
                assert abs(v - w) <= FLOAT_TOL[col] * max(1.0, abs(v)), col


def test_dcgm_text_is_what_the_exporter_prints():
    t = samples(n_nodes=1, nulls=False)
    text = render_dcgm(t, models={t["gpu_uuid"][0].as_py(): 'Odd "model"'})["gpu000"]
    fams = list(text_string_to_metric_families(text))
    assert fams and all(f.documentation for f in fams)
    s = fams[0].samples[0]
    assert set(s.labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                             "DCGM_FI_DRIVER_VERSION"}
    assert s.labels["device"] == "nvidia0" and s.labels["modelName"] == 'Odd "model"'
    # A NULL cell omits its line rather than printing a made-up number.
    nulled = t.set_column(t.schema.get_field_index("temp_c"), "temp_c",
                          pa.nulls(t.num_rows, pa.float32()))
    assert "DCGM_FI_DEV_GPU_TEMP" not in render_dcgm(nulled)["gpu000"]


def scheduler(seed: int = 3):
    """Generated jobs: finished, requeued, running, pending-after-requeue, pending."""
    rng = np.random.default_rng(seed)
    t0 = datetime(2026, 11, 1)
    jobs, runs, allocs = [], [], []
    nodes = [f"gpu{i:03d}" for i in range(40)]
    for k in range(30):
        jid = str(5000 + k)
        submit = t0 + timedelta(minutes=int(rng.integers(0, 600)))
        n_nodes = int(rng.integers(1, 4))
        n_runs = int(rng.integers(0, 4))
        start = submit + timedelta(minutes=int(rng.integers(1, 60)))
        job_state, job_end = "PENDING", None
        for ri in range(n_runs):
            last = ri == n_runs - 1
            dur = timedelta(minutes=int(rng.integers(5, 300)))
            open_ended = last and rng.random() < 0.4
            end = None if open_ended else start + dur
            state = ("RUNNING" if open_ended else
                     rng.choice(["COMPLETED", "FAILED"]) if last else
                     rng.choice(["REQUEUED", "NODE_FAIL"]))
            code = None if end is None else (0 if state != "FAILED" else int(rng.integers(1, 3)))
            signal = None if end is None else (9 if state == "NODE_FAIL" else 0)
            picked = list(rng.choice(nodes, n_nodes, replace=False))
            gpus = 8 * n_nodes
            runs.append({"job_id": jid, "run_index": ri, "start_ts": start, "end_ts": end,
                         "state": str(state), "exit_code": code, "signal": signal,
                         "reason": None, "failed_node": None, "gpus": gpus,
                         "nodelist": None})
            for node in picked:
                for g in range(8):
                    allocs.append({"job_id": jid, "run_index": ri, "node": str(node),
                                   "gpu_index": g, "start_ts": start, "end_ts": end})
            job_state, job_end = str(state), (end if last and state != "RUNNING" else None)
            if end is not None:
                start = end + timedelta(minutes=int(rng.integers(1, 30)))
        first = runs[-n_runs]["start_ts"] if n_runs else None
        jobs.append({"job_id": jid, "name": f"job-{k}", "user_name": f"u{k % 4}",
                     "account": "llm", "partition": "gpu", "job_type": None,
                     "state": job_state, "submit_ts": submit, "start_ts": first,
                     "end_ts": job_end, "gpus": 8 * n_nodes, "nodes": n_nodes,
                     "restarts": max(n_runs - 1, 0)})

    def table(kind, rows):
        return pa.Table.from_pylist(rows, schema=SCHEMAS[kind])

    return table("jobs", jobs), table("runs", runs), table("allocations", allocs)


def rows(t: pa.Table, drop=()) -> list[dict]:
    out = [{k: v for k, v in r.items() if k not in drop} for r in t.to_pylist()]
    return sorted(out, key=lambda r: tuple(str(r[k]) for k in sorted(r)))


def test_sacct_round_trip():
    jobs, runs, allocs = scheduler()
    b = parse_sacct(render_sacct(jobs, runs, allocs), gpus_per_node=8)
    # sacct keeps no failure node or job type; nodelists come back in host-list form.
    assert rows(b.runs, drop=("nodelist",)) == rows(runs, drop=("nodelist",))
    assert rows(b.jobs) == rows(jobs)
    assert rows(b.allocations) == rows(allocs)


@pytest.mark.parametrize("hours", [0, 4, 9, 15, 30])
def test_squeue_round_trip(hours):
    jobs, runs, allocs = scheduler()
    now = datetime(2026, 11, 1) + timedelta(hours=hours)
    b = parse_squeue(render_squeue(jobs, runs, allocs, now), now)
    # Expected: what is queued or running at `now`, derived from the tables directly.
    live = [r for r in runs.to_pylist()
            if r["start_ts"] <= now and (r["end_ts"] is None or r["end_ts"] > now)]
    got_runs = {(r["job_id"], r["run_index"]): r for r in b.runs.to_pylist()}
    assert set(got_runs) == {(r["job_id"], r["run_index"]) for r in live}
    for r in live:
        g = got_runs[(r["job_id"], r["run_index"])]
        assert (g["start_ts"], g["end_ts"], g["gpus"]) == (r["start_ts"], None, r["gpus"])
    live_keys = {(r["job_id"], r["run_index"]) for r in live}
    want = [dict(a, end_ts=None) for a in allocs.to_pylist()
            if (a["job_id"], a["run_index"]) in live_keys]
    assert rows(b.allocations) == rows(pa.Table.from_pylist(want, schema=SCHEMAS["allocations"]))
    states = {j["job_id"]: j for j in b.jobs.to_pylist()}
    for j in jobs.to_pylist():
        if j["job_id"] in {r["job_id"] for r in live}:
            assert states[j["job_id"]]["state"] == "RUNNING"
        elif j["submit_ts"] > now or (j["end_ts"] is not None and j["end_ts"] <= now):
            assert j["job_id"] not in states
    for j in states.values():
        assert j["state"] in ("RUNNING", "PENDING") and j["end_ts"] is None
