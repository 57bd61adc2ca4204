"""The Slurm source's transport: incremental sacct, the jobcomp fallback, job types."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from collector.slurm import infer_job_type, parse_sacct, parse_squeue
from collector.slurm_source import SlurmCommandError, SlurmSource, run_command
from collector.wire import render_sacct, render_squeue
from gpulens.service import _source_details

FIX = Path(__file__).parent / "fixtures" / "slurm"
NOW = datetime(2026, 11, 2, 12, 0)


class Runner:
    def __init__(self, sacct_ok=True):
        self.calls = []
        self.sacct_ok = sacct_ok

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "squeue":
            return (FIX / "squeue_24.05.json").read_text()
        if not self.sacct_ok:
            raise SlurmCommandError("sacct exited 1: Slurm accounting storage is disabled")
        return (FIX / "sacct_24.05.json").read_text()


def test_sacct_window_then_all_runs_of_the_changed_jobs():
    run = Runner()
    src = SlurmSource(run=run, overlap_s=600, lookback_s=3600, gpus_per_node=8)
    b = src.collect(NOW)
    kinds = [k for k, _ in b]
    assert kinds == ["jobs", "runs", "allocations"] * 2  # sacct first, squeue last
    window, by_id, squeue = run.calls
    assert window[:4] == ["sacct", "--json", "-D", "-a"]
    assert window[window.index("-S") + 1] == "2026-11-02T11:00:00"
    assert by_id[by_id.index("-j") + 1].split(",")[0].isdigit()
    assert squeue == ["squeue", "--json"]
    src.collect(NOW + timedelta(minutes=1))
    again = run.calls[3]
    assert again[again.index("-S") + 1] == "2026-11-02T11:50:00"  # last read - overlap
    assert dict(b[:3])["runs"].num_rows == parse_sacct(
        (FIX / "sacct_24.05.json").read_text()).runs.num_rows


def test_jobcomp_stands_in_when_sacct_fails(tmp_path):
    comp = tmp_path / "jobcomp.txt"
    comp.write_text("JobId=77 UserId=bob(1) GroupId=bob(1) Name=eval-x JobState=COMPLETED "
                    "Partition=gpu TimeLimit=5 StartTime=2026-11-02T11:00:00 "
                    "EndTime=2026-11-02T11:01:00 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/ "
                    "ReservationName= Tres=cpu=1,gres/gpu=2 Account=a QOS=q WcKey= Cluster=c "
                    "SubmitTime=2026-11-02T10:59:00 EligibleTime=2026-11-02T10:59:00 "
                    "DerivedExitCode=0:0 ExitCode=0:0\n")
    src = SlurmSource(run=Runner(sacct_ok=False), jobcomp_file=str(comp))
    b = src.collect(NOW)
    assert "accounting storage is disabled" in src.sacct_error
    assert b[1][1].to_pylist()[0]["job_id"] == "77"
    assert src.status["sacct"].up is False and src.status["jobcomp"].up is True


def test_a_failing_command_is_marked_down_and_the_others_deliver():
    src = SlurmSource(run=Runner(sacct_ok=False))
    b = dict(src.collect(NOW))  # squeue still delivers
    assert b["runs"].num_rows > 0
    assert src.status["sacct"].up is False and src.status["squeue"].up is True
    assert "accounting storage is disabled" in src.status["sacct"].last_error
    details = _source_details(src)
    assert details["targets"]["down"] == {"sacct": src.status["sacct"].last_error}

    def nothing_works(argv):
        raise SlurmCommandError(f"{argv[0]} exited 1: down")

    with pytest.raises(SlurmCommandError, match="squeue: SlurmCommandError"):
        SlurmSource(run=nothing_works).collect(NOW)


def test_job_type_from_comment_or_name():
    assert infer_job_type("gpulens:type=Pretrain", "x") == "pretrain"
    assert infer_job_type({"job": "ckpt=1 gpulens:type=sft"}, None) == "sft"
    assert infer_job_type("", "eval-mmlu-7b", r"^(eval|sft)-") == "eval"
    assert infer_job_type(None, "llama-pretrain-70b", r"-(?P<type>pretrain)-") == "pretrain"
    assert infer_job_type(None, "notebook", r"^(eval)-") is None


def test_job_types_survive_the_wire():
    """The simulator's job types travel as comments through render -> parse."""
    squeue = parse_squeue((FIX / "squeue_24.05.json").read_text(), NOW)
    jobs = squeue.jobs.set_column(
        squeue.jobs.schema.get_field_index("job_type"), "job_type",
        [["pretrain"] * squeue.jobs.num_rows])
    doc = json.loads(render_squeue(jobs, squeue.runs, squeue.allocations, NOW))
    assert doc["jobs"][0]["comment"] == "gpulens:type=pretrain"
    back = parse_squeue(json.dumps(doc), NOW)
    assert set(back.jobs["job_type"].to_pylist()) == {"pretrain"}
    sacct = parse_sacct(render_sacct(jobs, squeue.runs, squeue.allocations))
    assert set(sacct.jobs["job_type"].to_pylist()) == {"pretrain"}


