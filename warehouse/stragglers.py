"""Stragglers in multi-node jobs and the GPU-hours they cost (issue 15, after MegaScale).

A synchronous job runs at the pace of its slowest member. Per minute (1-minute tier) and
run of at least two nodes, every GPU is compared with its run's peers by robust
statistics: the run's median ``med`` and median absolute deviation ``mad`` (scaled by
1.4826 to estimate a standard deviation). A GPU lags in a minute when

- its SM clock is below ``med * (1 - min_lag)`` and below ``med - z * mad`` (degraded
  clocks: thermal or power throttling), or
- its power and its SM activity are both below theirs by the same two tests (it works
  less while its peers are busy).

Its lag is ``1 - value / med`` of the lagging measure (the larger). A node lags in a
minute when one of its GPUs does; lagging minutes no more than ``gap_min`` apart make an
episode, and an episode of fewer than ``hold_min`` lagging minutes is noise, not a
straggler. The run's slowdown in a minute is the lag of its slowest member; the minute
costs ``job_gpus x slowdown / 60`` GPU-hours, attributed to that member's node, so two
slow nodes at once are not counted twice (a minute a later read finds a slower member
in is split: the earlier member keeps what it was charged, :func:`_charged`)::

    gpu_hours_lost = job_gpus x slowdown_frac x duration_h

Evidence kept with each episode: clocks and power against the peers', seconds of thermal
and power throttling. Units: MHz, watts, seconds, fractions 0-1; timestamps naive UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from gpulens.settings import setting_field
from warehouse import meta
from warehouse.db import streamed_frame, transaction
from warehouse.writer import yield_to_urgent

MAD_SCALE = 1.4826  # MAD -> standard deviation of a normal distribution
MINUTE = timedelta(minutes=1)
LEDGER_KEY = "stragglers.computed_until"
FIRST_DAYS = 8  # a first refresh looks this far back
#: Minutes read at once, at most. A first refresh reads FIRST_DAYS in slices; one slice
#: of the multi-node runs' minutes is a pandas frame: at 24,576 GPUs 6 hours of them took
#: the service's process from 0.15 to 1.8 GiB, 1 hour to 0.7 GiB (issue 17).
SLICE = timedelta(hours=1)
#: GPU-minutes of a slice (its frame: ~80 bytes a row, and as much again to flag them):
#: shorter slices for a larger fleet, 20 minutes at 24,576 GPUs (an hour's frame and its
#: flagging took ~640 MiB there, issue 17); the whole SLICE up to 8,333 GPUs. Each read
#: adds the hold + gap minutes before its slice (7 by default), so it reads 27 minutes at
#: 24,576 GPUs, and a larger share of a shorter slice beyond.
SLICE_GPU_MINUTES = 500_000

COLUMNS = ["job_id", "run_index", "node", "start_ts", "end_ts", "minutes", "gpu_indices",
           "job_gpus", "slowdown_frac", "gpu_hours_lost", "clock_mhz", "peer_clock_mhz",
           "power_w", "peer_power_w", "thermal_s", "power_brake_s"]


@dataclass(frozen=True)
class Params:
    """Detection thresholds (the settings ``stragglers.*``, declared with their units in
    gpulens/settings/analytics.py)."""

    min_lag: float = setting_field("stragglers.min_lag")
    z: float = setting_field("stragglers.z")
    hold_min: int = setting_field("stragglers.hold_min")
    gap_min: int = 2  # lagging minutes this far apart belong to one episode


#: Per minute of [$start, $end) and GPU of runs on two nodes or more, the minute's
#: readings; only minutes the allocation holds whole. A run's nodes and GPUs
#: (``job_gpus``) are those of all its allocations (``run_nodes``), not of those in the
#: range: counted in the range, a run holding a GPU of a second node for minutes of its
#: hours was a multi-node run in an hour's read and not in a shorter one, so the episodes
#: found depended on how the minutes were sliced (issue 17, at 24,576 GPUs: 20 of 9,927).
MINUTES_SQL = """
WITH runs AS (
    SELECT job_id, run_index, sum(gpus)::BIGINT AS job_gpus
    FROM run_nodes
    WHERE (job_id, run_index) IN (
        SELECT (job_id, run_index) FROM run_nodes
        WHERE start_ts < $end AND coalesce(end_ts, $end) > $start)
    GROUP BY ALL HAVING count(DISTINCT node) >= 2
)
SELECT a.job_id, a.run_index, r.job_gpus, m.ts, m.node, m.gpu_index,
       m.sm_clock_mhz_avg AS clock, m.power_w_avg AS power, m.sm_active_pct_avg AS active,
       coalesce(m.throttle_thermal_s, 0) AS thermal_s,
       coalesce(m.throttle_power_s, 0) AS power_brake_s
