"""Column contracts of the warehouse's ingest API.

Every batch handed to :meth:`warehouse.Warehouse.ingest` is a columnar table (a
``pyarrow.Table`` or a ``pandas.DataFrame``) whose columns are a subset of the schema of
its kind below; missing nullable columns become NULL. Units are in the column names
(``_w`` watts, ``_c`` degrees Celsius, ``_j`` joules, ``_mib`` MiB, ``_mhz`` MHz,
``_pct`` percent 0-100, ``_s`` seconds). Timestamps are UTC, naive
(``timestamp[us]`` without a zone): a zone-aware input is converted to UTC.

The natural key of each kind (``KEYS``) is what makes delivery idempotent: a row whose
key is already stored is ignored (telemetry, events) or replaces the stored row
(scheduler state, topology), so delivering the same batch twice changes nothing.
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.db import fill

TS = pa.timestamp("us")

SCHEMAS: dict[str, pa.Schema] = {
    "racks": pa.schema(
        [
            ("rack", pa.string()),
            ("zone", pa.string()),
            ("row", pa.int32()),  # floor row number
            ("x", pa.float64()),  # floor position, tiles (one tile = one rack width)
            ("y", pa.float64()),
        ]
    ),
    "nodes": pa.schema(
        [
            ("node", pa.string()),
            ("rack", pa.string()),
            ("partition", pa.string()),
            ("gpus", pa.int32()),
        ]
    ),
    "gpus": pa.schema(
        [
            ("gpu_uuid", pa.string()),
            ("node", pa.string()),
            ("gpu_index", pa.int16()),
            ("model", pa.string()),
            ("tdp_w", pa.float64()),
            ("memory_mib", pa.float64()),
        ]
    ),
    # One wide row per GPU per scrape.
    "samples": pa.schema(
        [
            ("ts", TS),
            ("node", pa.string()),
            ("gpu_index", pa.int16()),
            ("gpu_uuid", pa.string()),
            ("interval_s", pa.float32()),  # sampling period this row stands for
            ("util_pct", pa.float32()),  # GPU utilisation (DCGM_FI_DEV_GPU_UTIL)
            ("mem_util_pct", pa.float32()),  # memory-copy utilisation
            ("sm_active_pct", pa.float32()),  # DCGM_FI_PROF_SM_ACTIVE x 100; NULL if absent
            ("mem_used_mib", pa.float32()),
            ("power_w", pa.float32()),
            ("energy_j", pa.float64()),  # the GPU's cumulative energy counter, joules
            ("temp_c", pa.float32()),
            ("mem_temp_c", pa.float32()),  # HBM temperature
            ("sm_clock_mhz", pa.float32()),
            ("throttle_thermal", pa.bool_()),
            ("throttle_power", pa.bool_()),
            ("ecc_sbe_volatile", pa.int64()),  # single-bit ECC errors since driver load
            ("ecc_dbe_volatile", pa.int64()),  # double-bit ECC errors since driver load
            ("xid_last", pa.int32()),  # last XID seen by the exporter, 0 = none
            # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE / _DRAM_ACTIVE x 100; NULL if absent
            ("tensor_active_pct", pa.float32()),
            ("dram_active_pct", pa.float32()),
        ]
    ),
    # One row per MIG GPU instance per scrape (the GPU's own row is in "samples").
    "mig_samples": pa.schema(
        [
            ("ts", TS),
            ("node", pa.string()),
            ("gpu_index", pa.int16()),
            ("gpu_i_id", pa.int32()),  # GPU instance id (label GPU_I_ID)
            ("gpu_i_profile", pa.string()),  # e.g. 3g.40gb
            ("mem_used_mib", pa.float32()),
            ("gr_active_pct", pa.float32()),  # DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100
            ("sm_active_pct", pa.float32()),  # DCGM_FI_PROF_SM_ACTIVE x 100
        ]
    ),
    "events": pa.schema(
        [
            ("ts", TS),
            ("node", pa.string()),
            ("gpu_index", pa.int16()),  # NULL for node-wide events
            ("gpu_uuid", pa.string()),
            ("kind", pa.string()),  # xid | ecc | row_remap | pcie_replay | throttle | lost
            ("code", pa.int32()),  # the XID number for kind=xid, else 0
            ("detail", pa.string()),
        ]
    ),
    "jobs": pa.schema(
        [
            ("job_id", pa.string()),
            ("name", pa.string()),
            ("user_name", pa.string()),
            ("account", pa.string()),
            ("partition", pa.string()),
            ("job_type", pa.string()),  # pretrain | sft | eval | debug | NULL if unknown
            ("state", pa.string()),  # Slurm's state: PENDING, RUNNING, COMPLETED, FAILED...
            ("submit_ts", TS),
            ("start_ts", TS),  # first run's start, NULL while pending
            ("end_ts", TS),  # NULL while pending or running
            ("gpus", pa.int32()),  # GPUs requested/allocated
            ("nodes", pa.int32()),
            ("restarts", pa.int32()),  # requeues so far
        ]
    ),
    # One row per attempt of a job (run_index 0 is the first; requeues count up).
    "runs": pa.schema(
        [
            ("job_id", pa.string()),
            ("run_index", pa.int32()),
            ("start_ts", TS),
            ("end_ts", TS),  # NULL while running
            ("state", pa.string()),  # RUNNING, COMPLETED, FAILED, NODE_FAIL, REQUEUED, ...
            ("exit_code", pa.int32()),
            ("signal", pa.int32()),
            ("reason", pa.string()),  # failure reason if known (log line, Slurm reason)
            ("failed_node", pa.string()),
            ("gpus", pa.int32()),
            ("nodelist", pa.string()),  # Slurm host list, e.g. node[001-004]
        ]
    ),
    # One row per GPU of a run.
    "allocations": pa.schema(
        [
            ("job_id", pa.string()),
            ("run_index", pa.int32()),
            ("node", pa.string()),
            ("gpu_index", pa.int16()),
            ("start_ts", TS),
            ("end_ts", TS),  # NULL while running
            # fraction 0-1 of the GPU's shards or MPS the run holds (Slurm shard/mps
            # GRES); NULL: the whole GPU, MIG instances, or a share Slurm did not print
            ("share", pa.float64()),
            # the MIG GPU instance ids (GPU_I_ID) the run holds on the GPU; NULL: none
            ("gpu_i_ids", pa.list_(pa.int32())),
        ]
    ),
    "carbon": pa.schema(
        [
            ("ts", TS),
            ("g_co2_per_kwh", pa.float64()),  # grid carbon intensity, gCO2e per kWh
        ]
    ),
    # A checkpoint a job wrote (from a checkpoint API or a log rule); facts, append-only.
    "checkpoints": pa.schema(
        [
            ("ts", TS),  # when the checkpoint was complete on storage
            ("job_id", pa.string()),
            ("run_index", pa.int32()),  # NULL if the source does not know the run
            ("step", pa.int64()),  # training step, NULL if unknown
            ("write_s", pa.float64()),  # seconds spent writing it, NULL if unknown
            ("detail", pa.string()),
        ]
    ),
    # Grid carbon intensity from a provider (collector/grid/, issue 21): the period
    # starting at ts; a provider's later answer for the same ts replaces its earlier one.
    "grid": pa.schema(
        [
            ("ts", TS),
            ("region", pa.string()),  # the site's carbon.region
            ("g_co2_per_kwh", pa.float64()),  # gCO2e per kWh
            ("source", pa.string()),  # the provider: electricitymaps, watttime, ukgrid
            ("fetched_at", TS),  # when gpulens asked
        ]
    ),
    # Node power read from the BMC (collector/bmc_source.py); facts, append-only.
    "node_power": pa.schema(
        [
            ("ts", TS),
            ("node", pa.string()),
            ("total_power_w", pa.float64()),  # the node's input power, W
            ("energy_j", pa.float64()),  # the BMC's cumulative energy counter, J
            ("source", pa.string()),  # 'ipmi' or 'redfish'
        ]
    ),
}

KEYS: dict[str, tuple[str, ...]] = {
    "racks": ("rack",),
    "nodes": ("node",),
    "gpus": ("gpu_uuid",),
    "samples": ("node", "gpu_index", "ts"),
    "mig_samples": ("node", "gpu_index", "gpu_i_id", "ts"),
    "events": ("ts", "node", "gpu_index", "kind", "code"),
    "jobs": ("job_id",),
    "runs": ("job_id", "run_index"),
    "allocations": ("job_id", "run_index", "node", "gpu_index"),
    "carbon": ("ts",),
    "checkpoints": ("ts", "job_id"),
    "node_power": ("ts", "node"),
    "grid": ("ts", "region", "source"),
}

# Kinds whose rows are facts that never change (append, ignore repeats) versus state
# that a later delivery updates (upsert: the newest delivery wins).
APPEND_ONLY = frozenset({"samples", "mig_samples", "events", "checkpoints", "node_power"})

TABLES: dict[str, str] = {
    "racks": "racks",
    "nodes": "nodes",
    "gpus": "gpus",
    "samples": "gpu_samples",
    "mig_samples": "gpu_mig_samples",
    "events": "gpu_events",
    "jobs": "jobs",
    "runs": "job_runs",
    "allocations": "allocations",
    "carbon": "carbon_intensity",
    "checkpoints": "checkpoints",
    "node_power": "node_power",
    "grid": "grid_intensity",
}


def empty(kind: str) -> pa.Table:
    """An empty table of the given kind's schema."""
    return SCHEMAS[kind].empty_table()


