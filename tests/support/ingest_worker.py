"""Sustained ingest until killed; prints the number of each acknowledged batch.

Run as ``python -m tests.support.ingest_worker DB [urgent]``. Batch i holds 64 GPUs at
tick i. With ``urgent`` the batches are live ones (``urgent=True``), written while a rollup
is queued or running: between its steps, inside the writer's maintenance work.
"""

import sys
from datetime import timedelta

from tests.support.frames import T0, samples
from warehouse import Warehouse


def main(path: str, urgent: bool = False) -> None:
    wh = Warehouse(path)
    i = 0
    rollup = None
    while True:
        if urgent and (rollup is None or rollup.done()):
            rollup = wh.rollup()  # not waited for: the live batches overtake it
        batch = samples(start=T0 + timedelta(seconds=15 * i), ticks=1, nodes=8, gpus=8, seed=i)
        wh.ingest("samples", batch, urgent=urgent).result()
        if not urgent and i % 5 == 0:
            wh.rollup().result()  # the writer also does maintenance mid-ingest
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    main(sys.argv[1], urgent=sys.argv[2:] == ["urgent"])
