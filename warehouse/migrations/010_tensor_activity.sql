-- gpulens warehouse, migration 10: tensor-core and memory activity (issue 15, section 2).
-- DCGM's profiling fields DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DCGM_FI_PROF_DRAM_ACTIVE,
-- stored x 100 (percent of cycles); NULL where the exporter does not export them (no DCP
-- support, another profiler attached, NVML). The rollups keep their sample-weighted means.
ALTER TABLE gpu_samples ADD COLUMN tensor_active_pct REAL;      -- % of cycles, tensor pipe
ALTER TABLE gpu_samples ADD COLUMN dram_active_pct REAL;        -- % of cycles, memory interface
ALTER TABLE gpu_samples_1m ADD COLUMN tensor_active_pct_avg REAL;
ALTER TABLE gpu_samples_1m ADD COLUMN dram_active_pct_avg REAL;
ALTER TABLE gpu_samples_1h ADD COLUMN tensor_active_pct_avg REAL;
ALTER TABLE gpu_samples_1h ADD COLUMN dram_active_pct_avg REAL;
