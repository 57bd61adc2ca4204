"""Placement and fragmentation (warehouse/placement.py) on the cluster of
tests/support/placement.py, numbers worked out by hand in each test."""

import math

import pandas as pd
import pytest

from tests.support.placement import NOW, H, T, seed_placement
from warehouse import Warehouse, placement_runs
from warehouse import placement as pl
from warehouse import placement_waits as pw


@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    seed_placement(w)
    yield w
    w.close()


def test_job_span_against_the_fewest_racks_and_zones(wh):
    # a rack holds 8 GPUs, a zone 16: an 8-GPU job needs 1 rack and 1 zone
    df = pl.job_placement(wh.reader(), start=T, end=NOW, now=NOW).set_index("job_id")
    assert df.loc["J1", ["racks", "zones", "min_racks", "min_zones"]].tolist() == [1, 1, 1, 1]
    assert df.loc["J1", "score"] == 1.0 and not df.loc["J1", "misplaced"]
    # J2 spans r2 and r3 in zones A and B: (1 + 1) / (2 + 2)
    assert df.loc["J2", ["racks", "zones", "min_racks", "min_zones"]].tolist() == [2, 2, 1, 1]
    assert df.loc["J2", "score"] == 0.5 and df.loc["J2", "misplaced"]
    assert df.loc["J2", "rack_names"] == "r2 r3"
    assert df.loc["J2", "extra_racks"] == 1 and df.loc["J2", "extra_zones"] == 1
    # GPU-hours within the window: J1 8 x 4 h, J2 8 x 2 h, J3 (running) 2 x 4 h
    assert df["gpu_hours"].to_dict() == pytest.approx({"J1": 32.0, "J2": 16.0, "J3": 8.0})
    assert df.index[0] == "J2"  # worst placed first
    s = placement_runs.placed_runs(wh.reader(), start=T, end=NOW, now=NOW).summary
    # runs of 2+ nodes: J1 and J2; GPU-hour weighted score (32 x 1 + 16 x 0.5) / 48
    assert s == pytest.approx({"runs": 2, "misplaced_runs": 1, "gpu_hours": 48.0,
                               "misplaced_gpu_hours": 16.0, "mean_score": 40 / 48})


def test_a_window_cuts_the_gpu_hours_and_min_gpus_filters(wh):
    df = pl.job_placement(wh.reader(), start=T + 2 * H, end=NOW, now=NOW, min_gpus=8)
    assert df.set_index("job_id")["gpu_hours"].to_dict() == pytest.approx(
        {"J1": 16.0, "J2": 8.0})


def test_fragmentation_at_an_instant(wh):
    # at T + 2 h: J1 holds n1, n2; J2 n3, n5; J3 2 GPUs of n4. Free: n4 2, n6, n7, n8 4 each
    usual = pl.usual_gpus(wh.reader(), start=T, end=NOW)
    assert usual == {"train": 8.0}  # median of the multi-node runs J1 and J2
    free = pl.free_gpus(wh.reader(), ticks=[T + 2 * H])
    assert free.set_index("node")["free"].to_dict() == {
        "n1": 0, "n2": 0, "n3": 0, "n4": 2, "n5": 0, "n6": 4, "n7": 4, "n8": 4}
    got = pl.fragmentation(wh.reader(), ticks=[T + 2 * H], usual=usual).iloc[0]
    assert got["free_gpus"] == 14 and got["whole_node_gpus"] == 12
    assert got["largest_node_gpus"] == 4
    assert got["largest_rack_gpus"] == 8  # r4: n7 + n8
    assert got["largest_zone_gpus"] == 12  # zone B: n6, n7, n8
    # zone A has no wholly free node, zone B 12 GPUs: one 8-GPU job; 14 - 8 stranded
    assert got["stranded_gpus"] == 6


def test_fragmentation_over_time_and_scattered_waits(wh):
    ticks = pl.hourly_ticks(T, NOW)
    assert ticks == [T, T + H, T + 2 * H, T + 3 * H]
    frag = pl.fragmentation(wh.reader(), ticks=ticks, usual={"train": 8.0})
    # T: J1, J3 -> free 22, whole 20; T+1, T+2: 14, 12; T+3 (J2 ended): 22, 20
    assert frag["free_gpus"].tolist() == [22, 14, 14, 22]
    assert frag["whole_node_gpus"].tolist() == [20, 12, 12, 20]
    pending = pw.pending_large(wh.reader(), start=T, end=NOW, now=NOW, min_gpus=10)
    assert pending["job_id"].tolist() == ["P"]
    waits = pw.scattered_waits(pending, frag.attrs["by_partition"], now=NOW, node_gpus=4)
    # P (14 GPUs) pending at T+1, T+2, T+3; 14 free but 12 on whole nodes at T+1 and T+2
    assert waits.iloc[0]["pending_h"] == 3.0 and waits.iloc[0]["scattered_h"] == 2.0


