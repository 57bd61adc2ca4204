"""The service's lake job (gpulens/lake_job.py, issue 18): which days a run writes, its
catch-up and retention, one failing (table, day) costing itself, the status /healthz
shows, and a day swapped in whole (warehouse/export.py)."""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from datetime import date, datetime
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

import warehouse.export as export_mod
from gpulens.config import ConfigError, load
from gpulens.lake_job import BackfillRunning, LakeJob, first_failed_day
from warehouse import Warehouse, meta
from warehouse.export import (
    _swap_in,
    drop_days_before,
    first_whole_day,
    lake_days,
    open_days,
    sweep_trash,
    trash_path,
)
from warehouse.rollups import Retention

START = datetime(2026, 11, 18)  # the two days of sim_days_db: 2026-11-18 and 19
D18, D19 = date(2026, 11, 18), date(2026, 11, 19)


def _job(wh, lake, now, **settings) -> LakeJob:
    # raw samples kept 14 days, so that both days' raw tier counts as whole (the
    # default, 1.25 days, would leave the first day out: cut by retention)
    config = load(None).with_overrides(lake__dir=str(lake), lake__interval_min=60.0,
                                       retention__raw_days=14.0,
                                       **{f"lake__{k}": v for k, v in settings.items()})
    return LakeJob(wh, config, now=lambda: now)


@pytest.fixture
def wh(sim_days_db, tmp_path):
    """A writable copy of the two-day warehouse (runs store their progress in meta)."""
    path = tmp_path / "w.duckdb"
    shutil.copy(sim_days_db, path)
    with Warehouse(path) as w:
        yield w


@pytest.mark.parametrize("today, done, retention, reexport, want", [
    (date(2026, 11, 20), None, 0, 2, (None, None)),  # first run: everything
    (date(2026, 11, 20), date(2026, 11, 20), 0, 2, (date(2026, 11, 18), None)),
    (date(2026, 11, 25), date(2026, 11, 20), 0, 2, (date(2026, 11, 20), None)),  # catch up
    (date(2026, 11, 25), date(2026, 11, 20), 3, 2, (date(2026, 11, 22), date(2026, 11, 22))),
    (date(2026, 11, 25), None, 1, 2, (date(2026, 11, 24), date(2026, 11, 24))),
    (date(2026, 11, 25), date(2026, 11, 25), 0, 0, (date(2026, 11, 25), None)),
])
def test_plan_reexports_recent_days_catches_up_and_respects_retention(
        today, done, retention, reexport, want):
    job = LakeJob(None, load(None).with_overrides(lake__retention_days=retention,
                                                  lake__reexport_days=reexport),
                  now=datetime.now)
    first, keep_from = job.plan(today, done)
    assert (first, keep_from) == want
    assert keep_from is None or keep_from < today  # today is never dropped


def test_first_failed_day():
    assert first_failed_day({}, D19) == D19
    assert first_failed_day({"jobs/2026-11-18": "x", "pue/2026-11-20": "y"}, D19) == D18
    assert first_failed_day({"jobs": "whole table"}, D19) == date.min


def test_runs_write_every_day_then_only_what_can_still_change(wh, tmp_path):
    lake = tmp_path / "lake"
    first = _job(wh, lake, datetime(2026, 11, 20, 6)).run()
    assert first.errors == {}
    assert first.days["gpu_samples_1m"] == [D18, D19]
    assert lake_days(lake, "gpu_samples", "default") == [D18, D19]
    assert (lake / "nodes" / "cluster=default" / "nodes.parquet").exists()
    n = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{lake}/gpu_samples_1m/**/*.parquet', "
        "hive_partitioning = true)").fetchone()[0]
    assert n == wh.reader().execute("SELECT count(*) FROM gpu_samples_1m").fetchone()[0] > 0
    key = f"lake.done_until.default@{lake.resolve()}"
    assert meta.get(wh.reader(), key) == "2026-11-20"

    # five days later, reexport_days 1: from the last complete run on (the service was
    # down), which holds no rows; jobs still open at the end are written again with the
    # day they were submitted
    later = _job(wh, lake, datetime(2026, 11, 25, 6), reexport_days=1).run()
    assert later.start == datetime(2026, 11, 20) and later.errors == {}
    still_open = open_days(wh.reader(), "jobs", datetime(2026, 11, 20))
    assert still_open, "the simulation ends with running jobs"
    assert later.days["jobs"] == still_open
    assert later.days["gpu_samples"] == [] and later.days["failures"] == []
    assert meta.get(wh.reader(), key) == "2026-11-25"
    assert lake_days(lake, "gpu_samples", "default") == [D18, D19]  # kept: no retention


