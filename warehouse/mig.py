"""The MIG layout of each node as the telemetry shows it, for the Slurm source (issue 21).

Slurm names a MIG instance a job holds only by its GRES device index on the node
(collector/slurm_gres.py); turning that index into (GPU, GPU instance) needs the node's
GPUs and MIG instances, which gpulens knows from the exporters (``gpu_latest``,
``gpu_mig_samples``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

#: How far back the instances are read: a few scrapes (MIG layouts change only when an
#: operator repartitions a GPU, which Slurm requires to be done with the node drained).
WINDOW = timedelta(minutes=15)

_LAYOUT_SQL = """
WITH inst AS (
    SELECT DISTINCT node, gpu_index, gpu_i_id, gpu_i_profile FROM gpu_mig_samples
    WHERE ts > $since AND ts <= $now
)
SELECT node, list(DISTINCT gpu_index ORDER BY gpu_index) AS gpus,
       (SELECT list((i.gpu_index, i.gpu_i_id, i.gpu_i_profile)
                    ORDER BY i.gpu_index, i.gpu_i_id)
        FROM inst i WHERE i.node = l.node) AS instances
FROM gpu_latest l WHERE node IN (SELECT node FROM inst)
GROUP BY node
"""


def mig_layout(cur, now: datetime, window: timedelta = WINDOW
               ) -> dict[str, tuple[list[int], list[tuple[int, int, str | None]]]]:
    """Per node with MIG instances seen in ``(now - window, now]``: its GPU indices
    (``gpu_latest``) and its instances as (gpu_index, gpu_i_id, profile). Naive UTC."""
    rows = cur.execute(_LAYOUT_SQL, {"since": now - window, "now": now}).fetchall()
    return {node: (list(gpus), [(int(g), int(i), p) for g, i, p in
                                (tuple(x.values()) if isinstance(x, dict) else x
                                 for x in (inst or []))])
            for node, gpus, inst in rows}
