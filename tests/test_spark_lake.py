"""Any engine reads the lake (issue 18): Spark in local mode, on the tables as
docs/scaling.md defines them, answers one fleet question (GPU-hours lost per cluster and
week) as DuckDB does with the Goodput page's own function over the same files.

Two simulated clusters with different failure rates, each exported by the service's lake
job (gpulens/lake_job.py) into one lake; one is named ``2026`` so that a partition value
that looks like a number must stay a name.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pytest

from gpulens.config import load
from gpulens.lake_job import LakeJob
from tests.support.lake import simulated_warehouse
from warehouse import Warehouse
from warehouse.queries.goodput import lost_by

START = datetime(2026, 11, 14)  # Saturday: the days span two ISO weeks (from 11-09, 11-16)
END = START + timedelta(days=4)
CLUSTERS = {"rsc-1": (1, 200.0), "2026": (2, 20.0)}  # name -> seed, infra failures/1000 nd

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two simulations, a JVM


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-lake")
    lake = root / "lake"
    for name, (seed, rate) in CLUSTERS.items():
        db = simulated_warehouse(root / f"{name}.duckdb", START, 4, seed=seed,
                                 interval_s=3600.0, classify=True,
                                 infra_failures_per_1000_node_days=rate)
        config = load(None).with_overrides(lake__dir=str(lake), cluster__name=name)
        with Warehouse(db) as wh:
            result = LakeJob(wh, config, now=lambda: END + timedelta(hours=6)).run()
        assert result.errors == {} and result.rows["failures"] > 0
    return lake


def _duckdb_answer(lake) -> dict[tuple[str, datetime], float]:
    """Per cluster: the lake's failures as the table ``failures`` of a DuckDB
    connection, asked with warehouse.queries.goodput.lost_by (the Goodput page's)."""
    answer = {}
    for name in CLUSTERS:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW failures AS SELECT * FROM read_parquet("
                    f"'{lake}/failures/cluster={name}/*/*.parquet', hive_partitioning = true)")
        weeks = lost_by(con, start=START, end=END, by="week")
        answer.update({(name, w.to_pydatetime()): lost
                       for w, lost in zip(weeks["week"], weeks["gpu_hours_lost"], strict=True)})
    return answer


def test_spark_and_duckdb_agree_on_gpu_hours_lost_per_cluster_and_week(lake, spark):
    # the table definition of docs/scaling.md, then its partitions registered
    spark.sql("DROP TABLE IF EXISTS failures")
    spark.sql(f"CREATE TABLE failures USING parquet LOCATION '{lake}/failures'")
    spark.sql("MSCK REPAIR TABLE failures SYNC PARTITIONS")
    rows = spark.sql(
        "SELECT cluster, date_trunc('week', end_ts) AS week, sum(gpu_hours_lost) AS lost "
        "FROM failures WHERE end_ts >= TIMESTAMP_NTZ '2026-11-14 00:00:00' "
        "AND end_ts < TIMESTAMP_NTZ '2026-11-18 00:00:00' GROUP BY 1, 2").collect()
    spark_answer = {(r["cluster"], r["week"]): r["lost"] for r in rows}

    duck = _duckdb_answer(lake)
    assert set(spark_answer) == set(duck)
    assert {c for c, _ in duck} == set(CLUSTERS)
    assert {w for _, w in duck} == {datetime(2026, 11, 9), datetime(2026, 11, 16)}
    for key, lost in duck.items():
        assert spark_answer[key] == pytest.approx(lost, rel=1e-9), key
    # the clusters differ (200 against 20 infrastructure failures per 1,000 node-days)
    per = {c: sum(v for (k, _), v in duck.items() if k == c) for c in CLUSTERS}
    assert per["rsc-1"] != pytest.approx(per["2026"], rel=0.01)


def test_spark_sees_a_day_dropped_by_retention_after_a_repair(lake, spark, tmp_path):
    """Retention drops whole day folders; Spark's catalog forgets them on the next
    ``MSCK REPAIR TABLE ... SYNC PARTITIONS`` (docs/scaling.md)."""
    spark.sql("DROP TABLE IF EXISTS failures")
    spark.sql(f"CREATE TABLE failures USING parquet LOCATION '{lake}/failures'")
    spark.sql("MSCK REPAIR TABLE failures SYNC PARTITIONS")
    before = {r["date"] for r in spark.sql("SELECT DISTINCT date FROM failures").collect()}
    assert "2026-11-14" in before
    day = lake / "failures" / "cluster=rsc-1" / "date=2026-11-14"
    day.rename(tmp_path / "aside")  # as drop_days_before does, within the lake
    try:
        spark.sql("MSCK REPAIR TABLE failures SYNC PARTITIONS")
        dates = {(r["cluster"], r["date"]) for r in spark.sql(
            "SELECT DISTINCT cluster, date FROM failures").collect()}
        assert ("rsc-1", "2026-11-14") not in dates and ("2026", "2026-11-14") in dates
    finally:
        (tmp_path / "aside").rename(day)
