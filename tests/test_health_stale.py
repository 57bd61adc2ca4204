"""/healthz staleness (gpulens/health.py): a source is stale after STALE_TICKS
collection intervals without a success; without a per-source limit the interval is the
collect.interval_s setting's default, read from the settings, not restated."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpulens import health
from gpulens.health import STALE_TICKS, Health

NOW = datetime(2026, 11, 2, 12)


def test_the_stale_limit_without_per_source_limits_follows_collect_interval(monkeypatch):
    monkeypatch.setattr(health, "default",
                        lambda name: {"collect.interval_s": 20.0}[name])
    h = Health()
    h.success("dcgm", NOW - timedelta(seconds=STALE_TICKS * 20.0 - 1), 0.1, 8)
    assert h.report(NOW, stale_after_s={})["sources"]["dcgm"]["status"] == "ok"
    h.success("dcgm", NOW - timedelta(seconds=STALE_TICKS * 20.0 + 1), 0.1, 8)
    assert h.report(NOW, stale_after_s={})["status"] == "degraded"
