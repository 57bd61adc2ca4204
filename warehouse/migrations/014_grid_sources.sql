-- gpulens warehouse, migration 14: grid intensity from several sources (issue 21).
-- grid_intensity keeps, besides the imported series, the readings of the intensity
-- providers (collector/grid/): each row says which source gave it and when gpulens
-- fetched it, and two sources may give the same hour (warehouse/carbon.py picks one).
-- DuckDB cannot change a primary key in place: the table is rebuilt, the imported rows
-- keep their values with source 'import'.
CREATE TABLE grid_intensity_new (
    ts TIMESTAMP NOT NULL,           -- start of the period the reading stands for
    region VARCHAR NOT NULL,         -- the site's carbon.region (imports: the CSV's)
    g_co2_per_kwh DOUBLE,            -- gCO2e per kWh
    source VARCHAR NOT NULL,         -- import | electricitymaps | watttime | ukgrid
    fetched_at TIMESTAMP,            -- when gpulens fetched or imported it (NULL: before 16)
    PRIMARY KEY (ts, region, source)
);
INSERT INTO grid_intensity_new
SELECT ts, region, g_co2_per_kwh, 'import', NULL FROM grid_intensity;
DROP TABLE grid_intensity;
ALTER TABLE grid_intensity_new RENAME TO grid_intensity;
