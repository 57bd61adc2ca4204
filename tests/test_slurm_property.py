"""Property-based tests of the Slurm parsers: squeue/sacct JSON and jobcomp lines.

Each parser fails only in its documented way: squeue/sacct raise SlurmParseError for a
document they cannot read and otherwise skip and count bad records and values (never an
``internal_error``); jobcomp never raises for a line's content. What they return fits
the warehouse's tables and the bounds of collector.bounds.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.bounds import EARLIEST, MAX_FUTURE, MAX_GPUS_PER_NODE, MAX_RESTARTS
from collector.jobcomp import parse_jobcomp_lines
from collector.slurm import SlurmParseError, parse_sacct, parse_squeue
from warehouse.schema import SCHEMAS

pytestmark = pytest.mark.property

SLURM = Path(__file__).parent / "fixtures" / "slurm"
NOW = datetime(2026, 11, 2, 12, 0)
DOCS = {p.name: json.loads(p.read_text()) for p in sorted(SLURM.glob("**/*.json"))}
RECORDS = {kind: [r for name, d in DOCS.items() if name.startswith(kind) for r in d["jobs"]]
           for kind in ("squeue", "sacct")}
ODD_TEXT = ["", "None", "N/A", "(null)", "\udcff", "caf\ufffd", "\x00", "gpu[0-99999999]",
            "gres/gpu:-8", "gres/gpu:h100:1,gres/gpu:h200:1", "gpu:4(IDX:0-1000000000)",
            "gpu:30001(IDX:0-30000)", "gres:gpu:4", "gpu:a100:2(S:0-1)", "gres/shard:2",
            "n[1-2]", "gpu(IDX:0,2)", "gpu:h200:0(IDX:)", "RUNNING", "1e12", "-3"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.sampled_from([0, -1, -3, 1, 4, 255, 256, 4294967295, 2**63, 1e12, 1762070400]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(ODD_TEXT))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["set", "infinite", "number", "id", "name",
                                         "status", "return_code", "signal", "current",
                                         "list", "allocation", "start", "end", "job_id"]),
                        inner, max_size=4)),
    max_leaves=12)


@st.composite
def mutated_record(draw, kind: str):
    """A real record with some fields replaced by arbitrary JSON, or dropped."""
    rec = dict(draw(st.sampled_from(RECORDS[kind])))
    keys = sorted(rec)
    for key in draw(st.lists(st.sampled_from(keys), max_size=6, unique=True)):
        if draw(st.booleans()):
            rec[key] = draw(json_values)
        else:
            rec.pop(key)
    return rec


def documents(kind: str):
    record = st.one_of(mutated_record(kind), json_values)
    return st.one_of(
        st.builds(lambda jobs: {"jobs": jobs}, st.lists(record, max_size=6)),
        st.dictionaries(st.sampled_from(["jobs", "errors", "meta"]), json_values, max_size=3))


def check(batch, command: str) -> None:
    for kind in ("jobs", "runs", "allocations"):
        table = getattr(batch, kind)
        assert isinstance(table, pa.Table) and table.schema.equals(SCHEMAS[kind])
    assert f"{command}.internal_error" not in batch.dropped, batch.problems
    hi = NOW + MAX_FUTURE
    for row in batch.runs.to_pylist():
        assert 0 <= row["run_index"] <= MAX_RESTARTS
        assert EARLIEST <= row["start_ts"] <= hi
        assert row["end_ts"] is None or row["start_ts"] <= row["end_ts"] <= hi
        assert row["gpus"] is None or row["gpus"] >= 0
        assert row["exit_code"] is None or 0 <= row["exit_code"] <= 255
    for row in batch.allocations.to_pylist():
        assert 0 <= row["gpu_index"] < MAX_GPUS_PER_NODE
    for row in batch.jobs.to_pylist():
        assert row["gpus"] is None or row["gpus"] >= 0
        assert row["nodes"] is None or row["nodes"] >= 0


@given(documents("squeue"))
def test_squeue_fails_only_with_its_documented_error(doc):
    try:
        batch = parse_squeue(json.dumps(doc), NOW)
    except SlurmParseError as err:
        assert str(err).startswith("squeue")
        return
    check(batch, "squeue")


@given(documents("sacct"))
def test_sacct_fails_only_with_its_documented_error(doc):
    try:
        batch = parse_sacct(json.dumps(doc), gpus_per_node=8, now=NOW)
    except SlurmParseError as err:
        assert str(err).startswith("sacct")
        return
    check(batch, "sacct")


@given(st.sampled_from(sorted(DOCS)), st.data())
def test_mangled_bytes_of_real_documents(name, data):
    raw = bytearray(json.dumps(DOCS[name]).encode())
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    command = "sacct" if name.startswith("sacct") else "squeue"
    try:
        batch = (parse_sacct(bytes(raw), now=NOW) if command == "sacct"
                 else parse_squeue(bytes(raw), NOW))
    except SlurmParseError:
        return
    check(batch, command)


JOBCOMP = ("JobId=2 UserId=alice(1000) GroupId=alice(1000) Name=my sft run JobState=FAILED "
           "Partition=gpu TimeLimit=60 StartTime=2026-11-01T14:52:33 "
           "EndTime=2026-11-01T14:52:35 NodeList=node1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp "
           "ReservationName= Tres=cpu=1,node=1,billing=1,gres/gpu=1 Account=ml QOS=normal "
           "WcKey= Cluster=gpulens SubmitTime=2026-11-01T14:52:30 "
           "EligibleTime=2026-11-01T14:52:30 DerivedExitCode=0:0 ExitCode=3:0")
FIELDS = [part.split("=", 1)[0] for part in JOBCOMP.split() if "=" in part]
line_values = st.one_of(st.text(max_size=24), st.sampled_from(
    ["", "99999999999", "-1", "9999-12-31T00:00:00", "1970-01-01T00:00:00", "0:0", "3:0",
     "300:0", "70000:99", "1:15", "gres/gpu=-4", "gres/gpu=99999999999999", "x[1-",
     "2026-11-01T14:52:33", "Unknown", "\udcff", "\ufffd"]))


@st.composite
def jobcomp_lines(draw):
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            lines.append(draw(st.text(max_size=60)))
            continue
        line = JOBCOMP
        for key in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
            value = draw(line_values).replace("\n", " ").replace("\r", " ")
            start = line.index(f"{key}=")
            end = line.find(" ", start + len(key) + 1)
            end = len(line) if end < 0 else end
            if key == "Name":
                end = line.index(" JobState=")
            line = line[:start] + f"{key}={value}" + line[end:]
        lines.append(line)
    return lines


@given(jobcomp_lines(), st.integers(0, 3))
def test_jobcomp_never_raises_for_a_line(lines, shift_days):
    batch = parse_jobcomp_lines(lines, now=NOW + timedelta(days=shift_days))
    for kind in ("jobs", "runs", "allocations"):
        assert getattr(batch, kind).schema.equals(SCHEMAS[kind])
    good = sum(1 for line in lines if line.strip()) - sum(batch.dropped.values())
    assert batch.jobs.num_rows <= max(good, 0)
    for row in batch.runs.to_pylist():
        assert EARLIEST <= row["start_ts"] <= NOW + timedelta(days=shift_days) + MAX_FUTURE
        assert row["exit_code"] is None or 0 <= row["exit_code"] <= 255
        assert row["gpus"] is None or 0 <= row["gpus"] <= 1_000_000