def test_run_command_errors_say_what_failed():
    with pytest.raises(SlurmCommandError, match="not found"):
        run_command(["/nonexistent/squeue", "--json"])
    with pytest.raises(SlurmCommandError, match="exited 3"):
        run_command(["sh", "-c", "echo boom >&2; exit 3"])


RUNNING = {"job_id": 1, "job_state": "RUNNING", "start_time": 1762070400, "nodes": "n1",
           "gres_detail": ["gpu:2(IDX:0-1)"], "name": "ok"}


def test_job_names_that_are_not_utf8_cost_nothing():
    """Slurm passes names through as bytes; squeue --json prints them raw."""
    raw = json.dumps({"jobs": [RUNNING | {"name": "NAME"}]}).encode().replace(
        b"NAME", b"caf\xe9-\xff\xfe")
    script = b"import sys; sys.stdout.buffer.write(" + repr(raw).encode() + b")"
    out = run_command([sys.executable, "-c", script.decode()])  # a real process's bytes
    src = SlurmSource(sacct="", run=lambda argv: out)
    b = dict(src.collect(NOW))
    assert b["jobs"].to_pylist()[0]["name"] == "caf\ufffd-\ufffd\ufffd"
    assert b["allocations"].num_rows == 2 and src.dropped.as_dict() == {}
    # the same bytes handed over undecoded, and a JSON escape of a lone surrogate
    assert parse_squeue(raw, NOW).jobs["name"].to_pylist() == ["caf\ufffd-\ufffd\ufffd"]
    escaped = json.dumps({"jobs": [RUNNING | {"name": "x\udcff"}]})
    assert parse_squeue(escaped, NOW).jobs["name"].to_pylist() == ["x?"]


