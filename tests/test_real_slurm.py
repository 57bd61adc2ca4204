"""Real Slurm 22.05 on localhost: jobs that complete, fail, time out and are requeued.

The fixture (tests/support/slurm.py) starts munged, MariaDB, slurmdbd, slurmctld and a
slurmd with eight fake GPUs. The collector (collector.slurm_source.SlurmSource, running
the real squeue/sacct) is polled into a warehouse while the jobs go through their
lives; every run must arrive with its state, exit code and GPU allocation.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import pytest

from collector.jobcomp import JobcompReader
from collector.slurm_source import SlurmSource
from tests.support.slurm import LocalSlurm
from warehouse import Warehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REQUEUE_SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then sleep 300; else sleep 2; fi
"""


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def submit(cluster: LocalSlurm, *args: str) -> str:
    out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.strip().split(";")[0]


def state_of(cluster: LocalSlurm, job_id: str) -> str:
    return cluster.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()


def wait_for(cond, timeout: float, what: str, poll=None, detail=None):
    """Poll until ``cond()``; on timeout the message adds ``detail()`` (what was seen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if poll:
            poll()
        if cond():
            return
        time.sleep(0.5)
    seen = ""
    if detail:
        try:
            seen = f"\n{detail()}"
        except Exception as exc:  # noqa: BLE001 - the timeout is the failure to report
            seen = f"\n(what was seen could not be read: {exc})"
    raise AssertionError(f"timed out waiting for {what} ({timeout:g} s){seen}")


def test_collector_sees_every_run(slurm, tmp_path):
    assert slurm.start_s < 60, f"the fixture took {slurm.start_s:.1f} s to start"
    wh = Warehouse(":memory:")
    source = SlurmSource(interval_s=1, gpus_per_node=8, overlap_s=60, lookback_s=3600,
                         job_type_regex=r"^(?P<type>sft|eval)-")

    def poll():
        for kind, table in source.collect(now()):
            wh.ingest(kind, table).result()

    script = tmp_path / "requeue.sh"
    script.write_text(REQUEUE_SCRIPT)
    jobs = {
        "ok": submit(slurm, "--gres=gpu:2", "-J", "eval-ok", "--wrap", "sleep 1"),
        "fail": submit(slurm, "--gres=gpu:1", "-J", "sft-fail", "--wrap", "sleep 1; exit 3"),
        "timeout": submit(slurm, "--gres=gpu:1", "--time=1", "-J", "slow",
                          "--wrap", "sleep 300"),
        "requeue": submit(slurm, "--gres=gpu:4", "--requeue", "-J", "big",
                          "--comment", "gpulens:type=pretrain", str(script)),
    }
    wait_for(lambda: state_of(slurm, jobs["requeue"]) == "RUNNING", 30, "first run",
             poll=poll)
    poll()  # squeue sees run 0 with its GPU indices
    slurm.run("scontrol", "requeue", jobs["requeue"])
    # A requeued job waits for its begin time; let it go at once.
    # (Wait for PENDING: an update while the run is still COMPLETING does not stick.)
    wait_for(lambda: state_of(slurm, jobs["requeue"]) == "PENDING", 60, "requeue", poll=poll)

    def let_it_go():  # again while it waits: an update can race the requeue under load
        poll()
        if state_of(slurm, jobs["requeue"]) == "PENDING":
            slurm.run("scontrol", "update", f"JobId={jobs['requeue']}", "StartTime=now",
                      check=False)
            slurm.run("scontrol", "release", jobs["requeue"], check=False)

    wait_for(lambda: state_of(slurm, jobs["requeue"]) == "RUNNING", 90, "second run",
             poll=let_it_go)
    poll()
    wait_for(lambda: all(state_of(slurm, j) == "" for j in jobs.values()), 150,
             "every job to end", poll=poll)
    time.sleep(1)
    poll()

    cur = wh.reader()
    got = {
        r[0]: r[1:] for r in cur.execute(
            "SELECT job_id, state, job_type, restarts FROM jobs").fetchall()
    }
    runs = {
        (r[0], r[1]): r[2:] for r in cur.execute(
            "SELECT job_id, run_index, state, exit_code, gpus, nodelist, end_ts IS NOT NULL "
            "FROM job_runs").fetchall()
    }
    allocs = cur.execute(
        "SELECT job_id, run_index, count(*) FROM allocations GROUP BY ALL").fetchall()
    allocs = {(a[0], a[1]): a[2] for a in allocs}

    assert got[jobs["ok"]][:2] == ("COMPLETED", "eval")
    assert got[jobs["fail"]][:2] == ("FAILED", "sft")
    assert got[jobs["timeout"]][0] == "TIMEOUT"
    assert got[jobs["requeue"]] == ("COMPLETED", "pretrain", 1)
    assert runs[(jobs["ok"], 0)][:3] == ("COMPLETED", 0, 2)
    # 22.05's sacct --json loses the exit code (prints 0); squeue saw 3 unless the job
    # left its queue between two polls. Never a false 0.
    assert runs[(jobs["fail"], 0)][0] == "FAILED"
    assert runs[(jobs["fail"], 0)][1] in (3, None)
    assert runs[(jobs["timeout"], 0)][0] == "TIMEOUT"
    # sacct says SUCCESS/0 for the job; its batch step holds the SIGTERM. Under load
    # slurmdbd records the step after the job has left the queue: a later poll (within
    # the collector's overlap) learns it
    def signal():
        return cur.execute("SELECT signal FROM job_runs WHERE job_id = ?",
                           [jobs["timeout"]]).fetchone()[0]

    wait_for(lambda: signal() is not None, 90, "the timed-out run's signal", poll=poll,
             detail=lambda: slurm.run("sacct", "-a", "-j", jobs["timeout"], "-o",
                                      "JobID,State,ExitCode,End", check=False))
    assert signal() == 15
    assert runs[(jobs["requeue"], 0)][0] == "REQUEUED"
    assert runs[(jobs["requeue"], 1)][0] == "COMPLETED"
    assert all(r[3] == "node1" and r[4] for r in runs.values())  # node list, ended
    assert {k for k in runs if k[0] == jobs["requeue"]} == {(jobs["requeue"], 0),
                                                            (jobs["requeue"], 1)}
    # squeue gave each run of the requeued job its four GPU indices.
    assert allocs[(jobs["requeue"], 0)] == 4 and allocs[(jobs["requeue"], 1)] == 4

    # The jobcomp fallback sees the same runs.
    part = JobcompReader(str(slurm.jobcomp)).read()
    comp = {(r["job_id"], r["run_index"]): r["state"] for r in part.runs.to_pylist()}
    assert comp[(jobs["ok"], 0)] == "COMPLETED"
    assert comp[(jobs["fail"], 0)] == "FAILED"
    assert comp[(jobs["timeout"], 0)] == "TIMEOUT"
    assert comp[(jobs["requeue"], 1)] == "COMPLETED"
    wh.close()


def test_squeue_json_is_read_as_22_05(slurm):
    """The documents the real squeue prints parse; a pending job has no run yet."""
    job = submit(slurm, "--gres=gpu:1", "--hold", "-J", "held", "--wrap", "true")
    source = SlurmSource(sacct="", interval_s=1)
    batches = dict(source.collect(now()))
    row = [r for r in batches["jobs"].to_pylist() if r["job_id"] == job][0]
    assert row["state"] == "PENDING" and row["gpus"] == 1
    assert job not in batches["runs"]["job_id"].to_pylist()
    slurm.run("scancel", job)


def test_failed_steps_cancellations_and_names_that_are_not_utf8(slurm, tmp_path):
    """A clean batch script whose srun step failed, a job cancelled while running, and a
    job name with bytes that are not UTF-8 (Slurm passes them through)."""
    wh = Warehouse(":memory:")
    source = SlurmSource(interval_s=1, gpus_per_node=8, overlap_s=60, lookback_s=3600)

    def poll():
        for kind, table in source.collect(now()):
            wh.ingest(kind, table).result()

    jobs = {
        "step": submit(slurm, "--gres=gpu:1", "-J", "step-fails",
                       "--wrap", "srun --gres=gpu:1 false; exit 0"),
        "cancel": submit(slurm, "--gres=gpu:1", "-J", "cancel-me",
                         "--wrap", f"touch {tmp_path}/running; sleep 300"),
        "bytes": submit(slurm, "--gres=gpu:2", "-J", os.fsdecode(b"caf\xe9-\xff"),
                        "--wrap", "sleep 3"),
    }
    wait_for(lambda: state_of(slurm, jobs["cancel"]) == "RUNNING", 30, "cancel-me to run",
             poll=poll)
    # Cancel once the script runs: cancelled before, no step holds a signal (sacct's
    # ``.batch`` record alone is not enough: it exists before the script has started).
    wait_for(lambda: (tmp_path / "running").exists(), 60, "the script of cancel-me")
    slurm.run("scancel", jobs["cancel"])
    wait_for(lambda: all(state_of(slurm, j) == "" for j in jobs.values()), 60,
             "every job to end", poll=poll)
    cur = wh.reader()

    def cancel_batch():  # sacct's own record of cancel-me's batch step: (state, ExitCode)
        out = slurm.run("sacct", "-a", "-n", "-P", "-j", jobs["cancel"],
                        "-o", "JobID,State,ExitCode", check=False)
        rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
        return next(((st, code) for jid, st, code in rows
                     if jid == f"{jobs['cancel']}.batch"), None)

    final = {}  # cancel-me's batch step once sacct holds its end, and the run has it

    def accounted():  # slurmdbd records the steps a little after the job ends
        rows = cur.execute("SELECT count(*) FROM job_runs WHERE job_id = ? AND signal = 15 "
                           "UNION ALL SELECT count(*) FROM job_runs WHERE job_id = ? "
                           "AND reason LIKE 'step %'", [jobs["cancel"], jobs["step"]]).fetchall()
        batch = cancel_batch()  # RUNNING or PENDING until slurmdbd stores the step's end
        if batch is not None and (batch[0] == "FAILED"
                                  or batch[0].startswith("CANCELLED") and rows[0][0]):
            final["batch"] = batch
        return rows[1][0] and "batch" in final

    def seen():
        ids = ",".join(jobs.values())
        rows = cur.execute("SELECT job_id, state, exit_code, signal, reason FROM job_runs "
                           "ORDER BY job_id").fetchall()
        return f"job_runs: {rows}\n" + slurm.run(
            "sacct", "-a", "-j", ids, "-o", "JobID,State,ExitCode,DerivedExitCode,End",
            check=False)

    # Under load slurmdbd stores the steps well after the jobs leave the queue.
    wait_for(accounted, 90, "the steps in sacct", poll=poll, detail=seen)
    runs = {r[0]: r[1:] for r in cur.execute(
        "SELECT r.job_id, r.state, r.exit_code, r.signal, r.reason, j.name, r.gpus "
        "FROM job_runs r JOIN jobs j USING (job_id)").fetchall()}
    state, code, _, reason, _, _ = runs[jobs["step"]]
    # Not a clean exit 0: 22.05's sacct --json prints 0 for the FAILED step and for the
    # DerivedExitCode (plain sacct says 1:0); squeue's derived 256 fills in the code while
    # squeue still lists the job (MinJobAge=2 here, so only sometimes).
    assert state == "COMPLETED" and code in (1, None)
    assert "step 0 (false) FAILED" in reason
    state, _, signal, _, _, _ = runs[jobs["cancel"]]
    batch_state, batch_code = final["batch"]
    if batch_state.startswith("CANCELLED"):  # sacct: job SUCCESS/0, batch step 0:15
        assert (state, signal, batch_code) == ("CANCELLED", 15, "0:15")
    else:
        # Under load Slurm may record the killed script's step as FAILED 15:0 (seen in
        # CI); 22.05's JSON prints that step as SUCCESS/0, so no signal is invented.
        assert (state, signal, batch_state) == ("CANCELLED", None, "FAILED"), batch_code
    state, code, _, _, name, gpus = runs[jobs["bytes"]]
    # squeue prints the raw bytes (read as U+FFFD); slurmdbd's MariaDB stored them as '?'
    # already, so sacct's record (written before squeue's) may say "caf?-?".
    assert (state, code, gpus) == ("COMPLETED", 0, 2)
    assert name in ("caf\ufffd-\ufffd", "caf?-?")
    assert source.dropped.as_dict() == {}
    assert all(st.up for st in source.status.values())
    wh.close()
