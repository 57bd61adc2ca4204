"""GPU counts from Slurm's TRES/GRES forms, and how a run ended (the exit-code rule)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from collector.slurm import parse_sacct, parse_squeue
from collector.slurm_fields import Drops, SlurmParseError
from collector.slurm_gres import gpu_count, gpus_from_tres_list, node_holdings
from collector.slurm_source import SlurmSource
from tests.support.runs import rows, run_refresh
from warehouse import Warehouse

REAL = Path(__file__).parent / "fixtures" / "slurm" / "real"
NOW = datetime(2026, 11, 2, 12, 0)


@pytest.mark.parametrize(
    ("spec", "gpus"),
    [
        ("cpu=8,mem=64G,node=1,billing=8", None),
        ("cpu=8,gres/gpu=4", 4),
        ("gres/gpu=8,gres/gpu:h100=8", 8),  # the untyped total wins
        ("gres/gpu:4", 4),
        ("gres/gpu:h100:1,gres/gpu:h200:1", 2),
        ("gres:gpu:4", 4),
        ("gpu:a100:2(S:0-1)", 2),
        ("gpu:a100:2(S:0,1),gpu:v100:1", 3),
        ("gres/gpu=2", 2),
        ("gres/gpu", 1),
        ("gres/gpu:h100", 1),
        ("gres/shard:4,gres/mps:100,gres/vgpu:2", None),  # slices of GPUs, not GPUs
        ("gres/gpu:1,gres/shard:3", 1),
        ("", None),
    ],
)
def test_gpu_count(spec, gpus):
    assert gpu_count(spec, "t") == gpus


@pytest.mark.parametrize("spec", ["gres/gpu:-8", "gres/gpu=-1", "gres/gpu=2000000",
                                  "gres/gpu:h100:99999999999999999999"])
def test_impossible_gpu_counts_are_refused(spec):
    with pytest.raises(SlurmParseError) as info:
        gpu_count(spec, "squeue job 7: tres_per_node")
    assert info.value.reason == "gpus" and "squeue job 7: tres_per_node" in str(info.value)


def test_negative_gpu_count_from_sacct_is_null_and_counted():
    rec = _sacct_record("v0.0.44", 0)
    rec["tres"]["allocated"].append({"type": "gres", "name": "gpu", "id": 1001, "count": -4})
    b = parse_sacct({"jobs": [rec]}, now=NOW)
    assert b.runs["gpus"].to_pylist() == [None] and b.dropped == {"sacct.tres": 1}


def test_sacct_tres_list_refuses_negative_counts():
    items = [{"type": "gres", "name": "gpu:h100", "count": 2},
             {"type": "gres", "name": "gpu:h200", "count": 1},
             {"type": "gres", "name": "shard", "count": 8},
             {"type": "energy", "name": "", "count": -2}]
    assert gpus_from_tres_list(items, "t") == 3
    with pytest.raises(SlurmParseError):
        gpus_from_tres_list([{"type": "gres", "name": "gpu", "count": -4}], "sacct job 1")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("gpu:4(IDX:0-3)", [0, 1, 2, 3]),
        ("gpu:h100:8(IDX:0-7)", list(range(8))),
        ("gpu(IDX:0,2)", [0, 2]),
        ("gpu:h100:4(IDX:0-1,4-5)", [0, 1, 4, 5]),
        ("gpu:a100:1(IDX:0),gpu:v100:1(IDX:2),shard:3(IDX:0)", [0, 2]),
        ("gpu:h100:2(IDX:0-1),gpu:h200:0(IDX:)", [0, 1]),
        ("gpu:0(IDX:N/A)", []),
        ("gpu:1", []),
        ("mps:100(IDX:0)", []),
    ],
)
def test_gres_detail(entry, expected):
    # the GPUs held whole (a shared GRES holds a GPU without a GPU device)
    assert [h.gpu_index for h in node_holdings(entry) if h.devices] == expected


def test_gres_detail_never_expands_past_the_node():
    with pytest.raises(SlurmParseError, match="beyond the node's 8 GPUs"):
        node_holdings("gpu:4(IDX:0-1000000000)", max_index=8)
    with pytest.raises(SlurmParseError, match="beyond"):
        node_holdings("gpu:1(IDX:999999999999)")


def test_per_task_and_per_socket_requests_of_pending_jobs():
    jobs = [{"job_id": 1, "job_state": "PENDING", "tres_per_task": "gres/gpu=2",
             "tasks": {"set": True, "number": 4}},
            {"job_id": 2, "job_state": "PENDING", "tres_per_socket": "gres/gpu:2",
             "node_count": 3},
            {"job_id": 3, "job_state": "PENDING", "tres_per_node": "gres/gpu:a100:2(S:0-1)",
             "node_count": 2}]
    b = parse_squeue(json.dumps({"jobs": jobs}), NOW)
    assert b.jobs["gpus"].to_pylist() == [8, 6, 4]


# ----------------------------------------------------------------------- exit codes


def _sacct_record(version: str, case: int) -> dict:
    return json.loads((REAL / f"sacct_{version}.json").read_text())["jobs"][case]


def test_completed_job_whose_srun_step_failed_is_not_a_clean_exit():
    """A real 25.11 COMPLETED record, given the srun step that failed inside it."""
    rec = _sacct_record("v0.0.44", 0)
    batch = rec["steps"][0]
    step = json.loads(json.dumps(batch))
    step["step"]["id"], step["step"]["name"], step["state"] = "5749.0", "python", ["FAILED"]
    step["exit_code"] = {"status": ["ERROR"], "return_code": {"set": True, "number": 1},
                         "signal": {"id": {"set": False, "number": 0}, "name": ""}}
    rec["steps"] = [batch, step]
    rec["derived_exit_code"]["return_code"]["number"] = 1
    rec["derived_exit_code"]["status"] = ["ERROR"]
    (run,) = parse_sacct({"jobs": [rec]}, now=NOW).runs.to_pylist()
    assert (run["state"], run["exit_code"], run["signal"]) == ("COMPLETED", 1, None)
    assert run["reason"] == "step 5749.0 (python) FAILED: exit code 1"
    # without the step list, DerivedExitCode alone still says so
    rec["steps"] = [batch]
    (run,) = parse_sacct({"jobs": [rec]}, now=NOW).runs.to_pylist()
    assert (run["exit_code"], run["reason"]) == (1, "DerivedExitCode 1:0")


def test_a_step_killed_by_a_signal():
    rec = _sacct_record("v0.0.44", 0)
    step = json.loads(json.dumps(rec["steps"][0]))
    step["step"]["id"], step["step"]["name"], step["state"] = "5749.2", "torchrun", ["CANCELLED"]
    step["exit_code"] = {"status": ["SIGNALED"], "return_code": {"set": False, "number": 0},
                         "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}}
    rec["steps"].append(step)
    (run,) = parse_sacct({"jobs": [rec]}, now=NOW).runs.to_pylist()
    assert (run["exit_code"], run["signal"]) == (None, 9)
    assert run["reason"] == "step 5749.2 (torchrun) CANCELLED: signal 9"


def test_cancelled_job_takes_the_batch_steps_signal_22_05_form():
    rec = {"job_id": 9, "state": {"current": "CANCELLED", "reason": "None"},
           "time": {"start": 1762070400, "end": 1762074000},
           "exit_code": {"status": "SUCCESS", "return_code": 0},
           "steps": [{"step": {"job_id": 9, "id": "batch", "name": "batch"},
                      "state": "CANCELLED",
                      "exit_code": {"status": "SIGNALED", "signal": {"signal_id": 15,
                                                                     "name": "TERM"}}}]}
    (run,) = parse_sacct({"jobs": [rec]}, now=NOW).runs.to_pylist()
    assert (run["exit_code"], run["signal"]) == (None, 15)


def test_unreadable_exit_codes_are_null_and_counted():
    rec = {"job_id": 9, "state": {"current": ["FAILED"]},
           "time": {"start": 1762070400, "end": 1762074000},
           "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": -3},
                         "signal": {"id": {"set": True, "number": 4096}}}}
    b = parse_sacct({"jobs": [rec]}, now=NOW)
    (run,) = b.runs.to_pylist()
    assert (run["exit_code"], run["signal"]) == (None, None)
    assert b.dropped == {"sacct.exit_code.return_code": 1}


def test_drops_soft_counts_and_defaults():
    drops = Drops("x")
    assert drops.soft(int, "3") == 3

    def bad():
        raise SlurmParseError("x job 1: f: nope", "f")

    assert drops.soft(bad, default=(None, None)) == (None, None)
    assert drops.counts == {"x.f": 1} and drops.messages == ["x job 1: f: nope"]


def test_the_failure_classifier_sees_a_failed_step_of_a_completed_job():
    rec = _sacct_record("v0.0.44", 0)
    rec["derived_exit_code"]["return_code"]["number"] = 127
    clean = _sacct_record("v0.0.44", 0) | {"job_id": 5748}
    b = parse_sacct({"jobs": [rec, clean]}, now=NOW)
    wh = Warehouse(":memory:")
    try:
        for kind in ("jobs", "runs"):
            wh.ingest(kind, getattr(b, kind)).result()
        run_refresh(wh, now=NOW)
        found = rows(wh)
        assert set(found) == {("5749", 0)}  # the clean COMPLETED job is no failure
        f = found[("5749", 0)]
        assert (f.category, f.reason, f.source) == ("script", "command not found", "exit")
        assert json.loads(f.evidence)["exit_code"] == 127
    finally:
        wh.close()


# What a real Slurm 22.05.8 printed for `sbatch --wrap "srun false; exit 0"` (plain sacct:
# job 0:0, DerivedExitCode 1:0, step 1.0 FAILED 1:0): the JSON loses every code.
SACCT_22_05_FAILED_STEP = {
    "job_id": 1, "name": "step-fails", "state": {"current": "COMPLETED", "reason": "None"},
    "time": {"start": 1762070400, "end": 1762070402},
    "exit_code": {"status": "SUCCESS", "return_code": 0},
    "derived_exit_code": {"status": "SUCCESS", "return_code": 0},
    "steps": [
        {"step": {"job_id": 1, "het": {"component": None}, "id": "batch", "name": "batch"},
         "state": "COMPLETED", "exit_code": {"status": "SUCCESS", "return_code": 0}},
        {"step": {"job_id": 1, "het": {"component": None}, "id": 0, "name": "false"},
         "state": "FAILED", "exit_code": {"status": "SUCCESS", "return_code": 0}}]}


def test_22_05_failed_step_has_an_unknown_code_never_a_false_0():
    (run,) = parse_sacct({"jobs": [SACCT_22_05_FAILED_STEP]}, now=NOW).runs.to_pylist()
    assert (run["state"], run["exit_code"], run["signal"]) == ("COMPLETED", None, None)
    assert run["reason"] == "step 0 (false) FAILED: exit code unknown"


def test_squeue_fills_in_the_code_22_05_sacct_lost():
    """The same job in squeue (exit_code 0, derived_exit_code 256 = exit 1)."""
    squeue = {"jobs": [{"job_id": 1, "name": "step-fails", "job_state": "COMPLETED",
                        "start_time": 1762070400, "end_time": 1762070402, "nodes": "node1",
                        "exit_code": 0, "derived_exit_code": 256}]}

    def run(argv):
        return json.dumps(squeue if argv[0] == "squeue" else {"jobs": [SACCT_22_05_FAILED_STEP]})

    parts = SlurmSource(run=run).collect(NOW)
    history, current = dict(parts[:3]), dict(parts[3:])
    (run_row,) = history["runs"].to_pylist()
    assert (run_row["exit_code"], run_row["signal"]) == (1, None)
    assert run_row["reason"] == ("step 0 (false) FAILED: exit code unknown; "
                                 "DerivedExitCode 1:0")
    assert current["runs"].num_rows == 0
