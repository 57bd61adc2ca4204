"""A gap read back from Prometheus under ``pull="federate"`` (collector/prometheus.py):
the raw samples thinned to what a pull at each tick would have stored.

Prometheus holds every scrape, and may scrape more often than gpulens pulls (every 15 s
against 60 s, docs/scaling.md). A pull stores one row per GPU and interval, and each row
stands for one interval in the rollups; :func:`one_per_step` keeps as many from a gap,
after each GPU's newest row already stored (:func:`newest_seen`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["newest_seen", "one_per_step"]


def newest_seen(seen: pa.Table | None, samples: pa.Table) -> pa.Table:
    """Each GPU's newest sample time (``node``, ``gpu_index``, ``ts``) in ``seen`` and
    ``samples``."""
    rows = samples.select(["node", "gpu_index", "ts"])
    both = rows if seen is None else pa.concat_tables([seen, rows])
    newest = both.group_by(["node", "gpu_index"]).aggregate([("ts", "max")])
    return newest.rename_columns(["node", "gpu_index", "ts"])


def one_per_step(samples: pa.Table, instances: pa.Table, step_s: float,
                 seen: pa.Table | None) -> tuple[pa.Table, pa.Table]:
    """Raw samples (and their MIG rows) thinned to what a pull at each tick would have
    stored: per GPU the newest sample of each step ``((k-1) step, k step]`` of Unix time,
    and none of the step of the newest sample ``seen`` holds for it, or of one before.
    Prometheus may scrape more often than gpulens pulls (every 15 s against 60 s): each
    row stands for ``step_s`` seconds in the rollups, so every raw sample kept would
    count the gap's seconds several times over; and a sample older than the one the
    last pull stored would walk the XID gauge back and report an old XID again."""
    if samples.num_rows == 0:
        return samples, instances
    step_us = max(1, round(step_s * 1e6))
    frame = pd.DataFrame({"node": samples["node"].to_numpy(zero_copy_only=False),
                          "gpu": samples["gpu_index"].to_numpy(zero_copy_only=False),
                          "t": samples["ts"].cast(pa.int64()).to_numpy()})
    frame["step"] = -(-frame["t"] // step_us)
    if seen is not None and seen.num_rows:
        last = pd.DataFrame({"node": seen["node"].to_numpy(zero_copy_only=False),
                             "gpu": seen["gpu_index"].to_numpy(zero_copy_only=False),
                             "last": -(-seen["ts"].cast(pa.int64()).to_numpy() // step_us)})
        after = frame.merge(last, on=["node", "gpu"], how="left")["last"].to_numpy()
        frame = frame[~(frame["step"].to_numpy() <= after)]  # NaN (not seen): kept
    keep = np.sort(frame.groupby(["node", "gpu", "step"], sort=False)["t"].idxmax().to_numpy())
    if len(keep) == samples.num_rows:
        return samples, instances
    samples = samples.take(keep)
    if instances.num_rows:
        instances = instances.join(samples.select(["ts", "node", "gpu_index"]),
                                   keys=["ts", "node", "gpu_index"], join_type="left semi")
    return samples, instances