def test_retention_drops_whole_old_days_of_its_cluster_only(wh, tmp_path):
    lake = tmp_path / "lake"
    _job(wh, lake, datetime(2026, 11, 20, 6)).run()
    other = lake / "gpu_samples" / "cluster=other" / "date=2026-11-01"
    other.mkdir(parents=True)
    # on the 21st, keep 2 days: the 19th and later stay, the 18th goes
    job = _job(wh, lake, datetime(2026, 11, 21, 6), retention_days=2)
    result = job.run()
    assert result.errors == {}
    for table in ("gpu_samples", "gpu_samples_1h", "gpu_events"):
        assert lake_days(lake, table, "default") == [D19], table
    assert other.exists()  # another cluster's partitions are not ours
    assert job.status()["last_run"]["dropped_days"] > 0
    assert not list(lake.glob(".staging-*"))


def test_drop_days_before_never_reaches_the_day_kept(tmp_path):
    for day in ("2026-11-18", "2026-11-19", "2026-11-20"):
        (tmp_path / "pue" / "cluster=a" / f"date={day}").mkdir(parents=True)
    (tmp_path / "pue" / "cluster=a" / "date=junk").mkdir()
    assert drop_days_before(tmp_path, "a", date(2026, 11, 20)) == {"pue": [D18, D19]}
    assert sorted(p.name for p in (tmp_path / "pue" / "cluster=a").iterdir()) == [
        "date=2026-11-20", "date=junk"]


def test_a_failing_table_or_day_costs_itself_and_is_tried_again(wh, tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "nodes").write_text("a file where the table's folder belongs")  # whole table
    real = export_mod.export_day

    def failing(con, out, table, day, cluster):
        if (table, day) == ("gpu_samples_1h", D19):
            raise OSError(28, "No space left on device")
        return real(con, out, table, day, cluster)

    monkeypatch.setattr(export_mod, "export_day", failing)
    job = _job(wh, lake, datetime(2026, 11, 20, 6))
    result = job.run()
    assert set(result.errors) == {"gpu_samples_1h/2026-11-19", "nodes"}
    assert "No space left" in result.errors["gpu_samples_1h/2026-11-19"]
    assert result.days["gpu_samples_1h"] == [D18] and result.days["gpu_samples"] == [D18, D19]
    status = job.status()
    assert status["failing"] and status["last_run"]["errors_total"] == 2
    assert set(status["last_run"]["errors"]) == set(result.errors)
    # done until the failed day: the next run starts there, even with no days re-exported
    assert meta.get(wh.reader(), f"lake.done_until.default@{lake.resolve()}") == "2026-11-19"

    (lake / "nodes").unlink()
    monkeypatch.setattr(export_mod, "export_day", real)
    job = _job(wh, lake, datetime(2026, 11, 20, 6), reexport_days=0)
    again = job.run()
    assert again.errors == {} and again.start == datetime(2026, 11, 19)
    assert again.days["gpu_samples_1h"] == [D19]
    assert not job.status()["failing"]
    assert lake_days(lake, "gpu_samples_1h", "default") == [D18, D19]


def test_a_reader_never_misses_a_day_being_replaced(tmp_path):
    """The day folder is exchanged with its new version in one step: a reader listing it
    in a loop always finds exactly one complete file."""
    final = tmp_path / "t" / "cluster=a" / "date=2026-11-18"
    final.mkdir(parents=True)
    (final / "part-0.parquet").write_text("v0")
    stop, seen = threading.Event(), []

    def read():  # as a query engine does: list the folder, then read what it listed
        while not stop.is_set():
            try:
                seen.append([p.read_text() for p in final.iterdir()])
            except FileNotFoundError:  # the folder or a listed file vanished
                seen.append([])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 300):
            new = tmp_path / f".staging-{i}"
            new.mkdir()
            (new / "part-0.parquet").write_text(f"v{i}")
            _swap_in(new, final, trash_path(tmp_path, "t"))
    finally:
        stop.set()
        reader.join()
    assert (final / "part-0.parquet").read_text() == "v299"
    assert seen and all(len(files) == 1 for files in seen)
    assert not list(tmp_path.glob(".staging-*"))
    # the replaced days wait in the trash for the readers that listed them
    assert sweep_trash(tmp_path) == 0 and len(list(tmp_path.glob(".trash-*"))) == 299
    assert sweep_trash(tmp_path, grace_s=0) == 299 and not list(tmp_path.glob(".trash-*"))


