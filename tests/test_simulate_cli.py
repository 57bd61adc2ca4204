"""gpulens simulate (issue 16): a simulated warehouse written without serving."""

import duckdb

from gpulens.cli import main
from gpulens.settings import default
from gpulens.simulate import PROFILE_KEY, PROFILES


def test_simulate_writes_a_tiny_cluster_ready_for_the_dashboard(tmp_path, capsys):
    db = tmp_path / "sim.duckdb"
    assert main(["simulate", "--profile", "realistic", "--days", "0.1", "--db", str(db),
                 "--racks", "1", "--nodes-per-rack", "2", "--seed", "3"]) == 0
    out = capsys.readouterr()
    assert "profile realistic" in out.out and "simulating history" in out.err  # the bar
    con = duckdb.connect(str(db), read_only=True)
    n, nodes, gpus, lo, hi = con.execute(
        "SELECT count(*), count(DISTINCT node), count(DISTINCT gpu_uuid), min(ts), max(ts) "
        "FROM gpu_samples").fetchone()
    per_node = default("simulator.gpus_per_node")
    assert nodes == 2 and gpus == 2 * per_node
    span_s = (hi - lo).total_seconds() + default("collect.interval_s")
    assert abs(span_s - 0.1 * 86400) <= default("collect.interval_s")  # 0.1 day, no more
    assert n == gpus * span_s / default("collect.interval_s")  # every GPU at every tick
    assert con.execute("SELECT count(*) FROM gpu_samples_1m").fetchone()[0] > 0  # rolled up
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] > 0
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta[PROFILE_KEY] == "realistic"
    assert '"infra_failures_per_1000_node_days": 4.4' in meta["simulator.world"]
    assert "stragglers.computed_until" in meta  # the analytics refresh ran


def test_unknown_profile_is_refused(tmp_path, capsys):
    db = tmp_path / "sim.duckdb"
    assert main(["simulate", "--profile", "nope", "--days", "0.1", "--db", str(db)]) == 2
    assert "nope" in capsys.readouterr().err
    assert not db.exists()


def test_profiles_declare_the_demo_default_and_meta_rate():
    rate = "simulator.infra_failures_per_1000_node_days"
    # the demo is the default world: its profile and the setting's default agree
    assert PROFILES["demo"].settings[rate] == default(rate)
    assert 2.34 <= PROFILES["realistic"].settings[rate] <= 6.50  # Meta's published range


def test_another_profile_on_the_same_warehouse_is_refused(tmp_path, capsys):
    db = tmp_path / "sim.duckdb"
    tiny = ["--days", "0.05", "--db", str(db), "--racks", "1", "--nodes-per-rack", "1"]
    assert main(["simulate", "--profile", "demo", *tiny]) == 0
    capsys.readouterr()
    assert main(["simulate", "--profile", "realistic", *tiny]) == 2  # another world
    err = capsys.readouterr().err
    assert err.startswith("gpulens: error:") and "other simulator settings" in err
    con = duckdb.connect(str(db), read_only=True)
    assert dict(con.execute("SELECT key, value FROM meta").fetchall())[PROFILE_KEY] == "demo"
