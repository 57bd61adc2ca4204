"""The static annual grid-intensity table (issue 21): its figures against their sources,
the lookup by country and zone, the fallback the page names, and the table read as
outside input (a bad row costs that row)."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard.figures import energy as fig
from tests.support.runs import H, T, ingest, run_refresh, samples
from warehouse import carbon, grid_table
from warehouse.analytics import Options
from warehouse.queries import energy as qe

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "grid_table"

# Quoted from Our World in Data's "carbon-intensity-electricity.csv" (Ember; Energy
# Institute), the release current in July 2025 (tests/fixtures/grid_table/README.md):
# "United States,USA,2024,383.5492" and so on.
OWID = {"US": (383.5492, 2024), "GB": (210.89114, 2024), "JP": (482.32416, 2024),
        "DE": (344.13992, 2024), "FR": (44.179085, 2024), "IN": (708.3216, 2024),
        "CN": (559.5517, 2024), "NO": (30.745583, 2024), "WORLD": (473.0065, 2024),
        "AE": (492.69827, 2023)}
# Quoted from CO2.js data/output/electricity-maps/yearly_2024.json (2026-02-04):
# "US-CAL-CISO": {... "carbonIntensity": {"value": 229, "unit": "gCO2eq/kWh"} ...}.
ZONES = {"US-CAL-CISO": 229, "US-TEX-ERCO": 377, "CA-QC": 35, "CA-ON": 91, "JP-TK": 539,
         "AU-NSW": 541}
# A second, independent source: Ember's own API as CO2.js kept it
# (data/output/average-intensities.json, 2025-08-03; "emissions_intensity_gco2_per_kwh").
EMBER_API = {"US": 383.55, "GB": 215.79, "JP": 483.73, "DE": 342.06, "FR": 44.18,
             "IN": 708.96, "CN": 557.5}


@pytest.mark.parametrize("region", sorted(OWID))
def test_country_figures_are_ember_via_owid(region):
    g, year = OWID[region]
    row = grid_table.lookup(grid_table.shipped_table(), region)
    assert row.region == region and row.year == year
    assert row.g_co2_per_kwh == pytest.approx(g, abs=0.05)
    assert (row.source, row.licence) == ("owid-ember", "CC-BY-4.0")
    assert carbon.default_intensity(region.lower(), 1.0) == (row.g_co2_per_kwh,
                                                             f"table:{region} {year}")


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_sub_national_zones_are_electricity_maps(zone):
    row = grid_table.lookup(grid_table.shipped_table(), zone)
    assert (row.region, row.g_co2_per_kwh, row.year) == (zone, ZONES[zone], 2024)
    assert (row.source, row.licence) == ("electricitymaps", "ODbL-1.0")


def test_countries_agree_with_embers_own_figures():
    # OWID republishes Ember; revisions between releases stay within a few percent
    table = grid_table.shipped_table()
    for region, g in EMBER_API.items():
        assert grid_table.lookup(table, region).g_co2_per_kwh == pytest.approx(g, rel=0.03)


def test_the_shipped_table_is_whole_and_every_row_names_its_source():
    table = grid_table.shipped_table()
    assert table.rejected == []
    countries = [r for r in table.rows.values() if len(r.region) == 2]
    zones = [r for r in table.rows.values() if "-" in r.region]
    assert len(countries) >= 200 and len(zones) >= 100
    assert {(r.source, r.licence) for r in countries} == {("owid-ember", "CC-BY-4.0")}
    assert {(r.source, r.licence) for r in zones} == {("electricitymaps", "ODbL-1.0")}
    assert "NA" in table.rows  # Namibia, not a missing value
    assert carbon.region_defaults().set_index("region").loc["NA", "g_co2_per_kwh"] > 0


def test_a_zone_the_table_lacks_takes_its_countrys_row():
    table = grid_table.shipped_table()
    assert grid_table.lookup(table, "US-CA") is table.rows["US"]
    assert grid_table.lookup(table, "us-cal-nowhere") is table.rows["US"]
    assert grid_table.lookup(table, "ZZ") is None
    assert grid_table.lookup(table, "") is None
    assert carbon.default_intensity("US-CA", 481.0)[1] == "table:US 2024"
    assert carbon.default_intensity("ZZ", 481.0) == (481.0, "fallback")


@pytest.mark.parametrize("region, source, g", [
    ("ZZ", "fallback", 123.0),
    ("US-CA", "table:US 2024", OWID["US"][0]),
    ("CA-QC", "table:CA-QC 2024", 35.0),
])
def test_the_energy_page_names_the_row_or_the_fallback(wh, region, source, g):
    ingest(wh, samples("n0", 0, T, 240, 1000))  # 1 kWh in the hour
    run_refresh(wh, now=T + 2 * H)
    opts = Options(node_overhead_w=0.0, pue=1.0, region=region, fallback_g_per_kwh=123.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, opts=opts)
    assert df["intensity_sources"].iloc[0] == [source]
    assert df["carbon_kg"].iloc[0] == pytest.approx(g / 1000, abs=1e-4)
    assert fig.intensity_sources(df) == f"{source} 1 h"


def test_the_script_makes_the_shipped_rows_from_its_inputs(tmp_path):
    zones_out = tmp_path / "zones.csv"
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "grid_intensity_table.py"),
         "--owid", str(FIXTURES / "owid_carbon_intensity_electricity.csv"),
         "--owid-release", "the release current in July 2025",
         "--m49", str(FIXTURES / "unsd_m49.csv"),
         "--zones", str(FIXTURES / "co2js_electricity_maps_yearly_2024.json"),
         "--zones-year", "2024", "--zones-release", "2026-02-04",
         "--zones-out", str(zones_out)],
        capture_output=True, text=True, check=True).stdout
    made = grid_table.parse(out, "script output")
    zones = grid_table.parse(zones_out.read_text(), "zones output")
    assert made.rejected == zones.rejected == []
    # aggregates and national Electricity Maps zones are left out; Taiwan, Kosovo and
    # World named though M49 lacks them; each country's latest year
    assert sorted(made.rows) == ["DE", "EH", "NA", "TW", "US", "WORLD", "XK"]
    assert sorted(zones.rows) == ["AU-NSW", "CA-QC", "US-CAL-CISO", "US-HI"]
    assert (made.rows["DE"].year, made.rows["NA"].year, made.rows["EH"].year) == (
        2024, 2023, 2009)
    # one licence per file, and each file's header names the release it came from
    assert {r.licence for r in made.rows.values()} == {"CC-BY-4.0"}
    assert {r.licence for r in zones.rows.values()} == {"ODbL-1.0"}
    assert "(the release current in July 2025;" in out
    assert "yearly_2024.json (2026-02-04)" in zones_out.read_text()
    shipped = grid_table.shipped_table().rows
    made.rows.update(zones.rows)
    assert {k: shipped[k] for k in made.rows} == made.rows
    # the shipped files are the script's output: the same headers
    for name, text in zip(grid_table.FILES, (out, zones_out.read_text()), strict=True):
        shipped_text = (ROOT / "warehouse" / "data" / name).read_text()
        header = [ln for ln in text.splitlines() if ln.startswith("#")]
        assert [ln for ln in shipped_text.splitlines() if ln.startswith("#")] == header


# --------------------------------------------------------------- the table as input

GOOD = "region,g_co2_per_kwh,year,source,licence\nDE,344.1,2024,owid-ember,CC-BY-4.0\n"


def test_bad_rows_cost_themselves_only():
    text = GOOD + "\n".join([
        "FR,abc,2024,x,y",  # not a number
        "GB,-1,2024,x,y",  # below 0
        "JP,5000,2024,x,y",  # a unit mix-up
        "IN,nan,2024,x,y",
        "CN,500,24,x,y",  # not a year
        "Germany,300,2024,x,y",  # not a code
        "US,380,2024,x,y,extra",  # more fields than the header
        'US-"CAL,1,2024',  # broken quoting
        "# a comment",
        "us-cal-ciso,229,2024",  # lower case and no source: fine
        "de,300,2025,mine,",  # an operator's own row overrides the shipped one
    ]) + "\n"
    t = grid_table.parse(text, "test.csv")
    assert sorted(t.rows) == ["DE", "US-CAL-CISO"]
    assert t.rows["DE"] == grid_table.Row("DE", 300.0, 2025, "mine", "")
    assert t.rows["US-CAL-CISO"].label == "table:US-CAL-CISO 2024"
    assert len(t.rejected) == 8
    assert t.rejected[0].startswith("test.csv line 3: g_co2_per_kwh is not a number: 'FR,abc")
    assert any("Germany" in r for r in t.rejected)


@pytest.mark.parametrize("text", ["", "# only comments\n", "a,b,c\nDE,1,2024\n",
                                  "region,year\nDE,2024\n"])
def test_a_table_without_its_header_is_refused_by_name(text):
    with pytest.raises(grid_table.GridTableError, match="mine.csv"):
        grid_table.parse(text, "mine.csv")


_line = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(st.text(max_size=8), st.sampled_from(
        ["DE", "US-CAL-CISO", "WORLD", "1e400", "-0", "nan", "inf", "2024", "3000.1", '"']
    )), max_size=6).map(",".join),
)


@given(st.lists(_line, max_size=8))
def test_any_lines_cost_only_themselves(lines):
    # a row accepted stays whatever lines follow (a good one for its region replaces it);
    # what is kept obeys the rules; each refused line is named by its number
    junk = [ln.replace("\r", " ").replace("\n", " ") for ln in lines]
    t = grid_table.parse("region,g_co2_per_kwh,year\nFR,44.2,2024\n" + "\n".join(junk),
                         "t.csv")
    assert "FR" in t.rows
    for row in t.rows.values():
        assert math.isfinite(row.g_co2_per_kwh)
        assert 0 <= row.g_co2_per_kwh <= grid_table.MAX_G_PER_KWH
        assert 1990 <= row.year <= 2100
    data = [n for n, ln in enumerate(junk, 3) if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(t.rejected) <= len(data)
    assert all(any(r.startswith(f"t.csv line {n}: ") for n in data) for r in t.rejected)
