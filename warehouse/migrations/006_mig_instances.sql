-- gpulens warehouse, migration 6: the figures of each MIG GPU instance (issue 12).
-- gpu_samples holds one row per GPU, its MIG instances folded in (memory summed,
-- activity weighted by compute slices: docs/collectors.md, "MIG"); this table keeps what
-- each instance reported, for the instance-level questions (which slice is idle, which
-- one fills its memory). Kept as long as gpu_samples (retention.raw_days). Naive UTC.
CREATE TABLE gpu_mig_samples (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_index SMALLINT NOT NULL,
    gpu_i_id INTEGER NOT NULL,    -- GPU instance id (exporter label GPU_I_ID)
    gpu_i_profile VARCHAR,        -- its profile, e.g. 3g.40gb (label GPU_I_PROFILE)
    mem_used_mib REAL,            -- DCGM_FI_DEV_FB_USED of the instance
    gr_active_pct REAL,           -- DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100, of the instance
    sm_active_pct REAL            -- DCGM_FI_PROF_SM_ACTIVE x 100, of the instance
);
