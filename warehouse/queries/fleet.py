"""Facts about the fleet that many queries share, each defined once.

- ``STALE_AFTER_S``: a GPU whose latest sample is older than this (seconds) counts as
  not reporting (eight scrapes at the default 15-s interval).
- Each GPU's latest sample: read from the writer's ``gpu_latest`` table (one row per
  GPU, :func:`latest_source`), not by scanning the raw tier (issue 17).
- GPUs per node: read from the warehouse's ``nodes`` table, never assumed. A node the
  table does not know, or lists with no GPUs, takes the fleet's most common count
  (:data:`NODE_GPUS_SQL`); only a warehouse with no topology at all falls back to
  :data:`FALLBACK_GPUS_PER_NODE`.
"""

from __future__ import annotations

from warehouse.db import fill

#: Seconds without a sample after which a GPU counts as not reporting.
STALE_AFTER_S = 120.0

#: GPUs per node when the warehouse holds no topology yet (an HGX/DGX node's eight).
FALLBACK_GPUS_PER_NODE = 8

#: SQL expression: the fleet's most common GPUs per node (``nodes.gpus``, else counted
#: from ``gpus``), or the fallback when neither table knows a node.
TYPICAL_GPUS_SQL = fill(
    "coalesce((SELECT mode(gpus) FROM nodes WHERE gpus > 0),"
    " (SELECT mode(c) FROM (SELECT count(*) AS c FROM gpus GROUP BY node)), {fallback})",
    fallback=FALLBACK_GPUS_PER_NODE)

#: SQL expression template: the GPU count ``{gpus}`` where it is one (above 0), else the
#: fleet's typical count: a node the topology does not know (NULL), or lists with 0 GPUs
#: or fewer while it has GPU usage, shares its non-GPU power as a typical node (a count
#: of 0 made its runs' energy infinite or NaN, and every sum over them with it).
GPUS_OR_TYPICAL = fill("CASE WHEN {gpus} > 0 THEN {gpus} ELSE {typical} END",
                       typical=TYPICAL_GPUS_SQL)
#: SQL expression: GPUs of the node ``n`` (a row of ``nodes`` joined as ``n``, NULL when
#: the node is unknown) or else the fleet's typical count (:data:`GPUS_OR_TYPICAL`).
NODE_GPUS_SQL = fill(GPUS_OR_TYPICAL, gpus="n.gpus")


def gpus_per_node(cur) -> int:
    """The fleet's most common number of GPUs per node (see module docstring)."""
    return int(cur.execute("SELECT " + TYPICAL_GPUS_SQL).fetchone()[0])


#: FROM-items of each GPU's newest sample with ``ts`` in ``($since, $now]``, all columns
#: of ``gpu_samples``: the writer's ``gpu_latest`` (one row per GPU, upserted only
#: forward), and the raw-tier scan that answers for a ``$now`` in the past.
LATEST_ROWS = {
    "table": "(SELECT * FROM gpu_latest WHERE ts > $since AND ts <= $now)",
    "raw": "(SELECT * FROM gpu_samples WHERE ts > $since AND ts <= $now"
           " QUALIFY row_number() OVER (PARTITION BY node, gpu_index ORDER BY ts DESC) = 1)",
}


def per_latest(template: str) -> dict[str, str]:
    """``template`` with its ``{latest_rows}`` marker filled by each of
    :data:`LATEST_ROWS`, keyed like it; pick one with :func:`latest_source`."""
    return {key: fill(template, latest_rows=rows) for key, rows in LATEST_ROWS.items()}


def latest_source(cur, now) -> str:
    """``"table"`` when no GPU's stored latest sample is after ``now`` (then the rows of
    ``gpu_latest`` within the window are exactly the raw tier's newest rows), else
    ``"raw"`` (a ``now`` in the past, or a GPU whose clock runs ahead)."""
    ahead = cur.execute("SELECT max(ts) > $now FROM gpu_latest", {"now": now}).fetchone()[0]
    return "raw" if ahead else "table"