def test_racks_without_a_zone_are_zones_of_their_own(wh):
    wh.reader().execute("DELETE FROM racks")  # the inventory names no zone
    df = pl.job_placement(wh.reader(), start=T, end=NOW, now=NOW).set_index("job_id")
    # every rack its own zone: J2 needs 1 rack and spans 2
    assert df.loc["J2", ["racks", "zones", "min_racks", "min_zones"]].tolist() == [2, 2, 1, 1]


def test_score_is_at_most_one_where_the_inventory_counts_fewer_gpus(wh):
    """A run given more GPUs on a node than the inventory counts (10 on n1 of 4): its
    size needs ceil(10 / 8) = 2 racks by the inventory, it spans 1; its score is 1, not
    (2 + 1) / (1 + 1), and it spans no extra rack."""
    wh.ingest("allocations", pd.DataFrame({
        "job_id": "big", "run_index": 0, "node": "n1", "gpu_index": range(10),
        "start_ts": T, "end_ts": T + H})).result()
    df = pl.job_placement(wh.reader(), start=T, end=NOW, now=NOW).set_index("job_id")
    assert df.loc["big", ["racks", "min_racks", "zones", "min_zones"]].tolist() == [1, 2, 1, 1]
    assert df.loc["big", "score"] == 1.0 and df.loc["big", "extra_racks"] == 0
    assert not df.loc["big", "misplaced"]


def test_a_partition_without_gpus_in_the_inventory_is_not_scored(wh):
    """Nodes whose inventory counts no GPUs (NULL) in a partition of their own (a second
    reader's case: the fewest racks divided by 0 stopped the page and the report): their
    run has no fewest racks or score and is not misplaced; the others are scored as
    before, and the fleet's mean score is theirs."""
    wh.ingest("nodes", pd.DataFrame({"node": ["x1", "x2"], "rack": ["r1", "r3"],
                                     "partition": "bare", "gpus": None})).result()
    wh.ingest("allocations", pd.DataFrame({
        "job_id": "X", "run_index": 0, "node": ["x1", "x2"], "gpu_index": 0,
        "start_ts": T, "end_ts": T + H})).result()
    df = pl.job_placement(wh.reader(), start=T, end=NOW, now=NOW).set_index("job_id")
    assert df.loc["X", ["racks", "zones"]].tolist() == [2, 2]
    assert df.loc["X", ["min_racks", "min_zones", "score"]].isna().all()
    assert df.loc["X", ["extra_racks", "extra_zones"]].tolist() == [0, 0]
    assert not df.loc["X", "misplaced"] and df.index[-1] == "X"  # unscored runs last
    assert df.loc["J2", "score"] == 0.5
    s = placement_runs.placed_runs(wh.reader(), start=T, end=NOW, now=NOW).summary
    assert s == pytest.approx({"runs": 3, "misplaced_runs": 1, "gpu_hours": 50.0,
                               "misplaced_gpu_hours": 16.0, "mean_score": 40 / 48})


def test_empty_warehouse_gives_empty_frames():
    w = Warehouse(":memory:")
    try:
        assert len(pl.job_placement(w.reader(), start=T, end=NOW, now=NOW)) == 0
        placed = placement_runs.placed_runs(w.reader(), start=T, end=NOW, now=NOW)
        assert len(placed.markers) == 0 and len(placed.worst) == 0
        assert placed.summary["runs"] == 0 and math.isnan(placed.summary["mean_score"])
        frag = pl.fragmentation(w.reader(), ticks=[T], usual={})
        assert len(frag) == 0 and len(frag.attrs["by_partition"]) == 0
        assert pl.usual_gpus(w.reader(), start=T, end=NOW) == {}
    finally:
        w.close()


