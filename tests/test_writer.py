"""The single writer keeps live collection ahead of maintenance (issue 12, section 6)."""

import threading

import duckdb
import pytest

from warehouse.writer import Writer, WriterClosed, yield_to_urgent


@pytest.fixture
def writer():
    con = duckdb.connect(":memory:")
    w = Writer(con.cursor())
    yield w
    w.close()
    con.close()


def maintenance(log, steps, started, release):
    """A long maintenance job of ``steps`` steps; the first waits for ``release``."""

    def job(con):
        for i in range(steps):
            log.append(f"step {i}")
            if i == 0:
                started.set()
                assert release.wait(10)
            yield_to_urgent()
        return steps

    return job


def test_urgent_work_runs_between_maintenance_steps(writer):
    log, started, release = [], threading.Event(), threading.Event()
    long_job = writer.submit(maintenance(log, 5, started, release))
    assert started.wait(10)
    ingest = writer.submit(lambda con: log.append("ingest"), urgent=True)
    release.set()
    ingest.result(10)
    assert long_job.result(10) == 5
    # the batch waited for the step in progress only, not for the four after it
    assert log == ["step 0", "ingest", "step 1", "step 2", "step 3", "step 4"]
    assert writer.urgent_steps_max == 1


def test_urgent_work_overtakes_queued_maintenance(writer):
    log, started, release = [], threading.Event(), threading.Event()
    writer.submit(maintenance(log, 1, started, release))
    assert started.wait(10)
    queued = [writer.submit(lambda con, i=i: log.append(f"rollup {i}")) for i in range(3)]
    live = [writer.submit(lambda con, i=i: log.append(f"live {i}"), urgent=True)
            for i in range(2)]
    release.set()
    for f in queued + live:
        f.result(10)
    assert log == ["step 0", "live 0", "live 1", "rollup 0", "rollup 1", "rollup 2"]
    assert writer.urgent_steps_max == 1


def test_yield_outside_the_writer_thread_does_nothing(writer):
    log = []
    yield_to_urgent()  # the test's thread: no writer, no effect, no error
    writer.submit(lambda con: log.append("x")).result(10)
    assert log == ["x"]


def test_close_finishes_queued_work_then_refuses_more():
    con = duckdb.connect(":memory:")
    w = Writer(con.cursor(), max_queue=2)
    gate = threading.Event()
    done = []
    w.submit(lambda c: gate.wait(10))
    futures = [w.submit(lambda c, i=i: done.append(i), urgent=i % 2 == 0) for i in range(2)]
    blocked = threading.Thread(target=lambda: futures.append(w.submit(lambda c: done.append(9))))
    blocked.start()  # the queue holds 2: this submit waits for room
    gate.set()
    blocked.join(10)
    w.close()
    for f in futures:
        f.result(10)
    assert sorted(done) == [0, 1, 9]
    with pytest.raises(WriterClosed):
        w.submit(lambda c: None)
    con.close()


def test_a_failing_urgent_write_fails_its_future_only(writer):
    bad = writer.submit(lambda con: con.execute("SELECT * FROM missing_table"), urgent=True)
    with pytest.raises(duckdb.CatalogException):
        bad.result(10)
    assert writer.submit(lambda con: con.execute("SELECT 42").fetchone()[0]).result(10) == 42


def test_a_queue_full_of_maintenance_does_not_hold_a_live_batch_back():
    con = duckdb.connect(":memory:")
    w = Writer(con.cursor(), max_queue=2)
    gate, log = threading.Event(), []
    w.submit(lambda c: gate.wait(10))
    bulk = [w.submit(lambda c, i=i: log.append(f"import {i}")) for i in range(2)]  # full
    submitted = threading.Event()

    def live():
        w.submit(lambda c: log.append("live"), urgent=True)
        submitted.set()

    threading.Thread(target=live).start()
    assert submitted.wait(10)  # not blocked behind the full queue
    gate.set()
    for f in bulk:
        f.result(10)
    w.close()
    assert log == ["live", "import 0", "import 1"]
    con.close()


def test_a_long_step_of_maintenance_gives_freed_memory_back(writer, monkeypatch):
    """After a step of maintenance of LONG_WORK_S or more, and only then, the writer
    hands the allocators' free pages back (gpulens/memory.py), so the next step does not
    start on what this one freed (issue 17); never after urgent work (a live batch's
    wait)."""
    import time

    from warehouse import writer as writer_module

    calls = []
    monkeypatch.setattr(writer_module, "LONG_WORK_S", 0.05)
    monkeypatch.setattr(writer_module, "release_free_memory", lambda: calls.append(1))

    def done():  # the release, if any, follows the item before the next one runs
        writer.submit(lambda con: None).result(timeout=10)
        return len(calls)

    writer.submit(lambda con: None).result(timeout=10)
    assert done() == 0
    writer.submit(lambda con: time.sleep(0.1), urgent=True).result(timeout=10)
    assert done() == 0
    writer.submit(lambda con: time.sleep(0.1)).result(timeout=10)
    assert done() == 1
    with pytest.raises(ZeroDivisionError):  # a failed step freed its memory too
        writer.submit(lambda con: time.sleep(0.1) or 1 / 0).result(timeout=10)
    assert done() == 2


def test_the_work_is_freed_before_its_submitter_wakes(writer):
    """An ingest's closure holds its table: the writer drops it before it resolves the
    Future, so the collection cycle that waited on it frees the table and can hand the
    memory back (gpulens/memory.py) at once; before, the writer held the last item until
    the next one came."""
    import weakref

    class Table:
        pass

    def work():
        table = Table()
        return weakref.ref(table), lambda con: table is not None

    ref, fn = work()
    future = writer.submit(fn)
    del fn
    assert future.result(timeout=10) is True
    assert ref() is None
