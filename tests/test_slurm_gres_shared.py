"""What a Slurm job holds of each GPU of a node: shards, MPS and MIG instances (issue 21).

Formats from Slurm's source and public captures (tests/fixtures/slurm/
gres_detail_captures.json names them): per GPU ``allocated/configured`` for shared GRES
since 23.11.2, GPU indices before; MIG instances as GRES device indices, mapped to (GPU,
GPU instance) through the node's layout in slurmd's autodetect order, and refused where
the GRES type's profile says that order does not hold.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.slurm import parse_sacct, parse_squeue
from collector.slurm_fields import SlurmParseError
from collector.slurm_gres import Device, Holding, device_order, node_holdings

pytestmark = pytest.mark.property

CAPTURES = json.loads((Path(__file__).parent / "fixtures" / "slurm"
                       / "gres_detail_captures.json").read_text())
NOW = datetime(2026, 11, 2, 12, 0)

#: The captured node r4519u01n01: four A100 80GB, each 2x 2g.20gb (GPU instances 3, 4)
#: and 3x 1g.10gb (instances 9, 10, 11): 20 GRES devices.
A100_80 = device_order(range(4), [(g, i, "2g.20gb") for g in range(4) for i in (3, 4)]
                       + [(g, i, "1g.10gb") for g in range(4) for i in (9, 10, 11)])


def test_device_order_is_whole_gpus_then_instances_by_gpu_and_instance():
    devs = device_order([0, 1, 2], [(2, 5, "1g.10gb"), (1, 1, "4g.40gb"), (2, 1, "3g.40gb")])
    assert devs == (Device(0), Device(1, 1, "4g.40gb"), Device(2, 1, "3g.40gb"),
                    Device(2, 5, "1g.10gb"))
    assert [(d.gpu_index, d.gpu_i_id) for d in A100_80[:6]] == [
        (0, 3), (0, 4), (0, 9), (0, 10), (0, 11), (1, 3)]


@pytest.mark.parametrize(("entry", "expected"), [
    # 23.11.2 on: per GPU allocated/configured
    ("shard:8(0/5,5/5,3/5,0/5)", [Holding(1, share=1.0), Holding(2, share=0.6)]),
    ("mps:50(50/100,0/100)", [Holding(0, share=0.5)]),
    ("shard:a100:1(0/4,1/4)", [Holding(1, share=0.25)]),
    # before: the GPUs only (share unknown: split by seconds held)
    ("mps:1(IDX:0)", [Holding(0)]),
    ("shard:2(IDX:1)", [Holding(1)]),
    ("shard(CNT:2)", []),
    ("gpu(CNT:2)", []),
    ("gpu:h100:2(IDX:0-1),shard:1(0/4,0/4,1/4)",
     [Holding(0, devices=1), Holding(1, devices=1), Holding(2, share=0.25)]),
])
def test_shared_gres(entry, expected):
    assert node_holdings(entry, max_index=8) == expected


def test_shared_gres_refuses_counts_it_cannot_read():
    for bad in ("shard:1(5/4)", "shard:1(1/4,x)", "mps:1(1/0)", "shard:9(" + "1/4," * 9 + ")"):
        with pytest.raises(SlurmParseError, match="gres_detail on n1") as err:
            node_holdings(bad, "gres_detail on n1", max_index=8)
        assert err.value.reason == "gres_detail"


def test_captured_mig_entries_map_or_are_refused():
    # IDX 0 is a 20gb instance in both Slurm's and the autodetect order: GPU 0, GI 3
    ok, both, grouped, whole = CAPTURES["jobperf"]
    assert node_holdings(ok, devices=A100_80) == [Holding(0, (3,), devices=1)]
    # IDX 8 (10gb) is GPU 1's instance 10 in the autodetect order: a 10gb, accepted
    assert node_holdings(both, devices=A100_80) == [Holding(0, (3,), devices=1),
                                                    Holding(1, (10,), devices=1)]
    # this site numbers its 20gb instances 0-7 (types grouped, a hand-written gres.conf):
    # IDX 3 is a 10gb instance in the autodetect order, so the entry is refused
    with pytest.raises(SlurmParseError, match="otherwise") as err:
        node_holdings(grouped, "gres_detail on r4519u01n01", devices=A100_80)
    assert err.value.reason == "gres_mig" and "r4519u01n01" in str(err.value)
    assert node_holdings(whole, max_index=4) == [Holding(g, devices=1) for g in range(4)]


def test_mig_profiles_in_the_type_and_unknown_layouts():
    devs = device_order([0, 1], [(1, 1, "3g.40gb"), (1, 2, "2g.20gb"), (1, 3, "1g.10gb")])
    assert node_holdings("gpu:a100_3g.40gb:1(IDX:1),gpu:a100_1g.10gb:1(IDX:3)",
                         devices=devs) == [Holding(1, (1, 3), devices=2)]
    assert node_holdings("gpu:2(IDX:0-1)", devices=devs) == [
        Holding(0, devices=1), Holding(1, (1,), devices=1)]
    with pytest.raises(SlurmParseError, match="otherwise"):
        node_holdings("gpu:a100_1g.10gb:1(IDX:1)", devices=devs)
    with pytest.raises(SlurmParseError, match="MIG layout is unknown") as err:
        node_holdings("gpu:nvidia_a100_3g.40gb:1(IDX:1)", max_index=8)
    assert err.value.reason == "gres_mig"
    with pytest.raises(SlurmParseError, match="beyond the node's 4 GPU devices"):
        node_holdings("gpu:1(IDX:4)", devices=devs)


def _squeue(detail: str) -> dict:
    return {"jobs": [{"job_id": 7, "job_state": "RUNNING", "start_time": 1762084800,
                      "nodes": "m1", "node_count": 1, "gres_detail": [detail],
                      "tres_alloc_str": "cpu=4,gres/shard=2"}]}


def test_squeue_writes_shares_and_instances_into_allocations():
    b = parse_squeue(_squeue("shard:2(1/4,1/2)"), NOW)
    rows = b.allocations.to_pylist()
    assert [(r["gpu_index"], r["share"], r["gpu_i_ids"]) for r in rows] == [
        (0, 0.25, None), (1, 0.5, None)]
    devs = {"m1": device_order([0], [(0, 1, "3g.40gb"), (0, 2, "3g.40gb")])}
    b = parse_squeue(_squeue("gpu:a100_3g.40gb:2(IDX:0-1)"), NOW, devices=devs)
    assert [(r["gpu_index"], r["share"], r["gpu_i_ids"]) for r in
            b.allocations.to_pylist()] == [(0, None, [1, 2])]
    assert b.jobs["gpus"].to_pylist() == [2]  # Slurm counts MIG devices as GPUs
    # a MIG type on a node whose layout gpulens does not know: counted, no allocation
    b = parse_squeue(_squeue("gpu:a100_3g.40gb:1(IDX:1)"), NOW)
    assert b.allocations.num_rows == 0 and b.dropped == {"squeue.gres_mig": 1}
    assert "m1" in b.problems[0]


ITEMS = st.one_of(
    st.sampled_from(CAPTURES["jobperf"] + CAPTURES["slurm_test40.3"]
                    + CAPTURES["slurm_source"]),
    st.builds(lambda n, t, c, body: f"{n}{t}:{c}({body})",
              st.sampled_from(["gpu", "shard", "mps", "gres/gpu", "vgpu"]),
              st.sampled_from(["", ":a100", ":a100_3g.40gb", ":a100.MIG.10gb", ":1g.10gb"]),
              st.integers(-2, 40),
              st.one_of(st.from_regex(r"IDX:[0-9,\-N/A]{0,12}", fullmatch=True),
                        st.from_regex(r"(CNT:)?[0-9\-]{0,3}(/[0-9]{0,3})?"
                                      r"(,[0-9\-]{0,2}/[0-9]{0,2}){0,9}", fullmatch=True))),
    st.text(max_size=30))


@given(st.lists(ITEMS, max_size=4), st.booleans())
def test_node_holdings_fails_only_with_its_documented_error(items, mig):
    entry = ",".join(items)
    devices = A100_80 if mig else None
    try:
        held = node_holdings(entry, "gres_detail on n9", devices=devices, max_index=8)
    except SlurmParseError as err:
        assert err.reason in ("gres_detail", "gres_mig") and "n9" in str(err)
        return
    gpus = [h.gpu_index for h in held]
    assert gpus == sorted(set(gpus)) and all(0 <= g < (4 if mig else 8) for g in gpus)
    for h in held:
        assert h.share is None or 0 < h.share <= 1
        assert h.gpu_i_ids is None or (mig and set(h.gpu_i_ids) <= {3, 4, 9, 10, 11})
        assert not (h.share is not None and h.gpu_i_ids)


def test_the_slurm_source_places_mig_jobs_with_the_warehouses_layout(wh):
    # the exporters saw node m1 with GPU 0 whole and GPU 1 split into instances 1 (3g)
    # and 2 (4g); squeue's IDX 2 is then GPU 1's instance 2
    import pandas as pd

    from collector.slurm_source import SlurmSource
    from warehouse.mig import mig_layout

    ts = datetime(2026, 11, 2, 11, 59)
    wh.ingest("samples", pd.DataFrame([{"ts": ts, "node": "m1", "gpu_index": g,
                                        "power_w": 100.0} for g in (0, 1)])).result()
    wh.ingest("mig_samples", pd.DataFrame([
        {"ts": ts, "node": "m1", "gpu_index": 1, "gpu_i_id": gi, "gpu_i_profile": p}
        for gi, p in ((1, "3g.40gb"), (2, "4g.40gb"))])).result()
    assert mig_layout(wh.reader(), NOW) == {
        "m1": ([0, 1], [(1, 1, "3g.40gb"), (1, 2, "4g.40gb")])}
    assert mig_layout(wh.reader(), NOW + timedelta(hours=1)) == {}  # too old
    doc = json.dumps(_squeue("gpu:a100_4g.40gb:1(IDX:2)"))
    src = SlurmSource(sacct="", run=lambda argv: doc,
                      mig_layout=lambda at: mig_layout(wh.reader(), at))
    allocs = dict(src.collect(NOW))["allocations"].to_pylist()
    assert [(a["node"], a["gpu_index"], a["gpu_i_ids"]) for a in allocs] == [("m1", 1, [2])]
    # a layout that cannot be read costs the MIG jobs only (refused, counted)
    broken = SlurmSource(sacct="", run=lambda argv: doc, mig_layout=lambda at: 1 / 0)
    assert dict(broken.collect(NOW))["allocations"].num_rows == 0
    assert broken.dropped.as_dict() == {"squeue.gres_mig": 1}


@pytest.mark.parametrize(("kind", "gpus"), [("shard", [0, 1]), ("mps", [0, 0])])
def test_real_slurm_22_05_shard_and_mps_jobs_hold_their_gpus(kind, gpus):
    # captured from Slurm 22.05.8 (tests/fixtures/slurm/README.md): 4 GPUs with 4 shards
    # (or MPS 100) each; job 1 holds 2 shards of GPU 0 (MPS 50), job 2 3 shards of GPU 1
    # (MPS 25 of GPU 0): `shard:3(IDX:1)`, 22.05 prints the GPU, not the share; jobs 3
    # and 4 are pending
    doc = (Path(__file__).parent / "fixtures" / "slurm" / f"squeue_22.05_{kind}.json")
    b = parse_squeue(doc.read_text(), datetime(2026, 11, 23, 5, 0))
    rows = [(a["job_id"], a["node"], a["gpu_index"], a["share"], a["gpu_i_ids"])
            for a in b.allocations.to_pylist()]
    assert rows == [("1", "node1", gpus[0], None, None), ("2", "node1", gpus[1], None, None)]
    assert b.dropped == {}
    assert b.jobs["gpus"].to_pylist() == [None, None, 1, None]  # shares are not GPUs


def test_the_service_gives_the_slurm_source_the_warehouses_mig_layout(tmp_path, wh):
    import pandas as pd

    from gpulens.config import load
    from gpulens.sources import build_sources

    cfg = tmp_path / "gpulens.toml"
    cfg.write_text('[collect]\nsource = "slurm"\n')
    (src,) = build_sources(load(cfg, env={}), wh, now=NOW)
    ts = NOW - timedelta(minutes=1)
    wh.ingest("samples", pd.DataFrame([{"ts": ts, "node": "m1", "gpu_index": 0}])).result()
    wh.ingest("mig_samples", pd.DataFrame([{"ts": ts, "node": "m1", "gpu_index": 0,
                                            "gpu_i_id": 7, "gpu_i_profile": "1g.10gb"}])
              ).result()
    assert src._devices(NOW) == {"m1": (Device(0, 7, "1g.10gb"),)}


def _sacct_fixture() -> str:
    return (Path(__file__).parent / "fixtures" / "slurm" / "sacct_24.05.json").read_text()


def test_sacct_derives_no_whole_node_allocations_on_a_mig_node():
    # Slurm counts MIG instances as GPUs: 8 of them on a node of 8 MIG GPUs are not the
    # whole node, so slurm.gpus_per_node must not turn them into GPUs 0-7 (issue 21 review)
    whole = parse_sacct(_sacct_fixture(), gpus_per_node=8).allocations.to_pylist()
    assert {(a["job_id"], a["run_index"], a["node"]) for a in whole} >= {
        ("4090", 1, "gpu010"), ("4090", 1, "gpu011"), ("4092", 0, "gpu005")}
    b = parse_sacct(_sacct_fixture(), gpus_per_node=8, mig_nodes={"gpu011", "gpu005"})
    mig_runs = {(a["job_id"], a["run_index"]) for a in whole
                if a["node"] in ("gpu011", "gpu005")}
    assert mig_runs == {("4090", 1), ("4090", 2), ("4092", 0)}
    assert b.allocations.to_pylist() == [
        a for a in whole if (a["job_id"], a["run_index"]) not in mig_runs]  # run 0 stays
    # the source gives sacct the nodes its MIG layout knows
    from collector.slurm_source import SlurmSource

    def run(argv):
        return '{"jobs": []}' if argv[0] == "squeue" else _sacct_fixture()

    src = SlurmSource(run=run, gpus_per_node=8, mig_layout=lambda at: {
        "gpu005": ([0], [(0, 1, "7g.80gb")])})
    got = [a for kind, t in src.collect(NOW) if kind == "allocations" for a in t.to_pylist()]
    assert {a["node"] for a in got} == {"gpu010", "gpu011", "gpu012", "gpu013"}
