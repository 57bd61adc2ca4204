import pytest

from gpulens.cli import main


def test_bad_configuration_exits_2_with_one_line(tmp_path, capsys):
    cfg = tmp_path / "g.toml"
    cfg.write_text("[service]\nport = 99999\n")
    assert main(["serve", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("gpulens: error:") and "service.port = 99999" in err


def test_database_from_newer_version_exits_2(tmp_path, capsys):
    import duckdb

    from warehouse import Warehouse
    from warehouse.migrate import available

    db = tmp_path / "new.duckdb"
    Warehouse(db).close()
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO schema_migrations VALUES (?, 'future', now()::TIMESTAMP)",
                [available()[-1].version + 1])
    con.close()
    assert main(["demo", "--db", str(db), "--port", "0", "--history-days", "0"]) == 2
    assert "newer gpulens" in capsys.readouterr().err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "gpulens" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore::getpass.GetPassWarning")
def test_hash_password_prints_a_hash_the_dashboard_accepts(monkeypatch, capsys):
    from dashboard.auth import AuthConfig, parse_users
    from dashboard.login import check_login

    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("s3cret\ns3cret\n"))
    assert main(["hash-password"]) == 0
    digest = capsys.readouterr().out.strip().splitlines()[-1]
    assert "s3cret" not in digest
    config = AuthConfig(users=parse_users(f"alice:{digest}"))
    assert check_login(config, "alice", "s3cret")
    assert not check_login(config, "alice", "guess")
