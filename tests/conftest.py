"""Shared test configuration.

Hypothesis profiles for the property-based tests of the parsers (marker ``property``):
``default`` runs a bounded number of examples so ``make test`` stays quick; ``fuzz``
(``HYPOTHESIS_PROFILE=fuzz``, what ``make fuzz`` sets) runs many more. Tests use
``@settings`` only for what differs from the profile, never ``max_examples``.

The real components, as fixtures (their helpers live in ``tests/support/``): ``slurm``
(munged, MariaDB, slurmdbd, slurmctld, slurmd; one per module), ``prometheus`` (scraping
two fake dcgm-exporters), ``alertmanager`` (routing to a webhook receiver), ``smtp`` (an
aiosmtpd server and its inbox) and ``chromium_driver`` (headless Chromium; one per
module). A missing program skips the test locally and fails it in CI
(``GPULENS_REQUIRE_INTEGRATION=1``). Test modules share code only through
``tests/support/`` and these fixtures, never by importing each other
(``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz", max_examples=5_000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _unfreeze_collector():
    """A test that starts the service in this process freezes every object then alive
    out of the garbage collector's walks (dashboard.app.freeze_startup_objects); thawed
    after each test, so the session's later garbage is collected as usual."""
    import gc

    yield
    if gc.get_freeze_count():
        gc.unfreeze()


def pytest_collection_modifyitems(items):
    """Every hypothesis test carries the marker ``property`` (what ``make fuzz`` selects),
    also where its module forgot to set it."""
    import pytest

    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture
def wh():
    """An in-memory warehouse with the topology of tests/support/runs.py (4 nodes of 8
    GPUs in 2 racks), for hand-built job histories. Modules that need another warehouse
    define their own ``wh``."""
    from tests.support.runs import topology
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    topology(w)
    yield w
    w.close()


@pytest.fixture(scope="module")
def seeded_usage():
    """(warehouse, now): tests/support/dash_seed.py's 32-GPU cluster, two days, with the
    analytics refresh run until the usage table holds every hour (as the service's
    refreshes do)."""
    from tests.support.dash_seed import NOW, seed_dashboard
    from warehouse import Warehouse
    from warehouse.analytics import refresh

    w = Warehouse(":memory:")
    seed_dashboard(w)
    while w.write(lambda con: refresh(con, NOW, None)).result()["usage_pending"]:
        pass
    yield w, NOW
    w.close()


@pytest.fixture(scope="module")
def empty_wh():
    """One in-memory warehouse for the examples of a property (creating one per example
    is most of the time); each example empties the tables it fills."""
    from warehouse import Warehouse

    w = Warehouse(":memory:")
    yield w
    w.close()


@pytest.fixture(scope="module")
def sim_days_db(tmp_path_factory):
    """A warehouse file with two simulated days (2026-11-18 and 19) of one rack sampled
    every 60 s, rolled up (tests/support/lake.py); one per module, for the lake tests."""
    from datetime import datetime

    from tests.support.lake import simulated_warehouse

    return simulated_warehouse(tmp_path_factory.mktemp("wh") / "w.duckdb",
                               datetime(2026, 11, 18), 2)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A local SparkSession (pyspark on OpenJDK, tests/support/lake.py), one per session:
    the JVM takes seconds to start. Skips without Java or pyspark, fails in CI."""
    from tests.support.lake import spark_session

    session = spark_session(tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def report_wh(tmp_path_factory):
    """A copy of the report test warehouse (tests/support/report.py), one per module."""
    from tests.support.report import seeded_copy
    from warehouse import Warehouse

    w = Warehouse(seeded_copy(tmp_path_factory.mktemp("report")))
    yield w
    w.close()


@pytest.fixture(scope="module")
def report(report_wh):
    """The weekly report of ``WEEK`` over ``report_wh``, jobs of 16 GPUs counted as large."""
    from dashboard.report import ReportOptions, build
    from tests.support.report import NOW, WEEK

    return build(report_wh.reader, week=WEEK, now=NOW,
                 options=ReportOptions(large_job_gpus=16))


# ------------------------------------------------------------------ real components

@pytest.fixture(scope="module")
def slurm(tmp_path_factory, request):
    """A local Slurm cluster (tests/support/slurm.py) with ``SLURM_CONF`` pointing at it;
    ``start_s`` is how long it took to start (seconds). A test module's ``SLURM_SHARED``
    ("shard" or "mps") gives its GPUs that shared GRES too."""
    from tests.support.integration import need
    from tests.support.slurm import DAEMONS, LocalSlurm

    for program, package in DAEMONS.items():
        need(program, package)
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster runs its daemons as root")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"),
                         shared=getattr(request.module, "SLURM_SHARED", None))
    started = time.monotonic()
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        cluster.start()
        cluster.start_s = time.monotonic() - started
        yield cluster
    finally:
        cluster.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


@pytest.fixture
def prometheus(tmp_path):
    """Debian's Prometheus scraping two fake dcgm-exporters (``dcgm_text``) every second."""
    from tests.support.integration import need
    from tests.support.prometheus import Exporters, Prometheus, dcgm_text

    binary = need("prometheus", "prometheus")
    exporters = Exporters(2, dcgm_text)
    prom = Prometheus(binary, tmp_path, exporters.addresses, interval_s=1.0)
    yield prom
    prom.stop()
    exporters.close()


@pytest.fixture
def victoria(tmp_path):
    """Debian's VictoriaMetrics (single node) on a free port, empty; tests import samples."""
    from tests.support.integration import need
    from tests.support.victoria import VictoriaMetrics

    server = VictoriaMetrics(need("victoria-metrics", "victoria-metrics"), tmp_path)
    yield server
    server.stop()


@pytest.fixture
def alertmanager(tmp_path):
    """(url, receiver): a real Alertmanager routing to an (unsigned) webhook receiver."""
    from alerts.receiver import start_receiver
    from tests.support.alertmanager import Alertmanager
    from tests.support.integration import need

    binary = need("prometheus-alertmanager", "prometheus-alertmanager")
    rx = start_receiver()  # Alertmanager's webhooks are not signed
    am = Alertmanager(binary, tmp_path, f"{rx.url}am")
    yield am.url, rx
    am.stop()
    rx.stop()


@pytest.fixture
def smtp():
    """(controller, inbox): an aiosmtpd SMTP server on 127.0.0.1 and a free port."""
    pytest.importorskip("aiosmtpd", reason="pip install aiosmtpd (test extra)")
    from aiosmtpd.controller import Controller

    from tests.support.integration import free_port
    from tests.support.smtp import Inbox

    inbox = Inbox()
    ctl = Controller(inbox, hostname="127.0.0.1", port=free_port())
    ctl.start()
    yield ctl, inbox
    ctl.stop()


@pytest.fixture(scope="module")
def chromium_driver():
    """A headless Chromium WebDriver for the module (tests/support/browser.py)."""
    from tests.support.browser import chromium

    with chromium() as driver:
        yield driver
