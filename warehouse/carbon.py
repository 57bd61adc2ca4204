"""Grid carbon intensity and PUE over time, for carbon accounting.

carbon (gCO2e) = IT energy (kWh) x PUE x grid carbon intensity (gCO2e/kWh) at that time.

Intensity of a time bucket, first that applies:
1. the series: imported rows of ``grid_intensity`` for the configured region (CSV:
   timestamp, region, gCO2e/kWh), else the site series ``carbon_intensity`` the
   collectors write. Readings inside the bucket are averaged; otherwise the last reading
   before it stands, if it is at most ``max_age`` old;
2. the region's default from ``warehouse/data/grid_intensity_defaults.csv`` (Ember 2023
   yearly figures, cited in the file);
3. the configured fallback (default 481 g/kWh, the 2023 world average, Ember).

PUE of a bucket: the last ``pue`` reading at or before it, else the configured constant.
Embodied carbon per GPU-hour: kg per GPU x 1000 / (lifetime years x 8,766 h).
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from warehouse.db import read_data_csv, shipped, write_frame

HOURS_PER_YEAR = 8766.0  # 365.25 days


def region_defaults() -> pd.DataFrame:
    """The shipped per-region defaults: region, g_co2_per_kwh, year."""
    df = read_data_csv(shipped("grid_intensity_defaults.csv"))
    df["g_co2_per_kwh"] = df["g_co2_per_kwh"].astype(float)
    return df


def default_intensity(region: str, fallback_g: float) -> tuple[float, str]:
    """(gCO2e/kWh, source) for a region without a series: its shipped default, else the
    fallback. source is 'default:<REGION>' or 'fallback'."""
    table = region_defaults()
    hit = table[table["region"].str.upper() == (region or "").upper()]
    if region and len(hit):
        return float(hit["g_co2_per_kwh"].iloc[0]), f"default:{region.upper()}"
    return float(fallback_g), "fallback"


def embodied_g_per_gpu_hour(kg_per_gpu: float, lifetime_years: float) -> float:
    """Embodied carbon amortised per GPU-hour, gCO2e (0 when kg_per_gpu is 0)."""
    if kg_per_gpu <= 0 or lifetime_years <= 0:
        return 0.0
    return kg_per_gpu * 1000.0 / (lifetime_years * HOURS_PER_YEAR)


def intensity_ctes() -> str:
    """CTEs ``intensity(ts, g_co2_per_kwh, intensity_source)`` and ``pue_of(ts, pue)``
    for the buckets of a CTE ``buckets(ts)`` the caller defines first. Parameters:
    $region, $width (bucket length, INTERVAL), $max_age (INTERVAL), $default_g,
    $default_source, $pue."""
    return """
series AS (
    SELECT ts, g_co2_per_kwh AS g FROM grid_intensity WHERE region = $region
    UNION ALL
    SELECT ts, g_co2_per_kwh FROM carbon_intensity
    WHERE NOT EXISTS (SELECT 1 FROM grid_intensity WHERE region = $region)
),
series_inside AS (
    SELECT b.ts, avg(s.g) AS g FROM buckets b
    JOIN series s ON s.ts >= b.ts AND s.ts < b.ts + $width GROUP BY b.ts
),
series_before AS (
    SELECT b.ts, s.g, s.ts AS reading_ts FROM buckets b ASOF LEFT JOIN series s ON b.ts >= s.ts
),
intensity AS (
    SELECT b.ts,
           coalesce(i.g, CASE WHEN p.reading_ts >= b.ts - $max_age THEN p.g END,
                    $default_g) AS g_co2_per_kwh,
           CASE WHEN i.g IS NOT NULL OR p.reading_ts >= b.ts - $max_age THEN 'series'
                ELSE $default_source END AS intensity_source
    FROM buckets b LEFT JOIN series_inside i USING (ts) LEFT JOIN series_before p USING (ts)
),
pue_of AS (
    SELECT b.ts, coalesce(p.pue, $pue) AS pue
    FROM buckets b ASOF LEFT JOIN pue p ON b.ts >= p.ts
)"""


def intensity_params(*, region: str, fallback_g: float, max_age_h: float, pue: float,
                     width: timedelta) -> dict:
    """Parameters of :func:`intensity_ctes`."""
    g, source = default_intensity(region, fallback_g)
    return {"region": region or "", "width": width, "max_age": timedelta(hours=max_age_h),
            "default_g": g, "default_source": source, "pue": float(pue)}


# --------------------------------------------------------------------- importing series

_INSERT_SERIES_SQL = """
INSERT INTO grid_intensity SELECT ts, region, g_co2_per_kwh FROM _series
ON CONFLICT (ts, region) DO UPDATE SET g_co2_per_kwh = excluded.g_co2_per_kwh
"""


def write_series(con, frame: pd.DataFrame) -> int:
    """Upsert an intensity series (columns ts naive UTC, region, g_co2_per_kwh) into
    ``grid_intensity``; runs on the writer thread. Returns the rows written."""
    frame = frame.drop_duplicates(["ts", "region"], keep="last")
    return write_frame(con, _INSERT_SERIES_SQL, "_series", frame)
