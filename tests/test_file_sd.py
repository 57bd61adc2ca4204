"""Scrape targets: comma lists and Prometheus file_sd files."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.file_sd import TargetFile, is_file_spec, parse_file_sd, parse_static


def test_static_list():
    ts = parse_static("gpu001:9400, https://gpu002:9400/metrics ,,gpu003:9401")
    assert [t.url for t in ts] == ["http://gpu001:9400/metrics", "https://gpu002:9400/metrics",
                                   "http://gpu003:9401/metrics"]
    assert [t.key for t in ts] == ["gpu001:9400", "gpu002:9400", "gpu003:9401"]


def test_file_sd_json_and_yaml():
    doc = [{"targets": ["10.0.0.1:9400"], "labels": {"node": "gpu001", "__scheme__": "https",
                                                      "__metrics_path__": "/m"}},
           {"targets": ["10.0.0.2:9400"]}]
    ts = parse_file_sd(json.dumps(doc))
    assert ts[0].url == "https://10.0.0.1:9400/m" and ts[0].node == "gpu001"
    assert ts[1].url == "http://10.0.0.2:9400/metrics" and ts[1].node is None
    yaml_text = "- targets: ['a:1', 'b:2']\n  labels:\n    rack: r1\n"
    assert [t.key for t in parse_file_sd(yaml_text, "yaml")] == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="group 0"):
        parse_file_sd('[{"labels": {}}]', where="x.json")


def test_target_file_rereads_on_change(tmp_path):
    f = tmp_path / "dcgm.json"
    f.write_text(json.dumps([{"targets": ["a:1"]}]))
    spec = str(tmp_path / "*.json")
    assert is_file_spec(spec) and not is_file_spec("a:1,b:2")
    tf = TargetFile(spec)
    assert [t.key for t in tf.targets()] == ["a:1"]
    f.write_text(json.dumps([{"targets": ["a:1", "b:2"]}]))
    os.utime(f, ns=(1, 10**18))
    assert [t.key for t in tf.targets()] == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="no file_sd file"):
        TargetFile(str(tmp_path / "none" / "*.json")).targets()


def test_a_target_that_is_no_address_is_refused_naming_it():
    for bad in ['[{"targets": [""]}]', '[{"targets": [7]}]', '[{"targets": ["a b:1"]}]',
                '[{"targets": [["x"]]}]', '[{"targets": ["a:1"], "labels": {"node": [1]}}]']:
        with pytest.raises(ValueError, match="x.json: group 0"):
            parse_file_sd(bad, where="x.json")
    with pytest.raises(ValueError, match="static target"):
        parse_static("gpu001:9400, bad host:1")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["targets", "labels", "node", "__scheme__", "__metrics_path__", "x"]),
        inner, max_size=3),
    max_leaves=10)


@pytest.mark.property
@given(st.one_of(_json.map(json.dumps), st.text(max_size=80)), st.sampled_from(["json", "yaml"]))
def test_property_file_sd_gives_targets_or_a_value_error_naming_the_file(text, fmt):
    try:
        targets = parse_file_sd(text, fmt, where="sd.json")
    except ValueError as exc:
        assert str(exc).startswith("sd.json: ")
        return
    for t in targets:
        assert t.url.startswith(("http://", "https://")) and t.key and " " not in t.key