def test_scheduled_run_waits_for_the_history_backfill(wh, tmp_path):
    lake = tmp_path / "lake"
    config = load(None).with_overrides(lake__dir=str(lake), lake__interval_min=60.0)
    busy = [True]
    job = LakeJob(wh, config, now=lambda: datetime(2026, 11, 20, 6), busy=lambda: busy[0])
    job.run_scheduled()
    assert job.status()["state"].startswith("waiting") and not lake.exists()
    busy[0] = False
    job.run_scheduled()
    assert job.status()["last_run"]["days_written"] > 0
    assert job.status()["last_run"]["from"] == "2026-11-18"
    # the scheduler's own first run right after the one that followed the history: none
    first = job.status()["last_run"]["started"]
    job.now = lambda: datetime(2026, 11, 20, 6, 1)
    job.run_scheduled()
    assert job.status()["last_run"]["started"] == first
    off = LakeJob(wh, load(None).with_overrides(lake__dir=str(tmp_path / "off")),
                  now=lambda: datetime(2026, 11, 20, 6))
    off.run_scheduled()  # lake.interval_min 0: no scheduled export
    assert not (tmp_path / "off").exists() and off.status()["last_run"] is None


def test_lake_tables_restricts_the_scheduled_export(wh, tmp_path):
    lake = tmp_path / "lake"
    result = _job(wh, lake, datetime(2026, 11, 20, 6),
                  tables="gpu_samples_1h, jobs,nodes").run()
    assert set(result.rows) == {"gpu_samples_1h", "jobs", "nodes"}
    assert sorted(p.name for p in lake.iterdir() if not p.name.startswith(".")) == [
        "gpu_samples_1h", "jobs", "nodes"]


@pytest.mark.parametrize("value", ["secrets", "gpu_samples,meta", "jobs;drop"])
def test_lake_tables_names_only_exported_tables(value):
    with pytest.raises(ConfigError, match="lake.tables"):
        load(None).with_overrides(lake__tables=value)


def test_a_stopping_service_ends_the_run_after_the_day_under_way(wh, tmp_path):
    lake = tmp_path / "lake"
    stopping = threading.Event()
    config = load(None).with_overrides(lake__dir=str(lake), lake__interval_min=60.0)
    job = LakeJob(wh, config, now=lambda: datetime(2026, 11, 20, 6), stopping=stopping)
    stopping.set()
    with pytest.raises(InterruptedError):
        job.run()
    written = [p for p in lake.glob("*/cluster=default/date=*")]
    assert len(written) == 1  # the day under way was finished, whole
    assert meta.get(wh.reader(), f"lake.done_until.default@{lake.resolve()}") is None
    scheduled = LakeJob(wh, config, now=lambda: datetime(2026, 11, 20, 6), stopping=stopping)
    scheduled.run_scheduled()  # logs, never raises: the scheduler thread goes on
    assert scheduled.status()["state"] == "idle"
    assert scheduled.status()["last_run"]["errors"] == {
        "export": "InterruptedError: the service stops"}


_names = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                 min_size=1, max_size=30).filter(lambda n: n not in (".", ".."))


