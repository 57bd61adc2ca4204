"""Real squeue/sacct JSON of Slurm 23.02 to 25.11 (data_parser v0.0.39-v0.0.44).

The captures (tests/fixtures/slurm/real/README.md) hold, per version, the same ten kinds
of job: completed, failed, timeout, a pending GPU job, and GPU jobs requested per node, per socket,
per task, by type, with two types, and over two nodes.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from collector.slurm import parse_sacct, parse_squeue

REAL = Path(__file__).parent / "fixtures" / "slurm" / "real"
NOW = datetime(2026, 11, 2, 12, 0)
VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")
CASES = ("completed", "failed", "timeout", "pending", "per-node", "per-socket", "per-task",
         "type", "multi-types", "multi-nodes")


def by_case(batch, kind: str) -> dict[str, dict]:
    """Rows by case (sacct's captures lack some cases at the end: zip stops there)."""
    rows = {r["job_id"]: r for r in getattr(batch, kind).to_pylist()}
    return {case: rows.get(jid) for case, jid in zip(CASES, batch.jobs["job_id"].to_pylist(),
                                                      strict=False)}


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_of_every_version(version):
    b = parse_squeue((REAL / f"squeue_{version}.json").read_bytes(), NOW)
    assert b.dropped == {}
    runs, jobs = by_case(b, "runs"), by_case(b, "jobs")
    assert (runs["completed"]["exit_code"], runs["completed"]["signal"]) == (0, None)
    assert (runs["failed"]["exit_code"], runs["failed"]["state"]) == (1, "FAILED")
    # squeue (slurmctld) knows the timeout's signal: SIGTERM
    assert (runs["timeout"]["exit_code"], runs["timeout"]["signal"]) == (None, 15)
    pending = {"v0.0.40": 6, "v0.0.42": 6}.get(version, 4)  # tres_per_job gres/gpu:N
    assert runs["pending"] is None and jobs["pending"]["gpus"] == pending
    # GPU counts where tres_alloc_str has no gres/gpu: gres_detail, else tres_per_*.
    two_types = version in ("v0.0.40", "v0.0.42")  # clusters with h100 and h200 GPUs
    expected = {"per-node": 2, "per-socket": 2, "per-task": 4, "type": 1,
                "multi-types": 2 if two_types else 1, "multi-nodes": 12 if two_types else 8}
    assert {c: runs[c]["gpus"] for c in expected} == expected
    allocs = b.allocations.to_pylist()
    for case, n in expected.items():
        mine = [a for a in allocs if a["job_id"] == runs[case]["job_id"]]
        assert len(mine) == n, case
    nodes = {a["node"] for a in allocs if a["job_id"] == runs["multi-nodes"]["job_id"]}
    assert len(nodes) == 2


def test_squeue_23_02_wraps_exit_codes_as_numbers():
    b = parse_squeue((REAL / "squeue_v0.0.39.json").read_text(), NOW)
    assert b.dropped == {}
    (run,) = b.runs.to_pylist()
    assert (run["job_id"], run["state"], run["exit_code"], run["signal"]) == (
        "52173767", "COMPLETED", 0, None)
    held = {j["job_id"]: j for j in b.jobs.to_pylist() if j["state"] == "PENDING"}
    assert set(held) == {"52175550", "52410472"}
    assert all(j["restarts"] == 1 and j["start_ts"] is None for j in held.values())


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct_of_every_version(version):
    b = parse_sacct((REAL / f"sacct_{version}.json").read_text(), now=NOW)
    assert b.dropped == {}
    runs = by_case(b, "runs")
    assert (runs["completed"]["exit_code"], runs["completed"]["signal"]) == (0, None)
    assert (runs["failed"]["exit_code"], runs["failed"]["state"]) == (1, "FAILED")
    # The job level says SUCCESS/0; the batch step holds SIGTERM.
    timeout = runs["timeout"]
    assert (timeout["state"], timeout["exit_code"], timeout["signal"]) == ("TIMEOUT", None, 15)
    assert timeout["reason"] is None
