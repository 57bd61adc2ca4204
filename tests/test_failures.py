"""Classification of failed runs on recorded evidence; lemon nodes; the fleet rate."""

import json
import re
from datetime import datetime, timedelta

import duckdb
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.runs import H, M, T, add_job, rows, run_refresh, topology, xid
from warehouse import Warehouse
from warehouse.analytics import Options
from warehouse.queries import failures as qf

# ---------------------------------------------------------------------------- tests

def test_each_kind_of_evidence_decides(wh):
    end = T + 5 * H
    # 1: a hardware XID on the run's GPU 2 min before the end, log says nothing useful
    add_job(wh, "1", [{"start": T, "end": end, "state": "FAILED", "nodes": ["n0"],
                       "reason": "srun: error: task 3 exited"}])
    xid(wh, end - 2 * M, "n0", 3, 48)
    # 2: infrastructure log wins over a hardware XID's reason
    add_job(wh, "2", [{"start": T, "end": end, "state": "FAILED", "nodes": ["n1"],
                       "reason": "NCCL WARN NET/IB : mlx5_0:1 port error: link down"}])
    xid(wh, end - M, "n1", 0, 79)
    # 3: a script error whose node had a hardware XID 20 minutes earlier (outside the
    # window) and one on a GPU the run did not hold: stays a script failure
    add_job(wh, "3", [{"start": T, "end": end, "state": "FAILED", "nodes": ["n2"],
                       "gpu_indices": [0, 1],
                       "reason": "ModuleNotFoundError: No module named 'flash_attn'"}])
    xid(wh, end - 20 * M, "n2", 0, 74)
    xid(wh, end - M, "n2", 5, 74)
    # 4: Slurm's state only
    add_job(wh, "4", [{"start": T, "end": end, "state": "NODE_FAIL", "exit_code": 0,
                       "nodes": ["n3"], "failed_node": "n3"}])
    add_job(wh, "5", [{"start": T, "end": end, "state": "TIMEOUT", "exit_code": 0}])
    # 6: only an application XID (page fault) inside the window after the end
    add_job(wh, "6", [{"start": T, "end": end, "state": "FAILED", "nodes": ["n1"],
                       "gpu_indices": [6]}])
    xid(wh, end + 3 * M, "n1", 6, 31)
    # 7: nothing but a signal; 8: completed (not a failure)
    add_job(wh, "7", [{"start": T, "end": end, "state": "FAILED", "exit_code": 0}])
    wh.ingest("runs", pd.DataFrame([{"job_id": "7", "run_index": 0, "signal": 9}])).result()
    add_job(wh, "8", [{"start": T, "end": end, "state": "COMPLETED"}])
    # 9-11: the rest of the ladder: out of memory, command not found, a bare exit code
    add_job(wh, "9", [{"start": T, "end": end, "state": "OUT_OF_MEMORY", "exit_code": 0}])
    add_job(wh, "10", [{"start": T, "end": end, "state": "FAILED", "exit_code": 127}])
    add_job(wh, "11", [{"start": T, "end": end, "state": "FAILED", "exit_code": 3}])

    assert run_refresh(wh)["failures_classified"] == 10
    got = {k[0]: (r.category, r.reason, r.source) for k, r in rows(wh).items()}
    assert got == {
        "1": ("infrastructure", "ECC error", "xid"),
        "2": ("infrastructure", "network error", "log"),
        "3": ("script", "import error", "log"),
        "4": ("infrastructure", "node failure", "state"),
        "5": ("scheduler", "time limit", "state"),
        "6": ("framework", "runtime error", "xid"),
        "7": ("unknown", "killed by signal 9", "exit"),
        "9": ("framework", "out of memory", "state"),
        "10": ("script", "command not found", "exit"),
        "11": ("unknown", "exit code 3", "exit"),
    }
    r = rows(wh)
    ev = json.loads(r[("1", 0)].evidence)
    assert [e["code"] for e in ev["events"]] == [48] and ev["events"][0]["gpu"] == 3
    assert list(r[("1", 0)].xids) == [48] and r[("1", 0)].node == "n0"
    assert r[("1", 0)].rack == "r0"
    assert json.loads(r[("2", 0)].evidence)["matched"].lower().startswith("net/ib")
    assert list(r[("3", 0)].xids) == []  # both XIDs excluded
    assert r[("4", 0)].node == "n3" and r[("4", 0)].rack == "r1"