def test_fleet_views_compose_the_pieces(wh):
    frag = pl.fleet_fragmentation(wh.reader(), start=T, end=NOW + H, now=NOW)
    # hourly T..T+3 and T+4 = now (J1 and J2 ended: n1, n2, n3, n5 free again)
    assert frag["free_gpus"].tolist() == [22, 14, 14, 22, 30]
    assert frag.attrs["usual_gpus"] == {"train": 8.0}
    waits = pw.waits_while_scattered(wh.reader(), start=T, end=NOW, now=NOW, min_gpus=10)
    assert pw.waits_summary(waits) == {"waited": 1, "scattered": 1, "pending_h": 3.0,
                                       "scattered_h": 2.0}


def test_weekly_report_figures_are_the_pages(wh):
    from warehouse.queries import weekly

    got = weekly.placement_figures(wh.reader, start=T, end=NOW, now=NOW, min_gpus=10)
    # stranded at T..T+4 h: 6 each (22 - 16, 14 - 8, 14 - 8, 22 - 16, 30 - 24)
    assert got == pytest.approx({"placement_score": 40 / 48, "misplaced_gpu_h": 16.0,
                                 "multi_node_runs": 2, "misplaced_runs": 1,
                                 "stranded_gpus": 6.0, "scattered_waits": 1,
                                 "large_waits": 1})


@pytest.mark.parametrize("racks, parts, want", [
    # rack and partition names that run together when joined as text stay apart
    (["r1", "gpur1"], ["gpu", None], {"gpu": 8, "": 8}),
    (["b1", "1", "1"], ["a", "ab", "ab"], {"a": 8, "ab": 16}),
    (["r1", "gpur1", "r9"], ["gpu", None, "x"], {"gpu": 8, "": 8, "x": 8}),
])
def test_fragmentation_groups_racks_within_their_partition(racks, parts, want):
    """Each partition's largest wholly free rack counts its own nodes only (a second
    reader found 'gpu'/'r1' and ''/'gpur1' merged into one rack, and a crash when a
    partition lost all its racks so)."""
    with Warehouse(":memory:") as w:
        names = sorted(set(racks))
        w.ingest("racks", pd.DataFrame({"rack": names, "zone": None, "row": 1, "x": 0.0,
                                        "y": 0.0})).result()
        w.ingest("nodes", pd.DataFrame({
            "node": [f"n{i}" for i in range(len(racks))], "rack": racks,
            "partition": parts, "gpus": 8})).result()
        got = pl.fragmentation(w.reader(), ticks=[NOW], usual={}).attrs["by_partition"]
        assert got.set_index("partition")["largest_rack_gpus"].to_dict() == want


def test_a_run_split_evenly_between_partitions_is_the_first_by_name():
    """A run holding as many GPUs in two partitions is placed, and counted in the usual
    size, in the first of them by name, each time, and in a named partition before nodes
    without one (before: whichever the hash grouping met first)."""
    with Warehouse(":memory:") as w:
        w.ingest("racks", pd.DataFrame({"rack": ["ra", "rb"], "zone": None, "row": 1,
                                        "x": 0.0, "y": 0.0})).result()
        w.ingest("nodes", pd.DataFrame({
            "node": ["na", "na2", "nb", "nc"], "rack": ["ra", "ra", "rb", "rb"],
            "partition": ["zeta", "zeta", "alpha", None], "gpus": 8})).result()

        def run(job, nodes, gpus):
            return [{"job_id": job, "run_index": 0, "node": node, "gpu_index": g,
                     "start_ts": T, "end_ts": T + H} for node in nodes for g in range(gpus)]

        rows = [r for k in range(40)  # 8 GPUs split evenly between zeta and alpha
                for r in run(f"J{k}", ("na", "nb") if k % 2 else ("nb", "na"), 4)]
        rows += [r for k in range(3) for r in run(f"Z{k}", ("na", "na2"), 8)]  # 16 in zeta
        rows += [r for k in range(5) for r in run(f"C{k}", ("nc", "na2"), 2)]  # zeta or ''
        w.ingest("allocations", pd.DataFrame(rows)).result()
        for _ in range(3):
            df = pl.job_placement(w.reader(), start=T, end=NOW, now=NOW, min_nodes=2)
            part = df.set_index("job_id")["partition"]
            assert len(df) == 48 and set(part[part.index.str.startswith("J")]) == {"alpha"}
            assert set(part[part.index.str.startswith("C")]) == {"zeta"}
            # alpha: the 40 even runs of 8; zeta: 3 of 16 and 5 of 4 (a median of 4)
            assert pl.usual_gpus(w.reader(), start=T, end=NOW) == {
                "alpha": 8.0, "zeta": 4.0, "": 8.0}
