from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    assert cfg["cluster.name"] == "default"


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
    ("[cluster]\nname = \"rsc 1\"\n", "cluster.name = 'rsc 1' is out of range"),
    ("[cluster]\nname = \"a/b\"\n", "cluster.name = 'a/b' is out of range"),
    ("[cluster]\nname = \"..\"\n", "cluster.name = '..' is out of range"),
    ("[cluster]\nname = \"\"\n", "cluster.name = '' is out of range"),
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


@pytest.mark.parametrize("text, message", [
    ("[retention]\nraw_days = inf\n", "retention.raw_days = inf is not a finite number"),
    ("[retention]\nraw_days = 1000000\n",
     "retention.raw_days = 1000000.0 is longer than 100 years (36525 days)"),
    ("[retention]\nhour_days = nan\n", "retention.hour_days = nan is not a finite number"),
    ("[alerts.rack_cooling]\nmin_z = nan\n", "alerts.rack_cooling.min_z = nan is not a finite"),
    ("[alerts.gpu_temp]\nthreshold = inf\n", "alerts.gpu_temp.threshold = inf is not a finite"),
    ("[alerts.gpu_temp]\nhold_s = 1e12\n", "alerts.gpu_temp.hold_s = 1000000000000.0 is longer"),
    ("[energy]\npue = -inf\n", "energy.pue = -inf is not a finite number"),
    (f"[reports]\ntimezone = \"{'x' * 10_000}\"\n",
     "reports.timezone = 'xxxx"),
    (f"[reports]\ntimezone = \"{'Europe/' * 150}\"\n", "is out of range; expected an IANA"),
])
def test_non_finite_overlong_and_oversized_values_are_refused(tmp_path, text, message):
    """Issue #13: each of these was accepted (or raised OSError) and then broke a job."""
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load(p, env={})
    assert message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_environment_values_pass_the_same_limits():
    with pytest.raises(ConfigError, match="retention.raw_days = inf is not a finite number"):
        load(None, env={"GPULENS_RETENTION_RAW_DAYS": "inf"})
    with pytest.raises(ConfigError, match="10000 characters long; at most 4096"):
        load(None, env={"GPULENS_REPORTS_TIMEZONE": "x" * 10_000})


@given(st.one_of(st.floats(), st.integers(), st.text(max_size=50), st.booleans()))
def test_any_value_of_any_setting_is_accepted_or_a_config_error(value):
    """Loading never fails otherwise, whatever a float, int, text or bool setting gets."""
    from gpulens.config import BY_NAME, Config

    for name in ("retention.raw_days", "alerts.rack_cooling.min_z", "service.port",
                 "reports.timezone", "dashboard.trusted_proxies", "dashboard.public_url",
                 "dashboard.login_limits", "alerts.enabled"):
        try:
            Config({s.name: s.default for s in SETTINGS}).with_overrides(
                **{name.replace(".", "__"): value})
        except ConfigError as exc:
            assert name in str(exc) and "\n" not in str(exc)
        else:
            assert BY_NAME[name].type is type(value) or isinstance(value, int)
