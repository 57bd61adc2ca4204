-- gpulens warehouse, migration 20 (issue 17): the Energy page's method card ("jobs' GPU
-- energy from: energy counter ...") joined every allocation-hour of the range with the
-- range's GPU-hours of gpu_energy_1h (~0.4 s of CPU a day at 24,576 GPUs). The analytics
-- refresh now keeps its sums per hour beside the fleet's GPU-hours (derived; see
-- docs/analytics.md, "The 1-hour tier per hour"). NULL on rows kept before this
-- migration: those hours are computed live until the refresh recomputes them.
ALTER TABLE fleet_hours_1h ADD COLUMN held_s DOUBLE;       -- GPU-seconds allocations held
                                                           -- x their share, in GPU-hours
                                                           -- with energy samples
ALTER TABLE fleet_hours_1h ADD COLUMN counter_s DOUBLE;    -- those the energy counter gave
ALTER TABLE fleet_hours_1h ADD COLUMN energy_sig HUGEINT;  -- sum of hashes of the hour's
                                                           -- gpu_energy_1h rows