FROM allocations a
JOIN runs r USING (job_id, run_index)
JOIN gpu_samples_1m m ON m.node = a.node AND m.gpu_index = a.gpu_index
 AND m.ts >= a.start_ts AND m.ts + INTERVAL 1 MINUTE <= coalesce(a.end_ts, $end)
WHERE m.ts >= $start AND m.ts + INTERVAL 1 MINUTE <= $end
"""


def _robust_low(x: pd.Series, group: pd.Series, p: Params
                ) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(lagging, lag fraction, group median) of ``x`` against its group's median/MAD;
    ``group``: each row's group number."""
    med = x.groupby(group, sort=False).transform("median")
    mad = (x - med).abs().groupby(group, sort=False).transform("median") * MAD_SCALE
    lag = (1 - x / med.where(med > 0)).fillna(0.0)
    low = (x < med * (1 - p.min_lag)) & (x < med - p.z * mad)
    return low.fillna(False), lag, med


def flag_minutes(df: pd.DataFrame, p: Params = Params()) -> pd.DataFrame:
    """The lagging GPU-minutes of ``df`` (rows as :data:`MINUTES_SQL` returns), with
    ``lag`` (fraction), ``peer_clock`` and ``peer_power`` (the run's medians)."""
    if df.empty:
        return df.assign(lag=[], peer_clock=[], peer_power=[])
    # the run's minute, numbered once: six groupings by the text job id took ~340 MiB
    # more for an hour's 2.3 M GPU-minutes at 24,576 GPUs (issue 17)
    group = df.groupby(["job_id", "run_index", "ts"], sort=False).ngroup()
    c_low, c_lag, c_med = _robust_low(df.clock.astype(float), group, p)
    p_low, p_lag, p_med = _robust_low(df.power.astype(float), group, p)
    has_active = df.active.notna()
    a_low, a_lag, _ = _robust_low(df.active.astype(float).fillna(0.0), group, p)
    work_low = p_low & a_low & has_active
    lag = np.maximum(np.where(c_low, c_lag, 0.0),
                     np.where(work_low, np.minimum(p_lag, a_lag), 0.0))
    out = df.assign(lag=lag, peer_clock=c_med, peer_power=p_med)
    return out[c_low | work_low]


MEMBER = ["job_id", "run_index", "node"]
RUN_MINUTE = ["job_id", "run_index", "ts"]
_MEANS = ["slowdown_frac", "clock_mhz", "peer_clock_mhz", "power_w", "peer_power_w"]
_SUMS = ["gpu_hours_lost", "thermal_s", "power_brake_s"]


