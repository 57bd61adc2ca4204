"""The jobcomp/filetxt fallback, on lines as Slurm 22.05.8 writes them."""

from __future__ import annotations

from datetime import datetime

from collector.jobcomp import JobcompReader, parse_jobcomp_line, parse_jobcomp_lines

# Lines written by a real slurmctld 22.05.8 (tests/test_real_slurm.py), job 1 requeued.
LINES = """JobId=1 UserId=root(0) GroupId=root(0) Name=rq.sh JobState=PENDING Partition=gpu TimeLimit=UNLIMITED StartTime=2026-11-22T14:52:34 EndTime=2026-11-22T14:52:34 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/home/alice/jobs ReservationName= Tres=cpu=1,mem=1000M,node=1,billing=1,gres/gpu=4 Account=root QOS=normal WcKey= Cluster=gpulens SubmitTime=2026-11-22T14:52:31 EligibleTime=2026-11-22T14:52:31 DerivedExitCode=0:0 ExitCode=0:0
JobId=2 UserId=alice(1000) GroupId=alice(1000) Name=my sft run JobState=FAILED Partition=gpu TimeLimit=60 StartTime=2026-11-22T14:52:33 EndTime=2026-11-22T14:52:35 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Tres=cpu=1,node=1,billing=1,gres/gpu=1 Account=ml QOS=normal WcKey= Cluster=gpulens SubmitTime=2026-11-22T14:52:30 EligibleTime=2026-11-22T14:52:30 DerivedExitCode=0:0 ExitCode=3:0
JobId=1 UserId=root(0) GroupId=root(0) Name=rq.sh JobState=COMPLETED Partition=gpu TimeLimit=UNLIMITED StartTime=2026-11-22T14:52:37 EndTime=2026-11-22T14:52:39 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/home/alice/jobs ReservationName= Tres=cpu=1,mem=1000M,node=1,billing=1,gres/gpu=4 Account=root QOS=normal WcKey= Cluster=gpulens SubmitTime=2026-11-22T14:52:35 EligibleTime=2026-11-22T14:52:35 DerivedExitCode=0:0 ExitCode=0:0
"""


def test_line_with_blanks_in_the_name():
    f = parse_jobcomp_line(LINES.splitlines()[1])
    assert f["Name"] == "my sft run" and f["ExitCode"] == "3:0" and f["ReservationName"] == ""


def test_incremental_read_numbers_runs(tmp_path):
    path = tmp_path / "jobcomp.txt"
    lines = LINES.splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:40])  # last line half written
    reader = JobcompReader(str(path), job_type_regex=r"(?P<type>sft)")
    first = reader.read()
    runs = {(r["job_id"], r["run_index"]): r for r in first.runs.to_pylist()}
    assert runs[("1", 0)]["state"] == "REQUEUED"  # logged as PENDING by 22.05
    assert runs[("2", 0)]["exit_code"] == 3 and runs[("2", 0)]["gpus"] == 1
    jobs = {j["job_id"]: j for j in first.jobs.to_pylist()}
    assert jobs["1"]["state"] == "PENDING" and jobs["1"]["end_ts"] is None
    assert jobs["2"]["job_type"] == "sft" and jobs["2"]["user_name"] == "alice"
    path.write_text("".join(lines))
    second = reader.read()
    (run,) = second.runs.to_pylist()
    assert (run["job_id"], run["run_index"], run["state"]) == ("1", 1, "COMPLETED")
    assert run["start_ts"] == datetime(2026, 11, 22, 14, 52, 37)
    assert second.jobs.to_pylist()[0]["restarts"] == 1
    path.write_text(lines[1])  # rotated: starts over
    assert reader.read().runs.num_rows == 1


def test_a_bad_line_costs_that_line_only(tmp_path):
    """Good lines around a bad one are kept, the bad one counted, the offset moves on."""
    good = LINES.splitlines()
    bad = [good[1].replace("JobId=2 ", "JobId=3 ").replace("NodeCnt=1", "NodeCnt=99999999999"),
           good[1].replace("JobId=2 ", "JobId=4 ").replace("EndTime=2026-11-22T14:52:35",
                                                           "EndTime=9999-12-31T00:00:00"),
           good[1].replace("JobId=2 ", "JobId=5 ").replace("ExitCode=3:0", "ExitCode=70000:0"),
           "JobId=x garbage", good[1].replace("JobId=2 ", "JobId=6 ").replace(
               "StartTime=2026", "StartTime=1970")]
    path = tmp_path / "jobcomp.txt"
    path.write_text("\n".join([good[0], *bad, good[2], good[1]]) + "\n")
    reader = JobcompReader(str(path))
    b = reader.read(now=datetime(2026, 11, 23))
    assert sorted((r["job_id"], r["run_index"]) for r in b.runs.to_pylist()) == [
        ("1", 0), ("1", 1), ("2", 0)]
    assert b.dropped == {"jobcomp.NodeCnt": 1, "jobcomp.EndTime": 1, "jobcomp.ExitCode": 1,
                         "jobcomp.JobId": 1, "jobcomp.StartTime": 1}
    assert "jobcomp line 3 (job 4) EndTime" in b.problems[1]
    assert reader.offset == path.stat().st_size
    assert reader.read(now=datetime(2026, 11, 23)).runs.num_rows == 0


def test_derived_exit_code_of_a_failed_step(tmp_path):
    line = LINES.splitlines()[1].replace("JobState=FAILED", "JobState=COMPLETED").replace(
        "DerivedExitCode=0:0 ExitCode=3:0", "DerivedExitCode=1:0 ExitCode=0:0")
    (tmp_path / "j").write_text(line + "\n")
    (run,) = JobcompReader(str(tmp_path / "j")).read(now=datetime(2026, 11, 23)).runs.to_pylist()
    assert (run["state"], run["exit_code"], run["reason"]) == (
        "COMPLETED", 1, "DerivedExitCode 1:0")


def test_lines_with_lone_surrogates_are_stored_readable():
    """Text decoded with surrogateescape (undecodable bytes) cannot be stored as is."""
    line = LINES.splitlines()[1].replace("UserId=alice(1000)", "UserId=\udcff")
    b = parse_jobcomp_lines([line], now=datetime(2026, 11, 23))
    assert b.jobs["user_name"].to_pylist() == ["?"] and b.dropped == {}
