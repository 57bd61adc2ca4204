"""Grid carbon intensity and PUE over time, for carbon accounting.

carbon (gCO2e) = IT energy (kWh) x PUE x grid carbon intensity (gCO2e/kWh) at that time.

Intensity of a time bucket, first that applies (the bucket's ``intensity_source`` says
which):
1. the readings of ``grid_intensity`` for the configured region: imported series
   (``gpulens import``, source ``import``) and the providers' readings (collector/grid/:
   ``electricitymaps``, ``ukgrid``, ``watttime``); else the site series
   ``carbon_intensity`` the collectors write (source ``site``). Readings inside the
   bucket are averaged, those of one source: where several sources cover a bucket, the
   first of :data:`SOURCE_ORDER` applies. Otherwise the last reading before the bucket
   stands (the first of SOURCE_ORDER among readings at that time), if it is at most
   ``max_age`` old;
2. the region's row of the static annual table, ``warehouse/data/grid_intensity_*.csv``
   (``defaults``: countries, Ember via Our World in Data; ``zones``: sub-national
   zones, Electricity Maps; cited in the files), else its parent
   zone's row (``US-CAL-XYZ`` -> ``US``; warehouse/grid_table.py), source
   ``table:<REGION> <year>`` naming the row that applied;
3. the configured fallback (default 481 g/kWh, the 2023 world average, Ember), source
   ``fallback``.

PUE of a bucket: the last ``pue`` reading at or before it, else the configured constant.
Embodied carbon per GPU-hour: kg per GPU x 1000 / (lifetime years x 8,766 h).
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from warehouse import grid_table
from warehouse.db import write_frame

HOURS_PER_YEAR = 8766.0  # 365.25 days

#: Which source applies where several cover the same time, first first: the operator's
#: own import, then average-mix providers (Electricity Maps: lifecycle factors; NESO:
#: operational ones), WattTime last (its co2_moer is a marginal rate). Others after.
SOURCE_ORDER = ("import", "electricitymaps", "ukgrid", "watttime")


def region_defaults() -> pd.DataFrame:
    """The shipped per-region defaults (warehouse/grid_table.py): region,
    g_co2_per_kwh (gCO2e/kWh), year, source, licence; one row per region."""
    rows = grid_table.shipped_table().rows.values()
    return pd.DataFrame([vars(r) for r in rows],
                        columns=["region", "g_co2_per_kwh", "year", "source", "licence"])


def default_intensity(region: str, fallback_g: float) -> tuple[float, str]:
    """(gCO2e/kWh, source) for a region without a reading: its row of the shipped annual
    table, else its parent zone's (US-CAL-XYZ -> US), else the fallback. source is
    'table:<ROW REGION> <year>' or 'fallback'."""
    row = grid_table.lookup(grid_table.shipped_table(), region)
    if row is not None:
        return row.g_co2_per_kwh, row.label
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
    $default_source, $sources (SOURCE_ORDER), $pue."""
    return """
series AS (
    SELECT ts, g, source, coalesce(list_position($sources::VARCHAR[], source), 1000) AS rank
    FROM (  -- a lake file exported before sources were stored has none: an import
        SELECT ts, g_co2_per_kwh AS g, coalesce(source, 'import') AS source
        FROM grid_intensity WHERE region = $region AND g_co2_per_kwh IS NOT NULL)
    UNION ALL
    SELECT ts, g_co2_per_kwh, 'site', 2000 FROM carbon_intensity
    WHERE NOT EXISTS (SELECT 1 FROM grid_intensity WHERE region = $region)
),
series_best AS (  -- one reading per time: the first source in order
    SELECT ts, g, source FROM series QUALIFY row_number() OVER (
        PARTITION BY ts ORDER BY rank, source) = 1
),
inside_by_source AS (
    SELECT b.ts, s.rank, s.source, avg(s.g) AS g FROM buckets b
    JOIN series s ON s.ts >= b.ts AND s.ts < b.ts + $width GROUP BY ALL
),
series_inside AS (
    SELECT ts, arg_min(g, (rank, source)) AS g, arg_min(source, (rank, source)) AS source
    FROM inside_by_source GROUP BY ts
),
series_before AS (
    SELECT b.ts, s.g, s.source, s.ts AS reading_ts
    FROM buckets b ASOF LEFT JOIN series_best s ON b.ts >= s.ts
),
intensity AS (
    SELECT b.ts,
           coalesce(i.g, CASE WHEN p.reading_ts >= b.ts - $max_age THEN p.g END,
                    $default_g) AS g_co2_per_kwh,
           coalesce(i.source, CASE WHEN p.reading_ts >= b.ts - $max_age THEN p.source END,
                    $default_source) AS intensity_source
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
            "default_g": g, "default_source": source, "sources": list(SOURCE_ORDER),
            "pue": float(pue)}


# --------------------------------------------------------------------- importing series

_INSERT_SERIES_SQL = """
INSERT INTO grid_intensity
SELECT ts, region, g_co2_per_kwh, 'import', now()::TIMESTAMP FROM _series
ON CONFLICT (ts, region, source) DO UPDATE SET g_co2_per_kwh = excluded.g_co2_per_kwh,
    fetched_at = excluded.fetched_at
"""


def write_series(con, frame: pd.DataFrame) -> int:
    """Upsert an imported intensity series (columns ts naive UTC, region, g_co2_per_kwh)
    into ``grid_intensity`` as source ``import``; runs on the writer thread. Returns the
    rows written."""
    frame = frame.drop_duplicates(["ts", "region"], keep="last")
    return write_frame(con, _INSERT_SERIES_SQL, "_series", frame)

