"""Grid intensity from several sources (issue 21): which reading applies to each hour, and
the migration that gave every stored reading its source."""

from datetime import timedelta

import duckdb
import pandas as pd
import pytest

from tests.support.migrations import migrated_before
from tests.support.runs import H, M, T, ingest, run_refresh, samples
from warehouse import carbon
from warehouse.analytics import Options
from warehouse.migrate import migrate
from warehouse.queries import energy as qe

OPTS = Options(node_overhead_w=0.0, pue=1.0, region="DE", fallback_g_per_kwh=999.0)
KWH = 0.5  # one GPU at 500 W for an hour


def readings(wh, rows):
    """Provider readings (ts, gCO2e/kWh, source) of region DE, as the grid source writes."""
    frame = pd.DataFrame(rows, columns=["ts", "g_co2_per_kwh", "source"]).assign(
        region="DE", fetched_at=T + 10 * H)
    wh.ingest("grid", frame[["ts", "region", "g_co2_per_kwh", "source",
                             "fetched_at"]]).result()


def hours(wh, opts=OPTS, n=3):
    df = qe.energy_by(wh.reader(), start=T, end=T + n * H, by="hour", opts=opts)
    return df["carbon_kg"].tolist(), [s[0] if len(s) == 1 else s
                                      for s in df["intensity_sources"]]


def test_each_hour_says_which_source_applied(wh):
    ingest(wh, samples("n0", 0, T, 3 * 240, 500))
    run_refresh(wh, now=T + 4 * H)
    # hour 0: Electricity Maps and WattTime both answer: Electricity Maps applies;
    # hour 1: WattTime alone (two 5-minute points, averaged);
    # hour 2: nothing inside: WattTime's last point (at 1:55) stands, 5 min old
    readings(wh, [(T, 100.0, "electricitymaps"), (T + 5 * M, 400.0, "watttime"),
                  (T + H, 300.0, "watttime"), (T + H + 55 * M, 500.0, "watttime")])
    kg, sources = hours(wh)
    assert sources == ["electricitymaps", "watttime", "watttime"]
    assert kg == pytest.approx([KWH * 100 / 1000, KWH * 400 / 1000, KWH * 500 / 1000])
    # a reading older than max_age no longer stands: the annual table applies
    stale = Options(node_overhead_w=0.0, pue=1.0, region="DE", max_age_h=0.05)
    kg, sources = hours(wh, stale)
    de = carbon.region_defaults().set_index("region").loc["DE"]
    assert sources[2] == f"table:DE {de['year']}"
    assert kg[2] == pytest.approx(KWH * de["g_co2_per_kwh"] / 1000)
    # the operator's import wins over every provider
    frame = pd.DataFrame({"ts": [T + H], "region": ["DE"], "g_co2_per_kwh": [50.0]})
    wh.write(lambda con: carbon.write_series(con, frame)).result()
    kg, sources = hours(wh)
    assert sources[:2] == ["electricitymaps", "import"]
    assert kg[1] == pytest.approx(KWH * 50 / 1000)


def test_a_day_lists_every_source_it_used(wh):
    ingest(wh, samples("n0", 0, T, 2 * 240, 500))
    run_refresh(wh, now=T + 3 * H)
    readings(wh, [(T, 100.0, "ukgrid"), (T + H, 200.0, "watttime")])
    df = qe.energy_by(wh.reader(), start=T, end=T + 2 * H, by="day",
                      opts=Options(node_overhead_w=0.0, pue=1.0, region="DE", max_age_h=0.5))
    assert sorted(df["intensity_sources"].iloc[0]) == ["ukgrid", "watttime"]
    assert df["carbon_kg"].iloc[0] == pytest.approx(KWH * (100 + 200) / 1000)


def test_other_regions_readings_do_not_apply(wh):
    ingest(wh, samples("n0", 0, T, 240, 500))
    run_refresh(wh, now=T + 2 * H)
    readings(wh, [(T, 100.0, "electricitymaps")])
    fr = Options(node_overhead_w=0.0, pue=1.0, region="FR")
    kg, sources = hours(wh, fr, n=1)
    assert sources == ["table:FR 2024"]


def test_a_providers_revised_reading_replaces_its_own_only(wh):
    readings(wh, [(T, 100.0, "electricitymaps"), (T, 400.0, "watttime")])
    readings(wh, [(T, 120.0, "electricitymaps")])  # Electricity Maps revised the hour
    rows = wh.reader().execute("SELECT source, g_co2_per_kwh FROM grid_intensity "
                               "ORDER BY source").fetchall()
    assert rows == [("electricitymaps", 120.0), ("watttime", 400.0)]


def test_migration_keeps_the_imported_series():
    con = duckdb.connect()
    migrated_before(con, "grid_sources")
    con.execute("INSERT INTO grid_intensity VALUES (?, 'DE', 300.0)", [T])
    migrate(con)
    assert con.execute("SELECT ts, region, g_co2_per_kwh, source, fetched_at "
                       "FROM grid_intensity").fetchall() == [(T, "DE", 300.0, "import", None)]
    # a provider's reading of the same hour sits beside it
    con.execute("INSERT INTO grid_intensity VALUES (?, 'DE', 280.0, 'watttime', ?)",
                [T, T + timedelta(hours=1)])
    assert con.execute("SELECT count(*) FROM grid_intensity").fetchall() == [(2,)]
