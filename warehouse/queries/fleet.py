"""Facts about the fleet that many queries share, each defined once.

- ``STALE_AFTER_S``: a GPU whose latest sample is older than this (seconds) counts as
  not reporting (eight scrapes at the default 15-s interval).
- GPUs per node: read from the warehouse's ``nodes`` table, never assumed. A node the
  table does not know takes the fleet's most common count (:data:`NODE_GPUS_SQL`); only
  a warehouse with no topology at all falls back to :data:`FALLBACK_GPUS_PER_NODE`.
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

#: SQL expression: GPUs of the node ``n`` (a row of ``nodes`` joined as ``n``, NULL when
#: the node is unknown) or else the fleet's typical count.
NODE_GPUS_SQL = fill("coalesce(n.gpus, {typical})", typical=TYPICAL_GPUS_SQL)


def gpus_per_node(cur) -> int:
    """The fleet's most common number of GPUs per node (see module docstring)."""
    return int(cur.execute("SELECT " + TYPICAL_GPUS_SQL).fetchone()[0])