def test_refresh_is_idempotent_and_incremental(wh):
    add_job(wh, "1", [{"start": T, "end": T + H, "state": "FAILED", "reason": "KeyError: 'x'"}])
    run_refresh(wh)
    before = wh.reader().execute("SELECT * EXCLUDE (classified_at) FROM failures").df()
    run_refresh(wh)
    after = wh.reader().execute("SELECT * EXCLUDE (classified_at) FROM failures").df()
    pd.testing.assert_frame_equal(before, after)
    # a week later the run is outside the recheck window and not classified again
    assert run_refresh(wh, now=T + 24 * 7 * H)["failures_classified"] == 0
    assert len(rows(wh)) == 1


def test_operator_rules_and_log_files(wh, tmp_path):
    rules = tmp_path / "rules.csv"
    rules.write_text("# local rules\npattern,category,reason\n"
                     "quota exceeded,infrastructure,S3/storage error\n")
    log = tmp_path / "slurm-9.err"
    log.write_text("step 100 loss 2.1\n" * 2000 + "OSError: Disk quota exceeded\n")
    add_job(wh, "9", [{"start": T, "end": T + H, "state": "FAILED"}])
    wh.write(lambda con: con.execute("INSERT INTO run_logs VALUES ('9', 0, ?)",
                                     [str(log)])).result()
    run_refresh(wh, settings=Options(rules_file=str(rules)))
    r = rows(wh)[("9", 0)]
    assert (r.category, r.reason) == ("infrastructure", "S3/storage error")
    assert "Disk quota exceeded" in json.loads(r.evidence)["log_tail"]
    # with the shipped rules the same tail is an OS error of the script
    run_refresh(wh)
    assert rows(wh)[("9", 0)].reason == "OS error"


_WORDS = st.sampled_from(["disk", "quota", "Quota", "nccl", "NCCL", "error", "link",
                          "down", "oom", "x"])


@settings(max_examples=25, deadline=None)
@given(rules=st.lists(st.lists(_WORDS, min_size=1, max_size=2).map(" ".join), min_size=0,
                      max_size=6),
       reasons=st.lists(st.one_of(st.none(), st.lists(_WORDS, max_size=5).map(" ".join)),
                        min_size=1, max_size=8))
def test_the_first_rule_a_text_matches_decides_as_each_rule_alone_would(
        tmp_path_factory, rules, reasons):
    """Operators' rules (issue 17: each is now a statement parameter, compiled once, not
    a pattern read from a column per run): a run's text takes the first rule (file order)
    whose pattern it contains, case-insensitively, with the text that matched, whatever
    the number of rules, none included; a text that no rule matches falls through."""
    from warehouse import Warehouse
    from warehouse.failures import load_rules, refresh_failures

    path = tmp_path_factory.mktemp("rules") / "rules.csv"
    path.write_text("pattern,category,reason\n" + "".join(
        f"{p},script,rule {i}\n" for i, p in enumerate(rules)))
    w = Warehouse(":memory:")
    topology(w)
    for i, reason in enumerate(reasons):
        add_job(w, f"j{i}", [{"start": T, "end": T + H, "state": "FAILED", "exit_code": 3,
                              "reason": reason}])
    o = Options()
    w.write(lambda con: refresh_failures(  # the failures alone, not the whole refresh
        con, T + 24 * H, recheck_from=T, rules=load_rules(str(path)),
        interval_h=o.checkpoint_interval_h, warmup_h=o.warmup_h,
        window_before=timedelta(minutes=o.window_before_min),
        window_after=timedelta(minutes=o.window_after_min))).result()
    got = rows(w)
    for i, reason in enumerate(reasons):
        r = got[(f"j{i}", 0)]
        first = next((k for k, p in enumerate(rules)
                      if reason is not None and p.lower() in reason.lower()), None)
        evidence = json.loads(r.evidence)
        if first is None:
            assert (r.source, r.reason, evidence["rule"]) == ("exit", "exit code 3", None)
            continue
        assert (r.source, r.category, r.reason) == ("log", "script", f"rule {first}")
        assert evidence["rule"] == rules[first]
        assert evidence["matched"].lower() == rules[first].lower()