#: A 32-bit key of an allocation (UINTEGER): DuckDB's ``hash()`` of its primary key,
#: shifted. The kept hours' read checks weight each allocation's microseconds by it
#: (warehouse/kept_hours.py:ALLOC_KEY); hashed on each read it cost ~90 ms of the ~180-ms
#: check over a 24,576-GPU week, so it is kept (migration 26). Another DuckDB may hash
#: otherwise: rows written before and after an upgrade keep the key they were written
#: with, which is all the check needs (a stored value that never changes for a row).
ALLOC_KEY_SQL = ("(hash(job_id::VARCHAR, run_index::INTEGER, node::VARCHAR, "
                 "gpu_index::SMALLINT) >> 32)::UINTEGER")

#: Columns of a warehouse table the writer derives from the row (not in the batch's
#: schema): name -> SQL expression over the row's key columns (:data:`KEYS`), so an
#: update never changes it. A writer that inserts rows by other means than
#: :meth:`warehouse.Warehouse.ingest` selects them with :func:`derived_columns`; the
#: Parquet export leaves them out.
DERIVED: dict[str, dict[str, str]] = {"allocations": {"alloc_key": ALLOC_KEY_SQL}}


def derived_columns(table: str) -> str:
    """``, expr AS name`` for each derived column of ``table`` (:data:`DERIVED`), to
    append to a SELECT list over the batch's columns; empty for a table without any."""
    return "".join(fill(", {expr} AS {name}", expr=expr, name=name)
                   for name, expr in DERIVED.get(table, {}).items())