class SacctWith:
    """sacct answers: the window names jobs 1-3 (and a bad record); reading job 2 fails."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "squeue":
            return json.dumps({"jobs": []})
        rec = {"job_id": 0, "state": {"current": ["COMPLETED"]}, "name": "j",
               "time": {"start": 1762070400, "end": 1762074000, "submission": 1762070000}}
        if "-S" in argv:
            return json.dumps({"jobs": [rec | {"job_id": j} for j in (1, 2, 3)]
                               + [{"job_id": "x"}]})
        ids = argv[argv.index("-j") + 1].split(",")
        if "2" in ids:  # e.g. a record sacct itself cannot print
            return '{"jobs": [], "errors": [{"error": "Unable to unpack"}]}'
        return json.dumps({"jobs": [rec | {"job_id": int(j)} for j in ids]})


def test_one_unreadable_job_never_blocks_the_sacct_window():
    run = SacctWith()
    src = SlurmSource(run=run, lookback_s=3600)
    b = dict(src.collect(NOW)[:3])  # sacct's part
    assert sorted(b["runs"]["job_id"].to_pylist()) == ["1", "3"]
    assert src.sacct_since == NOW and src.status["sacct"].up
    assert src.dropped.as_dict() == {"sacct.job_id": 1, "sacct.document": 1}
    src.collect(NOW + timedelta(minutes=1))
    window = [c for c in run.calls if "-S" in c][-1]
    assert window[window.index("-S") + 1] == "2026-11-02T11:50:00"  # it moved on


def test_bad_records_are_counted_in_healthz():
    def run(argv):
        if argv[0] == "squeue":
            return json.dumps({"jobs": [RUNNING, RUNNING | {"job_id": 2, "restart_cnt": -3},
                                        RUNNING | {"job_id": 3, "node_count": -8}]})
        raise SlurmCommandError("sacct exited 1: off")

    src = SlurmSource(run=run)
    b = dict(src.collect(NOW))
    assert b["jobs"]["job_id"].to_pylist() == ["1", "3"]
    assert _source_details(src)["dropped"] == {"squeue.restart_cnt": 1,
                                               "squeue.node_count": 1}


def test_a_cancelled_job_whose_batch_step_failed_keeps_no_invented_signal():
    """Slurm 22.05 sometimes records a cancelled job's killed script as a FAILED batch
    step, ExitCode 15:0 (seen in CI), which its sacct --json prints as SUCCESS/0 (shape
    probed on 22.05.8): the run is CANCELLED with the job level's code, no signal and no
    step note, and a sibling run's batch-step SIGTERM is still read."""
    def job(jid, batch_state, batch_exit):
        return {"job_id": jid, "state": {"current": "CANCELLED", "reason": "None"},
                "time": {"start": 1762070400, "end": 1762074000},
                "exit_code": {"status": "SUCCESS", "return_code": 0},
                "derived_exit_code": {"status": "SUCCESS", "return_code": 0},
                "steps": [{"step": {"id": "batch", "name": "batch"}, "state": batch_state,
                           "exit_code": batch_exit}]}

    sacct = {"jobs": [job(7, "FAILED", {"status": "SUCCESS", "return_code": 0}),
                      job(3, "CANCELLED", {"status": "SIGNALED", "return_code": None,
                                           "signal": {"signal_id": 15,
                                                      "name": "Terminated"}})]}

    def run(argv):
        return json.dumps(sacct if argv[0] == "sacct" else {"jobs": []})

    src = SlurmSource(run=run)
    runs = {r["job_id"]: r for r in dict(src.collect(NOW)[:3])["runs"].to_pylist()}
    assert [(runs[j]["state"], runs[j]["exit_code"], runs[j]["signal"], runs[j]["reason"])
            for j in ("7", "3")] == [("CANCELLED", 0, None, None), ("CANCELLED", None, 15, None)]
    assert _source_details(src)["dropped"] == {}


def test_an_ended_run_comes_from_sacct_not_from_squeue():
    """squeue still lists a just-cancelled job (exit 0:0: no step info yet) and is written
    last; sacct's record of the same run has the batch step's SIGTERM."""
    sacct = {"jobs": [{"job_id": 5, "state": {"current": ["CANCELLED"]},
                       "time": {"start": 1762070400, "end": 1762074000},
                       "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True,
                                                                            "number": 0}},
                       "steps": [{"step": {"id": "5.batch", "name": "batch"},
                                  "state": ["CANCELLED"],
                                  "exit_code": {"status": ["SIGNALED"],
                                                "signal": {"id": {"set": True,
                                                                  "number": 15}}}}]}]}
    squeue = {"jobs": [RUNNING | {"job_id": 5, "job_state": "CANCELLED", "exit_code": 0,
                                  "end_time": 1762074000},
                       RUNNING | {"job_id": 6}]}

    def run(argv):
        return json.dumps(squeue if argv[0] == "squeue" else sacct)

    parts = SlurmSource(run=run).collect(NOW)
    history, current = dict(parts[:3]), dict(parts[3:])
    assert history["runs"].to_pylist()[0]["signal"] == 15
    assert current["runs"]["job_id"].to_pylist() == ["6"]  # 5 ended: sacct's view stands
    assert sorted(set(current["allocations"]["job_id"].to_pylist())) == ["5", "6"]
    alone = dict(SlurmSource(run=run, sacct="").collect(NOW))
    assert sorted(alone["runs"]["job_id"].to_pylist()) == ["5", "6"]  # no history: squeue's
