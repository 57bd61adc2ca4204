"""/healthz for the grid source (issue 21): its providers' state, and staleness measured
against each source's own interval (a 15-minute grid fetch must not let a 15-s scrape
look fresh for 45 minutes)."""

from datetime import datetime, timedelta

from collector.grid import GridParseError, Parsed, Reading
from collector.grid.source import GridSource
from gpulens.health import Health
from gpulens.service import _source_details

NOW = datetime(2026, 11, 23, 12, 0)


class Fake:
    """A provider answering what the test sets: Parsed, or an exception to raise."""

    def __init__(self, name, answer):
        self.name, self.zone, self.answer = name, name.upper(), answer

    def fetch(self, http, now):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_providers_and_down_targets_in_the_source_details():
    good = Fake("electricitymaps", Parsed([Reading(NOW, 300.0)], ["history[1]: bad"]))
    bad = Fake("watttime", GridParseError("watttime.meta: units 'percentile' are no ..."))
    source = GridSource([good, bad], region="DE", interval_s=900, http=object())
    source.collect(NOW)
    details = _source_details(source)
    assert details["targets"] == {"total": 2, "up": 1, "down_total": 1, "down": {
        "watttime": "watttime.meta: units 'percentile' are no ..."}}
    assert details["dropped"] == {"reading: electricitymaps": 1}
    p = details["providers"]
    assert p["electricitymaps"]["readings"] == 1 and p["electricitymaps"]["zone"] == "ELECTRICITYMAPS"
    assert p["electricitymaps"]["last_rejected"] == "history[1]: bad"
    assert p["watttime"]["last_success"] is None and p["watttime"]["last_error_at"] == (
        NOW.isoformat() + "Z")


def test_each_source_is_stale_after_its_own_intervals():
    h = Health()
    h.success("dcgm", NOW - timedelta(seconds=100), 0.1, 10)
    h.success("grid", NOW - timedelta(seconds=1000), 0.1, 10)
    per_source = {"dcgm": 45.0, "grid": 2700.0}
    report = h.report(NOW, stale_after_s=per_source)
    assert report["sources"]["dcgm"]["status"] == "degraded"  # 100 s > 3 x 15 s
    assert report["sources"]["grid"]["status"] == "ok"  # 1000 s < 3 x 900 s
    assert report["status"] == "degraded"
    # one number for all, as before: the old rule (the largest interval) hid the scrape
    assert h.report(NOW, stale_after_s=2700.0)["sources"]["dcgm"]["status"] == "ok"
