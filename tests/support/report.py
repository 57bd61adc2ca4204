"""The weekly report's test warehouse: a small simulated cluster, seeded once per session.

Two racks (128 GPUs) from Sunday 2026-11-15 00:00 to Tuesday 2026-11-17 12:00 (naive UTC):
the report week 2026-W47 is in progress, 2026-W46 has its Sunday.
"""

from __future__ import annotations

import shutil
from datetime import datetime

from gpulens.config import load
from warehouse import Warehouse, analytics

START, NOW = datetime(2026, 11, 15), datetime(2026, 11, 17, 12)
WEEK = "2026-W47"
_CACHE: dict[str, object] = {}


def seeded_copy(tmp_path) -> str:
    """A copy of the seeded warehouse file (seeded once per test session)."""
    if "path" not in _CACHE:
        from collector.simulator import Cluster, SimConfig

        base = tmp_path.parent / "report-seed.duckdb"
        wh = Warehouse(base)
        # a raised fault rate, so two days hold infrastructure failures and the lemon shows
        Cluster(SimConfig(racks=2, infra_failures_per_1000_node_days=400.0),
                anchor=START).backfill(
            lambda k, t: wh.ingest(k, t).result(), START, NOW, progress=False)
        wh.rollup().result()
        wh.write(lambda con: analytics.refresh(con, NOW, None)).result()
        wh.close()
        _CACHE["path"] = base
    tmp_path.mkdir(parents=True, exist_ok=True)
    dst = tmp_path / "w.duckdb"
    shutil.copy(_CACHE["path"], dst)
    return str(dst)


def report_config(tmp_path, **overrides):
    """Default settings with reports written under ``tmp_path/reports`` and 16-GPU jobs
    counted as large."""
    return load(None, env={}).with_overrides(reports__dir=str(tmp_path / "reports"),
                                             reports__large_job_gpus=16, **overrides)
