"""The rule tuner's test set-up (issue 22): a warehouse holding 42 minutes of 15-s
samples of the small alert cluster (tests/support/alerts.py) with rack r2's cooling failing
from +16 to +30 min, and a configuration file with a login (alice operates, bob views)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from dashboard import auth
from tests.support.alerts import STEP, T0, Cluster
from warehouse import Warehouse

PASSWORD = "tuner-pw"
MINUTES = 42


def seed_incident(wh: Warehouse, start: datetime = T0, minutes: float = MINUTES) -> datetime:
    """Write the samples (no alert evaluation) into ``wh``; returns the time after the
    last tick, the "now" of the tests."""
    cluster = Cluster()
    cluster.incidents.append(("r2", start + timedelta(minutes=16),
                              start + timedelta(minutes=30), 12.0))
    wh.ingest_all(cluster.topology())
    ticks = []
    t = start
    while t < start + timedelta(minutes=minutes):
        ticks.append(cluster.samples(t))
        t += STEP
    wh.ingest("samples", pd.concat(ticks, ignore_index=True)).result()  # one batch: quick
    return t - STEP


def write_config(path: Path, db: Path) -> Path:
    """A configuration file with a comment, a rule already tuned and the two users."""
    pw = auth.hash_password(PASSWORD, method="pbkdf2")
    path.write_text(f"""# the site's configuration
[service]
db = "{db}"

[alerts.gpu_temp]
hold_s = 60.0  # kept as it was

[dashboard]
users = "alice:{pw},bob:{pw}"
operators = "alice"
""")
    return path