def episodes(flagged: pd.DataFrame, p: Params = Params(),
             seeds: pd.DataFrame | None = None) -> pd.DataFrame:
    """Straggler episodes (columns :data:`COLUMNS`) from lagging GPU-minutes.

    ``seeds``: episodes found before that may reach into the minutes of ``flagged``
    (columns :data:`COLUMNS`; a member, job, run and node, may have several). Lagging
    minutes of a member before its last seed's end were counted already and are dropped;
    a run of minutes starting within ``gap_min`` of that seed's last minute extends it
    (whatever its length), and the result holds the seed extended, its sums added and its
    means weighted by minutes. A minute of a run some seed covers was charged its seeds'
    largest lag then; it is charged now only what a slower member's new episode adds to
    that (:func:`_charged`), so a minute read twice costs the run what one read would."""
    seeds = pd.DataFrame(columns=COLUMNS) if seeds is None else seeds
    if flagged.empty:
        return pd.DataFrame(columns=COLUMNS)
    f = flagged.sort_values(["job_id", "run_index", "node", "ts", "gpu_index"])
    node_min = f.groupby(["job_id", "run_index", "node", "ts"], sort=False).agg(
        job_gpus=("job_gpus", "first"), lag=("lag", "max"), clock=("clock", "mean"),
        peer_clock=("peer_clock", "first"), power=("power", "mean"),
        peer_power=("peer_power", "first"), thermal_s=("thermal_s", "sum"),
        power_brake_s=("power_brake_s", "sum"),
        gpus=("gpu_index", lambda s: sorted(int(v) for v in s))).reset_index()
    charged = _charged(node_min, seeds)
    seed = seeds.sort_values("end_ts").drop_duplicates(MEMBER, keep="last").set_index(MEMBER)
    key = pd.MultiIndex.from_frame(node_min[MEMBER])
    seed_end = pd.Series(pd.to_datetime(seed["end_ts"].reindex(key).to_numpy()),
                         index=node_min.index)
    node_min = node_min[~(node_min.ts < seed_end)].copy()  # counted in the seed already
    seed_end = seed_end[node_min.index]
    if node_min.empty:
        return pd.DataFrame(columns=COLUMNS)
    member = (node_min.job_id + ":" + node_min.run_index.astype(str) + ":" + node_min.node)
    gap = node_min.ts.diff() > p.gap_min * MINUTE
    node_min["episode"] = ((member != member.shift()) | gap).cumsum()
    first = node_min.groupby("episode").ts.transform("min")
    node_min["seeded"] = (first - (seed_end - MINUTE)) <= p.gap_min * MINUTE
    sizes = node_min.groupby("episode").ts.transform("size")
    node_min = node_min[(sizes >= p.hold_min) | node_min.seeded].copy()
    if node_min.empty:
        return pd.DataFrame(columns=COLUMNS)
    # the run's slowdown in a minute is its slowest member's lag, charged to that member,
    # less what the minute was charged before (a seed's member lagged then)
    slowest = node_min.groupby(RUN_MINUTE).lag.transform("max")
    first = node_min.lag.eq(slowest) & ~node_min.duplicated(["job_id", "run_index", "ts",
                                                             "lag"])
    before = charged.reindex(pd.MultiIndex.from_frame(node_min[RUN_MINUTE]),
                             fill_value=0.0).to_numpy()
    node_min["cost"] = np.where(first, node_min.job_gpus
                                * np.maximum(node_min.lag.to_numpy() - before, 0.0) / 60.0,
                                0.0)
    e = node_min.groupby("episode").agg(
        job_id=("job_id", "first"), run_index=("run_index", "first"), node=("node", "first"),
        start_ts=("ts", "min"), last=("ts", "max"), minutes=("ts", "size"),
        gpu_indices=("gpus", lambda s: sorted({g for lst in s for g in lst})),
        job_gpus=("job_gpus", "first"), slowdown_frac=("lag", "mean"),
        gpu_hours_lost=("cost", "sum"), clock_mhz=("clock", "mean"),
        peer_clock_mhz=("peer_clock", "mean"), power_w=("power", "mean"),
        peer_power_w=("peer_power", "mean"), thermal_s=("thermal_s", "sum"),
        power_brake_s=("power_brake_s", "sum"), seeded=("seeded", "first"))
    e["end_ts"] = e.pop("last") + MINUTE
    e = e.reset_index(drop=True)
    return _extend(e, seed)[COLUMNS].reset_index(drop=True)


def _charged(node_min: pd.DataFrame, seeds: pd.DataFrame) -> pd.Series:
    """The lag each run's minute of ``node_min`` was charged before, indexed by
    :data:`RUN_MINUTE`: the largest lag among its members' minutes that lie in a seed of
    theirs (``start_ts <= ts < end_ts``). Each read charges a minute the slowest lag of
    its episodes less that, so a minute's charges add up to the slowest lag of all the
    episodes that cover it, however many reads saw it: a member whose lag became an
    episode only after a read's boundary would otherwise be charged the whole minute
    again (issue 17: +4 % at 24,576 GPUs in 20-minute slices)."""
    if seeds.empty or node_min.empty:
        return pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=RUN_MINUTE))
    spans = node_min[MEMBER + ["ts", "lag"]].merge(
        seeds[MEMBER + ["start_ts", "end_ts"]], on=MEMBER)
    spans = spans[(spans.start_ts <= spans.ts) & (spans.ts < spans.end_ts)]
    return spans.groupby(RUN_MINUTE).lag.max()


def _extend(e: pd.DataFrame, seed: pd.DataFrame) -> pd.DataFrame:
    """Episodes marked ``seeded`` merged into their seeds (indexed by member)."""
    rows = []
    for rec in e.to_dict("records"):
        if rec.pop("seeded"):
            old = seed.loc[(rec["job_id"], rec["run_index"], rec["node"])]
            m0, m1 = float(old["minutes"]), float(rec["minutes"])
            for c in _MEANS:
                rec[c] = (old[c] * m0 + rec[c] * m1) / (m0 + m1)
            for c in _SUMS:
                rec[c] = old[c] + rec[c]
            rec["minutes"] = int(m0 + m1)
            rec["start_ts"] = old["start_ts"]
            rec["gpu_indices"] = sorted({int(g) for g in old["gpu_indices"]}
                                        | set(rec["gpu_indices"]))
        rows.append(rec)
    return pd.DataFrame(rows)


