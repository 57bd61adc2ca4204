-- gpulens warehouse, migration 15: what a job holds of a shared GPU (issue 21).
-- Slurm's shard and MPS GRES give a job a share of a GPU, MIG GRES some of its GPU
-- instances (collector/slurm_gres.py); the energy of such a GPU is split by these
-- (warehouse/usage.py). Rows written before stay whole-GPU allocations (both NULL).
ALTER TABLE allocations ADD COLUMN share DOUBLE;           -- fraction 0-1 of the GPU's shards/MPS; NULL: whole GPU
ALTER TABLE allocations ADD COLUMN gpu_i_ids INTEGER[];    -- MIG GPU instance ids (GPU_I_ID); NULL: none
