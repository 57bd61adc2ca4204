"""The hand-built placement cluster of tests/test_placement.py (its numbers are worked out
there): 8 nodes of 4 GPUs, two nodes per rack, two racks per zone.

    zone A: r1 (n1, n2)  r2 (n3, n4)      zone B: r3 (n5, n6)  r4 (n7, n8)

Jobs (T = Monday 2026-11-02 00:00, window T to T + 4 h, now T + 4 h):
- J1: 8 GPUs on n1, n2 (one rack) from T to T + 4 h;
- J2: 8 GPUs on n3 (r2, zone A) and n5 (r3, zone B) from T + 1 h to T + 3 h;
- J3: 2 GPUs of n4, from T, still running;
- P: 14 GPUs, submitted T + 30 min, started T + 3 h 30 min (no allocation in the window).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from warehouse.placement_runs import MARKER_KEYS

T = datetime(2026, 11, 2)
H = timedelta(hours=1)
NOW = T + 4 * H


def seed_placement(wh) -> None:
    racks = ["r1", "r2", "r3", "r4"]
    wh.ingest("racks", pd.DataFrame({"rack": racks, "zone": ["A", "A", "B", "B"],
                                     "row": [1, 1, 2, 2], "x": [0.0, 1.0, 0.0, 1.0],
                                     "y": [0.0, 0.0, 2.0, 2.0]})).result()
    wh.ingest("nodes", pd.DataFrame({"node": [f"n{i}" for i in range(1, 9)],
                                     "rack": [racks[(i - 1) // 2] for i in range(1, 9)],
                                     "partition": "train", "gpus": 4})).result()
    jobs = [("J1", 8, T, T, T + 4 * H), ("J2", 8, T + H, T + H, T + 3 * H),
            ("J3", 2, T, T, None), ("P", 14, T + 0.5 * H, T + 3.5 * H, None)]
    wh.ingest("jobs", pd.DataFrame([
        {"job_id": j, "name": f"job-{j}", "user_name": "ann", "partition": "train",
         "gpus": g, "submit_ts": s, "start_ts": b, "end_ts": e,
         "state": "COMPLETED" if e else "RUNNING"} for j, g, s, b, e in jobs])).result()
    allocs = []
    for job, nodes, idx, start, end in [("J1", ["n1", "n2"], range(4), T, T + 4 * H),
                                        ("J2", ["n3", "n5"], range(4), T + H, T + 3 * H),
                                        ("J3", ["n4"], range(2), T, None)]:
        allocs += [{"job_id": job, "run_index": 0, "node": n, "gpu_index": i,
                    "start_ts": start, "end_ts": end} for n in nodes for i in idx]
    wh.ingest("allocations", pd.DataFrame(allocs)).result()


class WriteBetween:
    """A reader cursor whose cursors commit ``change`` on the writer after their first
    read (not BEGIN or SET: a topology change landing between two reads), whether the
    read is ``execute`` or ``sql``."""

    def __init__(self, wh, change, cur=None):
        self.wh, self.change, self.cur, self.seen = wh, change, cur or wh.reader(), 0

    def cursor(self):
        return WriteBetween(self.wh, self.change, self.cur.cursor())

    def close(self):
        self.cur.close()

    def _read(self, statement, run):
        out = run()
        if not statement.startswith(("BEGIN", "SET")):
            self.seen += 1
            if self.seen == 1:
                self.wh.write(lambda con: con.execute(self.change)).result()
        return out

    def execute(self, statement, params=None):
        return self._read(statement, lambda: self.cur.execute(statement, params))

    def sql(self, statement, params=None):
        return self._read(statement, lambda: self.cur.sql(statement, params=params))


def scored(df: pd.DataFrame) -> pd.DataFrame:
    """The score as the page computed it in pandas before issue 17 moved it into
    warehouse/placement.py's SQL (the reference): extra racks and zones, score, misplaced,
    worst first, then most GPU-hours, ties in the frame's order."""
    df = df.copy()
    df["extra_racks"] = (df["racks"] - df["min_racks"]).clip(lower=0).astype(int)
    df["extra_zones"] = (df["zones"] - df["min_zones"]).clip(lower=0).astype(int)
    df["score"] = ((df["min_racks"] + df["min_zones"])
                   / (df["racks"] + df["zones"]).clip(lower=1)).clip(upper=1.0)
    df["misplaced"] = (df["extra_racks"] > 0) | (df["extra_zones"] > 0)
    return df.sort_values(["score", "gpu_hours"], ascending=[True, False], kind="stable",
                          ignore_index=True)


def placed_reference(runs: pd.DataFrame, rows: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """What ``placement_runs.placed_runs`` gives, computed as the page did before issue 17
    from ``job_placement(min_nodes=2, detail=False)``'s frame ``runs``: the chart's
    markers (grouped in pandas, the costliest run's job named, the first by id among
    ties), the first ``rows`` misplaced runs, and the summary."""
    d = runs.assign(job_id=runs["job_id"].astype(str))
    groups = d.groupby(MARKER_KEYS, sort=True)
    costliest = d[d["gpu_hours"] == groups["gpu_hours"].transform("max")]
    named = costliest.groupby(MARKER_KEYS, sort=True)["job_id"].min()
    d["score_gpu_hours"] = d["score"] * d["gpu_hours"]
    markers = d.groupby(MARKER_KEYS, sort=True).agg(
        runs=("job_id", "size"), gpu_hours=("gpu_hours", "sum"),
        score_gpu_hours=("score_gpu_hours", "sum")).reset_index()
    markers["job_id"] = named.to_numpy()
    bad = runs[runs["misplaced"]]
    gh = float(runs["gpu_hours"].sum())
    summary = {"runs": len(runs), "misplaced_runs": len(bad), "gpu_hours": gh,
               "misplaced_gpu_hours": float(bad["gpu_hours"].sum()),
               "mean_score": float((runs["score"] * runs["gpu_hours"]).sum() / gh)
               if gh > 0 else float("nan")}
    return markers, bad.head(rows).reset_index(drop=True), summary


def assert_placed(got, runs: pd.DataFrame, rows: int) -> None:
    """``got`` (a ``placed_runs`` answer) is :func:`placed_reference` of ``runs``
    (``job_placement``'s frame, with or without the names of ``detail=True``)."""
    markers, worst, summary = placed_reference(runs, rows)
    worst = worst.drop(columns=["name", "user_name", "job_type", "rack_names"],
                       errors="ignore")
    pd.testing.assert_frame_equal(got.markers, markers, check_dtype=False,
                                  check_exact=False, rtol=1e-12)
    pd.testing.assert_frame_equal(got.worst, worst, check_dtype=False)
    assert got.summary == pytest.approx(summary, rel=1e-12, nan_ok=True)
