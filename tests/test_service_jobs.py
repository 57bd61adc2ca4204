"""The service's collection job: batches reach the warehouse; a failing source backs off alone."""

from datetime import datetime, timedelta

import pytest

from gpulens.config import load
from gpulens.service import MAX_BACKOFF_S, Service, floor_ts
from tests.support.frames import samples
from warehouse import Warehouse


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


class GoodSource:
    name, interval_s = "good", 15.0

    def __init__(self):
        self.calls = []

    def collect(self, ts):
        self.calls.append(ts)
        return [("samples", samples(start=ts, ticks=1))]


class BadSource:
    name, interval_s = "bad", 15.0

    def __init__(self):
        self.calls = 0

    def collect(self, ts):
        self.calls += 1
        raise ConnectionError("exporter unreachable")


@pytest.fixture
def service():
    clock = Clock(datetime(2026, 11, 2, 12, 0, 7))
    svc = Service(load(None, env={}), now=clock)
    svc.warehouse = Warehouse(":memory:")
    svc.sources = [GoodSource(), BadSource()]
    yield svc, clock
    svc.warehouse.close()


def test_floor_ts_aligns_to_the_interval():
    assert floor_ts(datetime(2026, 1, 1, 0, 0, 29, 500), 15) == datetime(2026, 1, 1, 0, 0, 15)


def test_a_failing_source_backs_off_alone(service):
    svc, clock = service
    good, bad = svc.sources
    attempts = []
    for step in range(40):  # 10 minutes of 15-s cycles
        clock.t = datetime(2026, 11, 2, 12, 0, 7) + timedelta(seconds=15 * step)
        before = bad.calls
        svc.collect_once(good)
        svc.collect_once(bad)
        if bad.calls > before:
            attempts.append(step)
    assert len(good.calls) == 40
    rows = svc.warehouse.reader().execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    assert rows == 40 * 8
    gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert gaps[:4] == [1, 2, 4, 8]  # doubling backoff, in 15-s cycles
    assert max(gaps) <= MAX_BACKOFF_S / 15
    report = svc.health.report(clock.t, stale_after_s=45)
    assert report["status"] == "degraded"
    assert report["sources"]["good"]["last_error"] is None
    assert "exporter unreachable" in report["sources"]["bad"]["last_error"]
    assert report["sources"]["bad"]["last_success"] is None


def test_a_source_recovers_after_backoff(service):
    svc, clock = service
    _, bad = svc.sources
    svc.collect_once(bad)
    bad.collect = lambda ts: [("samples", samples(start=ts, ticks=1))]
    clock.t += timedelta(seconds=15)
    svc.collect_once(bad)
    assert svc.health.sources["bad"].last_success is not None
    clock.t += timedelta(seconds=15)
    svc.collect_once(bad)
    assert svc.health.sources["bad"].last_success == floor_ts(clock.t, 15)


def test_a_cycle_gives_its_freed_memory_back_once_written(service, monkeypatch):
    """After each cycle written, its tables dropped, the allocators' free pages go back
    (gpulens/memory.py; issue 17): a refresh does not start on a parse's leftovers. A
    failed cycle backs off instead."""
    import gpulens.service as service_module

    svc, _ = service
    good, bad = svc.sources
    seen = []
    monkeypatch.setattr(service_module, "release_free_memory", lambda: seen.append(
        svc.warehouse.reader().execute("SELECT count(*) FROM gpu_samples").fetchone()[0]))
    svc.collect_once(good)
    svc.collect_once(bad)
    assert seen == [8]


def test_health_details_name_dropped_rows_and_down_targets():
    from collector.sanitize import DropCounter
    from collector.scrape import TargetStatus
    from gpulens.service import _source_details

    class Scraper:
        name = "dcgm"
        dropped = DropCounter()
        status = {"node001": TargetStatus("http://node001:9400/metrics", up=True),
                  "node002": TargetStatus("http://node002:9400/metrics", up=False,
                                          last_error="timed out after 5 s")}

    Scraper.dropped.add({"negative": 3, "nan": 0})
    details = _source_details(Scraper())
    assert details["dropped"] == {"negative": 3}
    assert details["dropped_total"] == 3
    assert details["targets"] == {"total": 2, "up": 1, "down_total": 1,
                                  "down": {"node002": "timed out after 5 s"}}


def test_health_details_are_the_same_for_every_source():
    from collector.sanitize import DropCounter
    from gpulens.service import _source_details

    class Quiet:  # counts nothing, has no targets
        name = "simulator"

    class Federation:  # knows its down targets and their reasons only
        name = "prometheus"
        dropped = DropCounter()
        targets_down = {"node007:9400": "GPU label '70000' out of range", "node003": "HTTP 500"}

    Federation.dropped.add({"gpu_index": 2})
    assert _source_details(Quiet()) == {"dropped": {}, "dropped_total": 0}
    details = _source_details(Federation(), max_listed=1)
    assert details["dropped"] == {"gpu_index": 2}
    assert details["targets"] == {"total": None, "up": None, "down_total": 2,
                                  "down": {"node003": "HTTP 500"}}
    Federation.targets_total = 10
    assert _source_details(Federation())["targets"] == {
        "total": 10, "up": 8, "down_total": 2,
        "down": {"node003": "HTTP 500", "node007:9400": "GPU label '70000' out of range"}}


def test_healthz_shows_a_broken_source_degraded_and_the_others_ok(service):
    import flask

    svc, clock = service
    good, bad = svc.sources

    class Broken(BadSource):
        name = "broken"

        @property
        def dropped(self):
            raise RuntimeError("counter gone")

    broken = Broken()
    svc.sources.append(broken)
    for _ in range(4):
        clock.t += timedelta(seconds=15)
        for source in svc.sources:
            svc.collect_once(source)
    with flask.Flask(__name__).app_context():
        response, code = svc._healthz()
    report = response.get_json()
    assert code == 503 and report["status"] == "degraded"
    assert report["sources"]["good"]["status"] == "ok"
    assert report["sources"]["good"]["failing"] is False
    assert report["sources"]["good"]["rows"] == 8
    assert report["sources"]["bad"]["status"] == "degraded"
    assert report["sources"]["bad"]["failing"] is True
    assert report["sources"]["bad"]["dropped"] == {}
    assert report["sources"]["broken"]["details_error"] == "RuntimeError: counter gone"
    assert report["sources"]["broken"]["status"] == "degraded"
    assert report["database"]["live_batch_wait"]["max_steps"] <= 1


def test_the_simulator_reports_what_its_parsers_refused_and_the_node_that_gave_nothing():
    from collector.simulated import SimulatedSource
    from collector.simulator import SimConfig
    from gpulens.service import _source_details

    live = datetime(2026, 11, 2, 12, 0, 0)
    source = SimulatedSource(SimConfig(racks=1, nodes_per_rack=2, gpus_per_node=2),
                             anchor=live - timedelta(days=1), live_start=live)
    render = source.cluster.dcgm_texts

    def one_page_cut(ts):  # one exporter's text cut inside a label set
        texts = render(ts)
        broken = sorted(texts)[0]
        texts[broken] = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"'
        return texts

    source.cluster.dcgm_texts = one_page_cut
    batches = dict(source.collect(live))
    assert batches["samples"].num_rows == 2  # the other node's GPUs
    details = _source_details(source)
    assert details["dropped_total"] >= 1
    assert details["targets"]["total"] == 2 and details["targets"]["up"] == 1
    assert list(details["targets"]["down"]) == [sorted(render(live))[0]]
