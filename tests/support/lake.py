"""Simulated warehouses for the lake tests (export, lake job, Spark): history written
in bulk, rolled up and classified (failures, GPU-hours lost) as the service would."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from collector.simulator import Cluster, SimConfig
from warehouse import Warehouse, analytics


def simulated_warehouse(path: Path, start: datetime, days: float, *, seed: int = 0,
                        racks: int = 1, interval_s: float = 60.0,
                        infra_failures_per_1000_node_days: float = 50.0,
                        classify: bool = False) -> Path:
    """A warehouse file at ``path`` holding ``days`` of a simulated cluster from
    ``start`` (samples every ``interval_s`` seconds), rolled up; ``classify``: the
    analytics refresh run at the end too (failures and their GPU-hours lost)."""
    end = start + timedelta(days=days)
    cluster = Cluster(SimConfig(racks=racks, interval_s=interval_s, seed=seed,
                                infra_failures_per_1000_node_days=(
                                    infra_failures_per_1000_node_days)), anchor=start)
    with Warehouse(path) as wh:
        cluster.backfill(lambda k, t: wh.ingest(k, t).result(), start, end, progress=False)
        wh.rollup().result()
        if classify:
            wh.write(lambda con: analytics.refresh(con, end, None)).result()
    return path



def spark_session(scratch: Path):
    """A local SparkSession for tests: two cores, no UI, UTC, partition values read as
    text (a cluster named ``2026`` stays a name; docs/scaling.md), its warehouse folder
    under ``scratch``. Skips (fails in CI) without Java or pyspark."""
    import pytest

    from tests.support.integration import need, required

    need("java", "openjdk-17-jre-headless")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        message = "pyspark is not installed (pip install -e '.[test]')"
        if required():
            pytest.fail(message + " and GPULENS_REQUIRE_INTEGRATION=1")
        pytest.skip(message)
    session = (SparkSession.builder.master("local[2]").appName("gpulens-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .config("spark.sql.warehouse.dir", str(scratch / "spark-warehouse"))
               .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={scratch}")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session
