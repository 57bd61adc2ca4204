"""Carbon = energy x PUE x grid intensity at that time; defaults, staleness, embodied."""

from datetime import timedelta

import pandas as pd
import pytest

from tests.support.runs import H, M, T, add_job, ingest, run_refresh, samples
from warehouse import carbon
from warehouse.analytics import Options
from warehouse.queries import energy as qe

OPTS = Options(node_overhead_w=0.0, pue=1.5, region="XX", fallback_g_per_kwh=999.0)


def series(wh, rows, region=None):
    if region:
        frame = pd.DataFrame(rows, columns=["ts", "g_co2_per_kwh"]).assign(region=region)
        wh.write(lambda con: carbon.write_series(con, frame[["ts", "region",
                                                             "g_co2_per_kwh"]])).result()
    else:
        wh.ingest("carbon", pd.DataFrame(rows, columns=["ts", "g_co2_per_kwh"])).result()


def test_carbon_follows_a_changing_intensity(wh):
    # one GPU at 500 W for 2 h; intensity 100 g/kWh in hour 1, 300 in hour 2
    ingest(wh, samples("n0", 0, T, 480, 500))
    run_refresh(wh, now=T + 3 * H)
    series(wh, [(T, 100.0), (T + H, 300.0)])
    df = qe.energy_by(wh.reader(), start=T, end=T + 2 * H, by="hour", opts=OPTS)
    kwh = 0.5 * 1.5  # facility kWh per hour
    assert df["carbon_kg"].tolist() == pytest.approx([kwh * 100 / 1000, kwh * 300 / 1000])
    # per job at minute resolution: a job holding the GPU 0:30-1:30 sees half of each
    add_job(wh, "X", [{"start": T + 30 * M, "end": T + 90 * M, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1)
    run_refresh(wh, now=T + 3 * H)  # a job recorded late shows from the next refresh
    job = qe.job_energy(wh.reader(), start=T, end=T + 2 * H, opts=OPTS).iloc[0]
    assert job["carbon_kg"] == pytest.approx(0.25 * 1.5 * (100 + 300) / 1000)
    # readings inside an hour are averaged; a region's imported series wins over the
    # site series
    series(wh, [(T, 50.0), (T + 30 * M, 150.0)], region="XX")
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="hour", opts=OPTS)
    assert df["carbon_kg"].iloc[0] == pytest.approx(kwh * 100 / 1000)


def test_defaults_when_no_series_applies(wh):
    ingest(wh, samples("n0", 0, T, 240, 1000))
    run_refresh(wh, now=T + 2 * H)
    fr = Options(node_overhead_w=0.0, pue=1.0, region="FR")
    df = qe.energy_by(wh.reader(), start=T, end=T + H, opts=fr)
    table = carbon.region_defaults().set_index("region")
    assert df["carbon_kg"].iloc[0] == pytest.approx(table.loc["FR", "g_co2_per_kwh"] / 1000)
    assert df["intensity_sources"].iloc[0] == ["table:FR 2024"]
    unknown = Options(node_overhead_w=0.0, pue=1.0, region="ZZ", fallback_g_per_kwh=123.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, opts=unknown)
    assert df["carbon_kg"].iloc[0] == pytest.approx(0.123)
    # a reading older than max_age no longer stands
    series(wh, [(T - 48 * H, 10.0)])
    df = qe.energy_by(wh.reader(), start=T, end=T + H, opts=unknown)
    assert df["carbon_kg"].iloc[0] == pytest.approx(0.123)
    fresh = Options(node_overhead_w=0.0, pue=1.0, max_age_h=72.0, fallback_g_per_kwh=123.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, opts=fresh)
    assert df["carbon_kg"].iloc[0] == pytest.approx(0.010)


def test_measured_pue_series(wh):
    ingest(wh, samples("n0", 0, T, 480, 1000))
    run_refresh(wh, now=T + 3 * H)
    wh.write(lambda con: con.execute("INSERT INTO pue VALUES (?, 1.1), (?, 1.4)",
                                     [T - H, T + H])).result()
    df = qe.energy_by(wh.reader(), start=T, end=T + 2 * H, by="hour", opts=OPTS)
    assert df["facility_kwh"].tolist() == pytest.approx([1.1, 1.4])


def test_embodied_carbon_per_gpu_hour():
    # 2,500 kg over 5 years: 2,500,000 g / (5 x 8,766 h)
    assert carbon.embodied_g_per_gpu_hour(2500, 5) == pytest.approx(2.5e6 / 43830)
    assert carbon.embodied_g_per_gpu_hour(0, 5) == 0.0


def test_carbon_of_lost_gpu_hours(wh):
    ingest(wh, samples("n0", 0, T, 480, 400))
    series(wh, [(T, 200.0)])
    add_job(wh, "F", [{"start": T, "end": T + 2 * H, "state": "FAILED", "nodes": ["n0"],
                       "gpu_indices": [0], "reason": "KeyError: 'x'"}], gpus=1)
    run_refresh(wh, now=T + 3 * H)
    opts = Options(node_overhead_w=0.0, pue=1.5, embodied_kg_per_gpu=1000.0)
    lost = qe.failure_carbon(wh.reader(), start=T, end=T + 3 * H, opts=opts).iloc[0]
    # no checkpoints recorded anywhere: half the 2-h checkpoint interval is lost
    assert lost["gpu_hours_lost"] == pytest.approx(1.0)
    assert lost["lost_kwh"] == pytest.approx(1 * 0.4 * 1.5)
    assert lost["lost_carbon_kg"] == pytest.approx(1 * 0.4 * 1.5 * 200 / 1000)
    job = qe.job_energy(wh.reader(), start=T, end=T + 3 * H, opts=opts).iloc[0]
    assert job["embodied_kg"] == pytest.approx(2 * 1000 * 1000 / (5 * 8766) / 1000)


def test_window_is_a_parameter():
    p = carbon.intensity_params(region="de", fallback_g=1.0, max_age_h=2, pue=1.2,
                                width=timedelta(minutes=1))
    assert p["default_source"] == "table:DE 2024" and p["max_age"] == timedelta(hours=2)
