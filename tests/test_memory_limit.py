"""warehouse.memory_limit_mb: validated, and applied to DuckDB when the warehouse opens."""

import pytest

from gpulens.config import ConfigError, load
from warehouse import Warehouse, meta


def test_default_is_256_mib():
    # 256: at 24,576 GPUs the live hour 1.1 GiB -> 935 MiB, the callbacks no slower (issue
    # 17, twentieth round; docs/performance.md)
    assert load(None, env={})["warehouse.memory_limit_mb"] == 256


def test_warehouse_opened_with_a_limit_reports_it(tmp_path):
    with Warehouse(tmp_path / "w.duckdb", memory_limit_mb=512) as wh:
        assert meta.memory_limit(wh.reader()) == "512.0 MiB"
    with Warehouse(":memory:", memory_limit_mb=1000 ** 3 / 2 ** 20) as wh:  # 1 GB
        assert meta.memory_limit(wh.reader()) == "953.6 MiB"


@pytest.mark.parametrize("limit", [None, 0])
def test_none_or_zero_keeps_duckdbs_default(limit):
    with Warehouse(":memory:") as plain, Warehouse(":memory:", memory_limit_mb=limit) as wh:
        assert meta.memory_limit(wh.reader()) == meta.memory_limit(plain.reader())


def test_second_open_of_the_same_file_in_one_process_is_not_refused(tmp_path):
    # the limit is SET, not given as connect config: DuckDB refuses a second connection
    # to an open file whose configuration differs
    path = tmp_path / "w.duckdb"
    with Warehouse(path, memory_limit_mb=256), Warehouse(path) as other:
        assert meta.memory_limit(other.reader()) == "256.0 MiB"


def test_limit_from_the_file_and_the_environment(tmp_path):
    p = tmp_path / "gpulens.toml"
    p.write_text("[warehouse]\nmemory_limit_mb = 0\n")
    assert load(p, env={})["warehouse.memory_limit_mb"] == 0
    cfg = load(None, env={"GPULENS_WAREHOUSE_MEMORY_LIMIT_MB": "768"})
    assert cfg["warehouse.memory_limit_mb"] == 768


@pytest.mark.parametrize("value, message", [
    ("-1", "warehouse.memory_limit_mb = -1 is out of range; expected 0 (DuckDB's default"),
    ("16", "warehouse.memory_limit_mb = 16 is out of range; expected 0 (DuckDB's default, "
           "80 % of RAM) or a number of MiB from 64 up, e.g. 1024"),
    ("1.5", "warehouse.memory_limit_mb = 1.5 is a float; expected 0"),
    ("\"1GB\"", "warehouse.memory_limit_mb = '1GB' is a str; expected 0"),
])
def test_bad_limit_is_a_one_line_error_naming_the_key(tmp_path, value, message):
    p = tmp_path / "gpulens.toml"
    p.write_text(f"[warehouse]\nmemory_limit_mb = {value}\n")
    with pytest.raises(ConfigError) as err:
        load(p, env={})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_environment_limit_is_named():
    with pytest.raises(ConfigError, match="GPULENS_WAREHOUSE_MEMORY_LIMIT_MB = '1GB'"):
        load(None, env={"GPULENS_WAREHOUSE_MEMORY_LIMIT_MB": "1GB"})


def test_cli_opens_the_warehouse_with_the_configured_limit(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import warehouse
    from gpulens.cli_export import export

    seen = []

    class Recording(Warehouse):
        def __init__(self, path, **kw):
            super().__init__(path, **kw)
            seen.append(meta.memory_limit(self.reader()))

    monkeypatch.setattr(warehouse, "Warehouse", Recording)
    monkeypatch.setenv("GPULENS_WAREHOUSE_MEMORY_LIMIT_MB", "384")
    res = CliRunner().invoke(export, ["parquet", "--since", "2026-11-18", "--until",
                                      "2026-11-19", "--out", str(tmp_path / "out"),
                                      "--db", str(tmp_path / "w.duckdb")])
    assert res.exit_code == 0, res.output
    assert seen == ["384.0 MiB"]
