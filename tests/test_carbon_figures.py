"""The Energy page says which grid-intensity source applied to each hour (issue 21): the
intensity is drawn once per source, and the Emissions card counts each source's hours."""

from datetime import datetime, timedelta

import pandas as pd

from dashboard.figures import energy as fig

T = datetime(2026, 11, 2)


def frame(sources):
    n = len(sources)
    return pd.DataFrame({
        "hour": [T + timedelta(hours=i) for i in range(n)],
        "gpu_kwh": [1.0] * n, "other_kwh": [0.0] * n, "it_kwh": [1.0] * n,
        "facility_kwh": [1.2] * n, "carbon_kg": [0.12 * (i + 1) for i in range(n)],
        "intensity_sources": sources})


def test_one_line_per_source_and_the_hours_of_each():
    df = frame([["electricitymaps"], ["electricitymaps"], ["table:DE 2023"],
                ["electricitymaps"]])
    f = fig.pue_and_intensity(df, x="hour")
    lines = {t.name: t for t in f.data if t.name.startswith("Grid intensity")}
    assert set(lines) == {"Grid intensity: electricitymaps", "Grid intensity: table:DE 2023"}
    em = list(lines["Grid intensity: electricitymaps"].y)
    assert em[2] is None or em[2] != em[2]  # the table's hour is not on this line
    assert em[0] == 100.0 and em[3] == 400.0  # g/kWh = 1000 x kg / facility kWh
    assert fig.intensity_sources(df) == "electricitymaps 3 h · table:DE 2023 1 h"


def test_a_day_with_two_sources_and_source_names_as_text():
    df = frame([["watttime", "import"], ["<b>x</b>"]])
    assert fig.intensity_sources(df, x="day") == "import + watttime 1 d · <b>x</b> 1 d"
    names = [t.name for t in fig.pue_and_intensity(df, x="hour").data]
    assert "Grid intensity: &lt;b&gt;x&lt;/b&gt;" in names  # escaped in the legend
    assert fig.intensity_sources(None) == "no intensity applied"