def detect(cur, start: datetime, end: datetime, p: Params = Params()) -> pd.DataFrame:
    """Straggler episodes of multi-node runs in the minutes of [start, end)."""
    df = streamed_frame(cur, MINUTES_SQL, {"start": start, "end": end})
    return episodes(flag_minutes(df, p), p)


#: The episodes a read may extend or whose minutes it reads again (all of a member's,
#: not only its last: each one's minutes were charged).
_SEEDS_SQL = "SELECT * FROM stragglers WHERE end_ts >= $since"


#: The GPUs that report (one row each in ``gpu_latest``).
_GPUS_SQL = "SELECT count(*) FROM gpu_latest"


def slice_length(con) -> timedelta:
    """The minutes a refresh reads at once: :data:`SLICE_GPU_MINUTES` over the GPUs that
    report, in whole minutes, at least one and at most :data:`SLICE`."""
    gpus = con.execute(_GPUS_SQL).fetchone()[0]
    return max(MINUTE, min(SLICE, SLICE_GPU_MINUTES // max(gpus, 1) * MINUTE))


def refresh_stragglers(con, now: datetime, p: Params = Params()) -> int:
    """Bring the ``stragglers`` table up to the last whole minute before ``now``.

    It reads the minutes from ``cut`` (the last refresh's end less the hold and gap, so a
    lag that was too short then is seen whole; a first refresh: ``FIRST_DAYS`` back) and
    extends the episodes that were still open (:func:`episodes` with seeds), so each
    refresh reads minutes, not the whole of a days-long episode. It reads in slices of
    :func:`slice_length` (each from hold + gap minutes before it), each slice one
    transaction that moves the ledger to its end, and lets live collection's urgent work
    in between (``yield_to_urgent``): a first refresh over a week at 24,576 GPUs takes
    ~3 minutes, and an interrupted one goes on from its last slice. Returns the episodes
    written (new or extended)."""
    end = now.replace(second=0, microsecond=0)
    done = meta.get(con, LEDGER_KEY)
    lead = (p.hold_min + p.gap_min) * MINUTE
    cut = (datetime.fromisoformat(done) if done else end - timedelta(days=FIRST_DAYS)) - lead
    if cut >= end:
        meta.put(con, LEDGER_KEY, end.isoformat())
        return 0
    written: set = set()
    read_from = cut
    step = slice_length(con)
    while cut < end:  # in slices, so a first refresh over days holds bounded memory
        stop = min(end, cut + step)
        # each slice reads from ``lead`` before its start, as each refresh does: lagging
        # minutes fewer than hold_min before a boundary were noise to the slice before
        # (never written, so no seed) and would be lost to the episode
        with transaction(con):
            written |= _slice(con, read_from, stop, p)
            meta.put(con, LEDGER_KEY, stop.isoformat())
        yield_to_urgent()
        cut, read_from = stop, stop - lead
    return len(written)


def _slice(con, read_from: datetime, stop: datetime, p: Params) -> set:
    """The episodes of the minutes of [read_from, stop), the earlier ones they extend or
    read again as seeds, written in place of those; their keys (member, start_ts)."""
    seeds = con.execute(_SEEDS_SQL, {"since": read_from - p.gap_min * MINUTE}).df()
    found = episodes(flag_minutes(streamed_frame(
        con, MINUTES_SQL, {"start": read_from, "end": stop}), p), p, seeds)
    if len(found):
        con.register("found_keys", found[MEMBER + ["start_ts"]])
        try:
            con.execute("DELETE FROM stragglers WHERE (job_id, run_index, node, start_ts)"
                        " IN (SELECT (job_id, run_index, node, start_ts) FROM found_keys)")
        finally:
            con.unregister("found_keys")
    write(con, found)
    return set(found[MEMBER + ["start_ts"]].itertuples(index=False, name=None))


def write(con, found: pd.DataFrame) -> None:
    """Append episodes (columns :data:`COLUMNS`) to the ``stragglers`` table."""
    if len(found):
        con.register("found_stragglers", found[COLUMNS])
        try:
            con.execute("INSERT INTO stragglers BY NAME SELECT * FROM found_stragglers")
        finally:
            con.unregister("found_stragglers")
