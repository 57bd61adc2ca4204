"""squeue/sacct JSON of Slurm 22.05 and current Slurm -> jobs, runs, allocations."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.slurm import SlurmParseError, parse_sacct, parse_squeue
from warehouse.schema import SCHEMAS

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
NOW = datetime(2026, 11, 2, 12, 0)
VERSIONS = ("22.05", "24.05")


def doc(kind: str, version: str) -> str:
    return (FIXTURES / f"{kind}_{version}.json").read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue(version):
    b = parse_squeue(doc("squeue", version), NOW)
    for kind in ("jobs", "runs", "allocations"):
        assert getattr(b, kind).schema.equals(SCHEMAS[kind])
    raw = json.loads(doc("squeue", version))["jobs"]
    jobs = {j["job_id"]: j for j in b.jobs.to_pylist()}
    assert set(jobs) == {str(j["job_id"]) for j in raw}
    running = {j for j, v in jobs.items() if v["state"] == "RUNNING"}
    assert {r["job_id"] for r in b.runs.to_pylist()} == running
    for r in b.runs.to_pylist():  # current run = restart_cnt
        assert r["run_index"] == jobs[r["job_id"]]["restarts"] and r["end_ts"] is None
    for j in jobs.values():
        if j["state"] == "PENDING":  # squeue's start_time is only an estimate
            assert j["start_ts"] is None and j["end_ts"] is None
    # Allocated GPUs per run equal the GPU count and sit on the run's nodes.
    allocs = b.allocations.to_pylist()
    for r in b.runs.to_pylist():
        mine = [a for a in allocs if a["job_id"] == r["job_id"]]
        assert len(mine) == r["gpus"]
        assert {a["start_ts"] for a in mine} == {r["start_ts"]}
    assert sorted(a["gpu_index"] for a in allocs if a["job_id"] == "4102") == [0, 1, 4, 5]
    assert {a["node"] for a in allocs if a["job_id"] == "4101"} == {"gpu001", "gpu002"}


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct_runs_are_ordered_by_start(version):
    b = parse_sacct(doc("sacct", version))
    runs = b.runs.to_pylist()
    by_job: dict[str, list[dict]] = {}
    for r in runs:
        by_job.setdefault(r["job_id"], []).append(r)
    for job_runs in by_job.values():
        assert [r["run_index"] for r in job_runs] == list(range(len(job_runs)))
        starts = [r["start_ts"] for r in job_runs]
        assert starts == sorted(starts)
    assert [r["state"] for r in by_job["4090"]] == ["REQUEUED", "FAILED", "COMPLETED"]
    jobs = {j["job_id"]: j for j in b.jobs.to_pylist()}
    assert jobs["4090"]["restarts"] == 2 and jobs["4090"]["state"] == "COMPLETED"
    assert jobs["4090"]["start_ts"] == by_job["4090"][0]["start_ts"]
    assert jobs["4090"]["submit_ts"] < jobs["4090"]["start_ts"]
    assert "4091" not in by_job and jobs["4091"]["end_ts"] is not None  # cancelled pending
    assert "4103" not in by_job and jobs["4103"]["end_ts"] is None
    killed = by_job["4092"][0]
    assert (killed["exit_code"], killed["signal"], killed["reason"]) == (0, 9, "OutOfMemory")
    assert by_job["4090"][1]["exit_code"] == 1
    assert by_job["4102"][1]["end_ts"] is None and by_job["4102"][1]["exit_code"] is None
    assert all(r["gpus"] == jobs[r["job_id"]]["gpus"] for r in runs)
    assert b.allocations.num_rows == 0  # sacct has no GPU indices


def test_sacct_whole_node_allocations_with_gpus_per_node():
    b = parse_sacct(doc("sacct", "24.05"), gpus_per_node=8)
    runs = b.runs.to_pylist()
    whole = [r for r in runs if r["gpus"] % 8 == 0]
    assert b.allocations.num_rows == sum(r["gpus"] for r in whole)
    assert not any(a["job_id"] == "4102" for a in b.allocations.to_pylist())  # 4 of 8


@pytest.mark.parametrize("kind", ["squeue", "sacct"])
def test_both_slurm_generations_parse_to_the_same_tables(kind):
    def parse(version):
        d = doc(kind, version)
        return parse_squeue(d, NOW) if kind == "squeue" else parse_sacct(d, gpus_per_node=8)

    old, new = parse("22.05"), parse("24.05")
    for table in ("jobs", "runs", "allocations"):
        assert getattr(old, table).equals(getattr(new, table)), table


def test_times_are_naive_utc():
    b = parse_sacct(doc("sacct", "24.05"))
    start = next(j["start_ts"] for j in b.jobs.to_pylist() if j["job_id"] == "4090")
    first = min(j["time"]["start"] for j in json.loads(doc("sacct", "24.05"))["jobs"]
                if j["job_id"] == 4090)
    assert start.tzinfo is None
    assert start == datetime.fromtimestamp(first, UTC).replace(tzinfo=None)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("{not json", "not JSON"),
        ("[]", "JSON object"),
        ('{"meta": {}}', "no 'jobs' list"),
        ('{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}',
         "Unable to contact"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_bad_documents_raise_a_clear_error(bad, needle):
    with pytest.raises(SlurmParseError) as info:
        parse_squeue(bad, NOW)
    assert needle in str(info.value)


GOOD = {"job_id": 8, "job_state": "RUNNING", "start_time": 1762080000, "nodes": "n1",
        "gres_detail": ["gpu:2(IDX:0-1)"]}


@pytest.mark.parametrize(
    ("bad", "reason", "needle"),
    [
        ({"name": "x"}, "squeue.job_id", "jobs[1]: no job_id"),
        ("not a record", "squeue.record", "jobs[1]: not a job record"),
        ({"job_id": 7, "job_state": 3}, "squeue.job_state", "job 7: job_state"),
        ({"job_id": 7, "job_state": "RUNNING", "start_time": "soon"}, "squeue.start_time",
         "job 7: start_time"),
        ({"job_id": 7, "job_state": "RUNNING", "start_time": 1e12}, "squeue.start_time",
         "not a plausible time"),
        ({"job_id": 7, "job_state": "RUNNING", "restart_cnt": -3}, "squeue.restart_cnt",
         "outside the plausible range"),
    ],
)
def test_a_bad_record_costs_that_record(bad, reason, needle):
    b = parse_squeue(json.dumps({"jobs": [GOOD, bad, GOOD | {"job_id": 9}]}), NOW)
    assert b.jobs["job_id"].to_pylist() == ["8", "9"]
    assert b.allocations.num_rows == 4
    assert b.dropped == {reason: 1}
    assert needle in b.problems[0]


@pytest.mark.parametrize(
    ("bad", "reason", "field", "kept"),
    [
        ({"node_count": -2}, "squeue.node_count", "nodes", None),
        ({"tres_per_node": "gres/gpu:-8"}, "squeue.gpus", "gpus", None),
        ({"submit_time": 1e12}, "squeue.submit_time", "submit_ts", None),
        ({"exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 4096}},
          "job_state": "FAILED", "end_time": 1762080100}, "squeue.exit_code.return_code",
         "exit_code", None),
    ],
)
def test_a_bad_value_costs_that_value(bad, reason, field, kept):
    rec = {"job_id": 7, "job_state": "RUNNING", "start_time": 1762080000, "nodes": "n1",
           "name": "ok"} | bad
    b = parse_squeue(json.dumps({"jobs": [rec]}), NOW)
    assert b.dropped == {reason: 1}
    row = (b.runs if field == "exit_code" else b.jobs).to_pylist()[0]
    assert row[field] is kept and row.get("name", "ok") == "ok"


@pytest.mark.parametrize(
    ("detail", "nodes", "expected"),
    [
        (["gpu:1(IDX:0)"], "n[1-2]", "2 nodes"),  # cannot pair
        (["gpu:30001(IDX:0-30000)"], "n1", "beyond the node's 128 GPUs"),
        (["gpu:4(IDX:0-1000000000)"], "n1", "beyond the node's 128 GPUs"),
        (["gpu:4(IDX:3-1)"], "n1", "bad GPU index range"),
    ],
)
def test_absurd_gres_detail_costs_the_allocations_only(detail, nodes, expected):
    rec = {"job_id": 7, "job_state": "RUNNING", "start_time": 1762080000, "nodes": nodes,
           "gres_detail": detail, "tres_per_node": "gres/gpu:4", "node_count": 1}
    b = parse_squeue(json.dumps({"jobs": [rec]}), NOW)
    assert b.allocations.num_rows == 0 and b.runs.num_rows == 1
    assert b.dropped == {"squeue.gres_detail": 1} and expected in b.problems[0]
    assert b.runs.to_pylist()[0]["gpus"] == 4  # from tres_per_node


def test_gres_detail_bound_by_the_nodes_gpus():
    rec = {"job_id": 7, "job_state": "RUNNING", "start_time": 1762080000, "nodes": "n1",
           "gres_detail": ["gpu:2(IDX:7-8)"]}
    doc = json.dumps({"jobs": [rec]})
    assert parse_squeue(doc, NOW).allocations.num_rows == 2
    b = parse_squeue(doc, NOW, gpus_per_node=8)
    assert b.allocations.num_rows == 0 and b.dropped == {"squeue.gres_detail": 1}
