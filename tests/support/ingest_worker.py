"""Sustained ingest until killed; prints the number of each acknowledged batch.

Run as ``python -m tests.support.ingest_worker DB``. Batch i holds 64 GPUs at tick i.
"""

import sys
from datetime import timedelta

from tests.support.frames import T0, samples
from warehouse import Warehouse


def main(path: str) -> None:
    wh = Warehouse(path)
    i = 0
    while True:
        wh.ingest("samples", samples(start=T0 + timedelta(seconds=15 * i), ticks=1,
                                     nodes=8, gpus=8, seed=i)).result()
        if i % 5 == 0:
            wh.rollup().result()  # the writer also does maintenance mid-ingest
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    main(sys.argv[1])