@given(st.lists(_names, max_size=6))
def test_folder_names_in_the_lake_cost_only_themselves(names):
    """Whatever else lies in a lake (another tool's folders, half-deleted trash), the
    day listing reads only ``date=<ISO day>`` and the sweep deletes only its own trash."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = root / "pue" / "cluster=a"
        cluster.mkdir(parents=True)
        for name in names:
            for parent in (cluster, root):
                try:
                    (parent / name).mkdir(exist_ok=True)
                except OSError:  # a name the file system refuses (too long in bytes)
                    pass
        want = set()
        for name in names:
            try:
                want.add(date.fromisoformat(name[5:])) if name.startswith("date=") else None
            except ValueError:
                pass
        assert lake_days(root, "pue", "a") == sorted(want)
        before = {p.name for p in root.iterdir()}
        sweep_trash(root, grace_s=0)
        gone = before - {p.name for p in root.iterdir()}
        assert all(re.fullmatch(r"\.trash-[0-9]+-.+", n, re.S) for n in gone)


def test_a_run_on_request_during_the_history_backfill_is_refused(wh, tmp_path):
    """POST /api/export {} and `gpulens export lake` go through run(): during the
    backfill it writes nothing and stores no progress (it would mark half-written days
    done); after it, the run exports as usual."""
    lake = tmp_path / "lake"
    config = load(None).with_overrides(lake__dir=str(lake), lake__interval_min=60.0)
    busy = [True]
    job = LakeJob(wh, config, now=lambda: datetime(2026, 11, 20, 6), busy=lambda: busy[0])
    with pytest.raises(BackfillRunning, match="history backfill running"):
        job.run()
    assert not lake.exists() and job.status()["state"].startswith("waiting")
    assert meta.get(wh.reader(), job._done_key) is None
    busy[0] = False
    assert job.run().days["gpu_samples_1m"] == [D18, D19]


def _lake_rows(lake: Path, table: str, day: date) -> int:
    return duckdb.connect().execute(
        "SELECT count(*) FROM read_parquet(?)",
        [str(lake / table / "cluster=default" / f"date={day.isoformat()}" / "*.parquet")]
    ).fetchone()[0]


def test_the_day_the_warehouse_retention_cut_does_not_replace_the_lakes_whole_copy(
        wh, tmp_path):
    """Retention deletes at now - raw_days, mid-day: the warehouse's oldest raw day is
    partial. Re-exporting it (reexport_days reaching it, or an explicit range) must leave
    the lake's complete day as it is."""
    lake = tmp_path / "lake"
    assert _job(wh, lake, datetime(2026, 11, 20, 6)).run().errors == {}
    full = _lake_rows(lake, "gpu_samples", D18)
    assert full > 0
    now = datetime(2026, 11, 20, 12)
    config = load(None).with_overrides(lake__dir=str(lake), lake__reexport_days=5,
                                       retention__raw_days=1.75)  # cutoff 2026-11-18 18:00
    wh.apply_retention(now, Retention(**config.section("retention"))).result()
    left = wh.reader().execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    assert 0 < wh.reader().execute(
        "SELECT count(*) FROM gpu_samples WHERE ts < '2026-11-19'").fetchone()[0] < full
    job = LakeJob(wh, config, now=lambda: now)
    result = job.run()
    assert result.errors == {} and result.skipped["gpu_samples"] == D19
    assert D18 not in result.days["gpu_samples"] and D19 in result.days["gpu_samples"]
    assert _lake_rows(lake, "gpu_samples", D18) == full  # the whole day stays
    assert D18 in result.days["gpu_samples_1m"]  # minute tier: 90 days kept, day whole
    assert "gpu_samples" in job.status()["last_run"]["skipped"]
    # an explicit range from the first day: the same
    again = job.export(lake, datetime(2026, 11, 18), datetime(2026, 11, 20), ["gpu_samples"])
    assert again.days == {"gpu_samples": [D19]} and _lake_rows(lake, "gpu_samples", D18) == full
    assert left > 0


def test_first_whole_day():
    assert first_whole_day(datetime(2026, 11, 18)) == D18
    assert first_whole_day(datetime(2026, 11, 18, 0, 0, 1)) == D19
    assert first_whole_day(datetime(2026, 11, 18, 23, 59)) == D19


def test_raw_samples_wait_for_a_lake_that_is_behind(wh, tmp_path):
    """The lake last exported on 18 Nov (done_until) and now, two and a half days later,
    raw samples are kept 1.25 days: retention holds them from the 18th's midnight, so
    the next run still exports both days whole; the hold is bounded and only for a lake
    that exports raw samples."""
    lake = tmp_path / "lake"
    config = load(None).with_overrides(lake__dir=str(lake))  # retention.raw_days 1.25
    now = datetime(2026, 11, 20, 12)
    job = LakeJob(wh, config, now=lambda: now)
    wh.write(lambda con: meta.put(con, job._done_key, "2026-11-18")).result()
    hold = job.raw_hold(now)
    assert hold == datetime(2026, 11, 18)
    whole = wh.reader().execute("SELECT count(*) FROM gpu_samples WHERE ts < '2026-11-19'"
                                ).fetchone()[0]
    wh.apply_retention(now, Retention(**config.section("retention")), hold).result()
    assert wh.reader().execute("SELECT count(*) FROM gpu_samples WHERE ts < '2026-11-19'"
                               ).fetchone()[0] == whole > 0
    result = job.run()
    assert result.errors == {} and {D18, D19} <= set(result.days["gpu_samples"])
    assert _lake_rows(lake, "gpu_samples", D18) == whole
    # bounded: a lake failing for a month holds 14 days at most
    assert job.raw_hold(datetime(2026, 12, 20)) == datetime(2026, 12, 6)
    # once exported, the hold moves on; a lake without raw samples holds nothing
    assert job.raw_hold(now) == datetime(2026, 11, 20)
    assert _job(wh, lake, now, tables="jobs,nodes").raw_hold(now) is None
