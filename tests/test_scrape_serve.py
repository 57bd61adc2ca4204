"""`gpulens serve` wiring: build_sources makes the real collectors from settings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpulens.config import ConfigError, load
from gpulens.sources import build_sources
from tests.support.exporter_texts import V100
from tests.support.prometheus import Exporters
from warehouse import Warehouse


def test_sources_from_settings(tmp_path):
    ex = Exporters(2, lambda i: V100.replace("r6i3n0", f"node{i}"))
    inv = tmp_path / "inv.csv"
    inv.write_text('rack,zone,nodes\nr1,z1,"node[0-1]"\n')
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(f'[collect]\nsource = "dcgm, topology, slurm, prometheus"\n'
                   f'[dcgm]\ntargets = "{",".join(ex.addresses)}"\n'
                   f'[topology]\ninventory = "{inv}"\n'
                   f'[prometheus]\nurl = "http://127.0.0.1:1"\nselector = \'job="dcgm"\'\n')
    wh = Warehouse(":memory:")
    try:
        sources = build_sources(load(cfg, env={}), wh, now=datetime(2026, 11, 2))
        assert [s.name for s in sources] == ["dcgm", "topology", "slurm", "prometheus"]
        ts = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        rows = wh.ingest_all(dict(sources[0].collect(ts)))
        assert rows == 4
        assert wh.ingest_all(sources[1].topology()) == 3
    finally:
        ex.close()
        wh.close()


def test_missing_targets_is_a_config_error(tmp_path):
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text('[collect]\nsource = "dcgm"\n')
    with Warehouse(":memory:") as wh, pytest.raises(ConfigError, match="dcgm.targets"):
        build_sources(load(cfg, env={}), wh, now=datetime(2026, 11, 2))
    with pytest.raises(ConfigError, match="collect.source"):
        cfg.write_text('[collect]\nsource = "dcgm,snmp"\n')
        load(cfg, env={})
