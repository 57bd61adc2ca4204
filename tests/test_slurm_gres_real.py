"""Real Slurm 22.05 on localhost with shards (issue 21): shard jobs become allocations.

The fixture (tests/conftest.py ``slurm``, this module's ``SLURM_SHARED``) gives each of
the eight fake GPUs four shards. Slurm 22.05 prints a shard job's ``gres_detail`` as
``shard:N(IDX:i)``: the GPU it runs on, not its share (23.11.2 adds the share).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from collector.slurm_source import SlurmSource

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLURM_SHARED = "shard"


def test_shard_jobs_become_allocations_of_the_gpus_they_run_on(slurm):
    ids = [slurm.run("sbatch", "--parsable", "-o", "/dev/null", f"--gres=shard:{n}",
                     "--wrap", "sleep 300").strip().split(";")[0] for n in (2, 3)]
    source = SlurmSource(sacct="")
    try:
        deadline, allocs = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            now = datetime.now(UTC).replace(tzinfo=None)
            allocs = dict(source.collect(now))["allocations"].to_pylist()
            if len(allocs) == 2:
                break
            time.sleep(0.5)
        assert allocs is not None and len(allocs) == 2, allocs
        by_job = {a["job_id"]: a for a in allocs}
        assert sorted(by_job) == sorted(ids)
        assert all(a["node"] == "node1" and 0 <= a["gpu_index"] < 8 and a["share"] is None
                   and a["gpu_i_ids"] is None for a in allocs)
        # 2 + 3 shards do not fit the 4 of one GPU: two GPUs
        assert by_job[ids[0]]["gpu_index"] != by_job[ids[1]]["gpu_index"]
        assert source.dropped.as_dict() == {}
    finally:
        slurm.run("scancel", *ids, check=False)