def test_bad_rules_file_names_the_problem(wh, tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("pattern,category\nfoo,\n")
    with pytest.raises(ValueError, match="missing columns"):
        run_refresh(wh, settings=Options(rules_file=str(bad)))


def test_rules_of_any_priorities_classify_in_their_order(wh):
    """A caller's rules whose priorities are not 0..n-1 (a filtered or reordered frame)
    classify in priority order: the statement numbers its rule parameters 0..n-1."""
    from warehouse.failures import refresh_failures

    add_job(wh, "9", [{"start": T, "end": T + H, "state": "FAILED",
                       "reason": "OSError: Disk quota exceeded"}])
    rules = pd.DataFrame({"priority": [7, 3, 40], "pattern": ["exceeded", "disk quota", "x"],
                          "category": ["script", "infrastructure", "script"],
                          "reason": ["late", "first", "never"]})
    o = Options()
    wh.write(lambda con: refresh_failures(
        con, T + 24 * H, recheck_from=T, rules=rules, interval_h=o.checkpoint_interval_h,
        warmup_h=o.warmup_h, window_before=timedelta(minutes=o.window_before_min),
        window_after=timedelta(minutes=o.window_after_min))).result()
    assert rows(wh)[("9", 0)].reason == "first"


def test_a_rule_re2_rejects_is_left_out_and_the_others_classify(wh, tmp_path, caplog):
    """A pattern RE2 cannot compile made every analytics refresh fail (failures, energy,
    usage and stragglers alike): the rule is left out, with a warning naming it and why,
    and the rules after it still decide."""
    rules = tmp_path / "rules.csv"
    rules.write_text("pattern,category,reason\n(quota,infrastructure,broken\n"
                     "a(?<=b),infrastructure,lookbehind\n"
                     "quota exceeded,infrastructure,S3/storage error\n"
                     "disk quota,script,OS error\n")
    add_job(wh, "9", [{"start": T, "end": T + H, "state": "FAILED",
                       "reason": "OSError: Disk quota exceeded"}])
    with caplog.at_level("WARNING", logger="warehouse.failures"):
        run_refresh(wh, settings=Options(rules_file=str(rules)))
    r = rows(wh)[("9", 0)]  # the first rule left that matches, with its own category
    assert (r.category, r.reason) == ("infrastructure", "S3/storage error")
    assert json.loads(r.evidence)["rule"] == "quota exceeded"
    warned = [r.getMessage() for r in caplog.records]
    assert any("rule 1 ('(quota')" in m and "missing )" in m for m in warned)
    assert any("rule 2 ('a(?<=b)')" in m for m in warned)


_CELL = st.text(alphabet=st.characters(blacklist_characters="\r\n,\"#",
                                       blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode) | st.lists(
    st.lists(_CELL, min_size=1, max_size=4).map(",".join), max_size=5).map(
    lambda rows: ("pattern,category,reason\n" + "\n".join(rows)).encode()))
def test_a_rules_file_loads_or_fails_naming_itself(tmp_path_factory, data):
    """Whatever a rules file holds (bytes that are not UTF-8 too), it loads or fails with
    ValueError naming the file; loaded, its rules are the file's rows whose pattern RE2
    compiles, in file order, each with its own category and reason."""
    from warehouse.failures import load_rules

    path = tmp_path_factory.mktemp("rules") / "rules.csv"
    path.write_bytes(data)
    try:
        rules = load_rules(str(path))
    except ValueError as exc:
        assert str(path) in str(exc)
        return
    assert list(rules.columns) == ["priority", "pattern", "category", "reason"]
    assert list(rules["priority"]) == list(range(len(rules)))
    lines = [ln for ln in data.decode().splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines or lines[0] != "pattern,category,reason":
        return  # another header: only the shape above is asserted
    rows_ = [(ln.split(",") + ["", ""])[:3] for ln in lines[1:]]
    with duckdb.connect() as con:
        def compiles(pattern):
            try:
                con.execute("SELECT regexp_matches('', $p)", {"p": "(?i)" + pattern})
                return True
            except duckdb.Error:
                return False
        want = [tuple(r) for r in rows_ if compiles(r[0])]
    assert list(rules[["pattern", "category", "reason"]].itertuples(index=False,
                                                                    name=None)) == want


def test_lemon_nodes_and_failure_rate(wh):
    # 8 one-node runs of 10 h each on n0..n3; n0 fails 4 times with XIDs, n1 once
    for i in range(8):
        node = f"n{i % 4}"
        start = T + i * 11 * H
        fail = node == "n0" or (node == "n1" and i == 1)
        add_job(wh, f"j{i}", [{"start": start, "end": start + 10 * H, "nodes": [node],
                               "state": "FAILED" if fail else "COMPLETED",
                               "failed_node": node if fail else None,
                               "reason": "GPU has fallen off the bus" if fail else None}])
        if node == "n0":
            xid(wh, start + 10 * H - M, "n0", 0, 79)
    for i in range(8, 14):  # n0 fails two more short runs
        start = T + 100 * H + i * H
        add_job(wh, f"j{i}", [{"start": start, "end": start + 0.5 * H, "nodes": ["n0"],
                               "state": "NODE_FAIL", "failed_node": "n0"}])
    run_refresh(wh, now=T + 200 * H)
    cur = wh.reader()
    rate = qf.failure_rate(cur, start=T, end=T + 200 * H)
    node_days = (8 * 10 + 6 * 0.5) / 24
    assert rate["failures"] == 2 + 6 + 1  # n0: runs i=0, 4 and 6 short ones; n1: one
    assert rate["node_days"] == pytest.approx(node_days)
    assert rate["r_f_per_1000_node_days"] == pytest.approx(1000 * 9 / node_days)
    assert rate["r_f_low"] < rate["r_f_per_1000_node_days"] < rate["r_f_high"]
    mttf = rate["mttf"].set_index("gpus")
    assert mttf.loc[8, "mttf_h"] == pytest.approx(24 / (9 / node_days))
    lemons = qf.lemon_nodes(cur, start=T, end=T + 200 * H, min_failures=3, p_value=0.05)
    top = lemons.iloc[0]
    assert top["node"] == "n0" and bool(top["lemon"]) and top["infra_failures"] == 8
    assert top["xids"] == 2 and list(top["xid_codes"]) == [79]
    assert not lemons.loc[lemons["node"] != "n0", "lemon"].any()
    by_rack = qf.failures_by(cur, start=T, end=T + 200 * H, by="rack").set_index("rack")
    assert by_rack.loc["r0", "failures"] == 8 and by_rack.loc["r1", "failures"] == 1
    assert len(qf.failures(cur, start=T, end=T + 200 * H, category="infrastructure")) == 9


@pytest.mark.slow
def test_simulated_failures_are_classified_into_their_true_category():
    sim = pytest.importorskip("collector.simulator")
    from collector.simulator import failures as truth

    patterns = [(re.compile(re.escape(r.log).replace(r"\{node\}", ".*").replace(
        r"\{gpu\}", ".*")), r.category) for r in truth.ALL_REASONS]
    anchor = datetime(2026, 11, 2)
    wh = Warehouse(":memory:")
    try:
        cluster = sim.Cluster(sim.SimConfig(racks=2), anchor=anchor)
        cluster.backfill(lambda kind, t: wh.ingest(kind, t).result(), anchor,
                         anchor + timedelta(days=2), progress=False)
        run_refresh(wh, now=anchor + timedelta(days=2))
        df = wh.reader().execute(
            "SELECT f.category, r.reason FROM failures f JOIN job_runs r "
            "USING (job_id, run_index) WHERE r.reason IS NOT NULL").df()
        expected = [next((c for p, c in patterns if p.fullmatch(text)), None)
                    for text in df["reason"]]
        known = [(e, c) for e, c in zip(expected, df["category"], strict=True) if e]
        assert len(known) >= 20
        right = sum(e == c for e, c in known)
        assert right / len(known) >= 0.9
    finally:
        wh.close()


def test_every_failure_held_in_one_rack_is_placed_in_that_rack():
    with Warehouse(":memory:") as wh:
        topology(wh, nodes=4, racks=2)  # n0, n2 in r0; n1, n3 in r1
        add_job(wh, "s1", [{"start": T, "end": T + H, "state": "FAILED",
                            "reason": "FileNotFoundError: /data/shard-7", "nodes": ["n1"]}])
        add_job(wh, "s2", [{"start": T, "end": T + H, "state": "FAILED",
                            "reason": "KeyError: 'lr'", "nodes": ["n0", "n2"]}])
        add_job(wh, "s3", [{"start": T, "end": T + H, "state": "FAILED",
                            "reason": "ImportError: no module named apex",
                            "nodes": ["n0", "n1"]}])
        run_refresh(wh)
        got = {r.job_id: (r.rack, r.node, r.category) for r in rows(wh).values()}
    assert got["s1"][0] == "r1" and got["s2"][0] == "r0"
    assert pd.isna(got["s3"][0])  # across racks and no failed node: no rack to blame
    assert all(pd.isna(node) for _, node, _ in got.values())  # a script error names no node
    assert {cat for *_, cat in got.values()} == {"script"}
