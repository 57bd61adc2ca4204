from pathlib import Path

import pytest

from gpulens.config import SETTINGS, ConfigError, load
from gpulens.config_doc import render_markdown, render_toml

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text):
    p = tmp_path / "gpulens.toml"
    p.write_text(text)
    return p


def test_defaults_without_a_file():
    cfg = load(None, env={})
    assert cfg["service.host"] == "127.0.0.1"
    assert cfg["service.port"] == 8050


def test_file_values_and_environment_overrides(tmp_path):
    p = write(tmp_path, "[service]\nport = 9000\n[retention]\nraw_days = 3\n")
    cfg = load(p, env={"GPULENS_SERVICE_HOST": "0.0.0.0"})
    assert (cfg["service.port"], cfg["retention.raw_days"], cfg["service.host"]) == (
        9000, 3.0, "0.0.0.0")
    assert cfg.section("retention")["raw_days"] == 3.0


@pytest.mark.parametrize("text, message", [
    ("[service]\nprot = 1\n", "unknown setting 'service.prot'"),
    ("[service]\nport = \"8050\"\n", "service.port = '8050' is a str; expected an integer"),
    ("[service]\nport = 70000\n", "service.port = 70000 is out of range; expected an integer from 0 to 65535"),
    ("[collect]\nsource = \"snmp\"\n", "collect.source = 'snmp' is out of range"),
    ("[retention]\nraw_days = true\n", "retention.raw_days = True is a bool"),
    ("[service\n", "not valid TOML"),
])
def test_bad_configuration_names_key_value_and_expectation(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load(p, env={})
    assert message in str(err.value)
    assert str(p) in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_environment_value_is_named():
    with pytest.raises(ConfigError, match="GPULENS_SERVICE_PORT = 'eighty'"):
        load(None, env={"GPULENS_SERVICE_PORT": "eighty"})


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="no such file; copy gpulens.example.toml"):
        load(tmp_path / "absent.toml", env={})


def test_example_file_is_current_and_loads():
    example = ROOT / "gpulens.example.toml"
    assert example.read_text() == render_toml(), "run: python -m gpulens.config_doc toml > gpulens.example.toml"
    cfg = load(example, env={})
    assert all(cfg[s.name] == s.default for s in SETTINGS)


def test_every_setting_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert render_markdown() in readme, "run: python -m gpulens.config_doc markdown, paste into README.md"
