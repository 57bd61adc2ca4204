"""Job history for import: CSV job traces, ``sacct --json`` dumps, carbon-intensity CSVs.

CSV job traces use the layout public cluster traces use (Acme/AcmeTrace, Helios): one
row per job with ``job_id, user, node_num, gpu_num, type, state, submit_time,
start_time, end_time`` (aliases below). Times are ISO 8601 text or Unix seconds; text
without an offset is read in the trace's time zone (``tz``, e.g. ``Asia/Shanghai`` for
Acme) and stored as naive UTC. A trace has one run per job (run_index 0).

Parsing is pure and vectorised (pyarrow's CSV reader, pandas): about a million rows in
a few seconds. A bad row raises :class:`TraceError` naming the file, line and column,
unless ``skip_bad`` is set, which drops bad rows and reports them in ``TraceResult``.

A row is bad when its job id is empty, a time is unreadable or implausible (before 2000
or more than a day after ``now``: ``start_time=1e12`` is the year 33658), its GPU or node
count is not a whole number in 0..1,000,000, or it ends before it starts. Bytes that are
not UTF-8 are read as U+FFFD. Carbon-intensity series refuse the same times and values
outside 0-5,000 gCO2e/kWh. Every failure of these readers is a :class:`TraceError`
(``read_sacct`` raises collector.slurm's ``SlurmParseError`` for the document).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

import pandas as pd
import pyarrow as pa

from collector.bounds import EARLIEST, MAX_FUTURE, MAX_GPUS_PER_JOB, MAX_NODES
from collector.slurm import SchedulerBatch, SlurmParseError, load_jobs, parse_sacct
from collector.slurm_fields import number
from warehouse.clock import naive_utc, utcnow
from warehouse.schema import SCHEMAS

ALIASES = {
    "job_id": ("job_id", "jobid", "id"),
    "user_name": ("user", "user_name", "username"),
    "nodes": ("node_num", "nodes", "num_nodes"),
    "gpus": ("gpu_num", "gpus", "num_gpus"),
    "job_type": ("type", "job_type"),
    "state": ("state", "status"),
    "submit_ts": ("submit_time", "submit_ts", "submit"),
    "start_ts": ("start_time", "start_ts", "start"),
    "end_ts": ("end_time", "end_ts", "end"),
    "partition": ("partition", "vc", "virtual_cluster"),
    "name": ("name", "job_name", "jobname"),
}
REQUIRED = ("job_id", "submit_ts")
_OFFSET = re.compile(r"(?:Z|[+-]\d\d:?\d\d)$")
MAX_COUNT = {"gpus": MAX_GPUS_PER_JOB, "nodes": MAX_NODES}
MAX_G_PER_KWH = 5_000.0  # no grid emits more (coal is ~1,000)


class TraceError(ValueError):
    """A trace that cannot be imported; the message names the file, line and column."""


@dataclass
class TraceResult:
    batch: SchedulerBatch
    rows: int
    bad: list[str] = field(default_factory=list)  # one message per skipped row


def _find(columns: list[str], names: tuple[str, ...]) -> str | None:
    lower = {c.strip().lower(): c for c in columns}
    return next((lower[n] for n in names if n in lower), None)


def _zone(tz: str, path) -> str:
    try:
        ZoneInfo(tz)
    except (ValueError, KeyError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise TraceError(f"{path}: unknown time zone {tz!r}: {exc}") from None
    return tz


def _times(col: pd.Series, tz: str, now: datetime) -> pd.Series:
    """Text or Unix seconds -> naive UTC datetime64[us]; unreadable or implausible (before
    2000, more than a day after ``now``) -> NaT."""
    lo, hi = pd.Timestamp(EARLIEST), pd.Timestamp(now + MAX_FUTURE)
    text = col.astype("string").str.strip()
    text = text.mask(text.isin(["", "None", "nan", "NaN", "null", "Unknown"]))
    numeric = pd.to_numeric(text, errors="coerce")
    out = pd.Series(pd.NaT, index=col.index, dtype="datetime64[us]")
    is_num = numeric.notna()
    in_range = is_num & numeric.between(lo.timestamp(), hi.timestamp())
    if in_range.any():
        out[in_range] = pd.to_datetime(numeric[in_range], unit="s").astype("datetime64[us]")
    rest = text[~is_num & text.notna()]
    if len(rest):
        has_offset = rest.str.contains(_OFFSET, regex=True)
        if has_offset.any():
            aware = pd.to_datetime(rest[has_offset], errors="coerce", utc=True,
                                   format="ISO8601")
            out[has_offset[has_offset].index] = aware.dt.tz_localize(None).astype(
                "datetime64[us]")
        naive = rest[~has_offset]
        if len(naive):
            local = pd.to_datetime(naive, errors="coerce", format="mixed")
            if tz.upper() != "UTC":
                local = local.dt.tz_localize(tz, ambiguous="NaT", nonexistent="shift_forward")
                local = local.dt.tz_convert("UTC").dt.tz_localize(None)
            out[naive.index] = local.astype("datetime64[us]")
    return out.mask((out < lo) | (out > hi))


def _read_text_csv(path, **kwargs) -> pd.DataFrame:
    """The CSV at ``path`` as text columns; TraceError if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, **kwargs)
    except (OSError, pa.ArrowException, ValueError, IndexError, KeyError) as exc:
        raise TraceError(f"{path}: not a readable CSV file: {exc}"[:500]) from None


def read_csv_trace(path, *, tz: str = "UTC", skip_bad: bool = False,
                   now: datetime | None = None) -> TraceResult:
    """Jobs and runs from a CSV job trace (see the module doc); ``now`` (default: the
    clock) bounds the times."""
    tz = _zone(tz, path)
    now = naive_utc(now) if now is not None else utcnow()
    raw = _read_text_csv(path, engine="pyarrow")
    cols = {k: _find(list(raw.columns), v) for k, v in ALIASES.items()}
    missing = [ALIASES[k][0] for k in REQUIRED if cols[k] is None]
    if missing:
        raise TraceError(f"{path}: missing column(s) {missing}; found {list(raw.columns)}")
    df = pd.DataFrame(index=raw.index)
    problems = pd.Series("", index=raw.index)

    def flag(mask: pd.Series, what: str) -> None:
        problems[mask & (problems == "")] = what

    df["job_id"] = raw[cols["job_id"]].str.strip()
    flag(df["job_id"].isna() | (df["job_id"] == ""), "job_id is empty")
    for key in ("user_name", "job_type", "partition", "name"):
        df[key] = raw[cols[key]].replace("", None) if cols[key] else None
    df["state"] = raw[cols["state"]].str.strip().str.upper().replace("", None) \
        if cols["state"] else None
    for key in ("gpus", "nodes"):
        if cols[key] is None:
            df[key] = pd.array([pd.NA] * len(raw), dtype="Int32")
            continue
        text = raw[cols[key]].str.strip()
        num = pd.to_numeric(text.replace("", None), errors="coerce")
        bad = (text != "") & (num.isna() | (num < 0) | (num % 1 != 0)
                              | (num > MAX_COUNT[key]))
        flag(bad, f"{cols[key]} {{value}} is not a whole number in 0..{MAX_COUNT[key]:,}")
        df[key] = num.where(~bad).astype("Int32")
    for key in ("submit_ts", "start_ts", "end_ts"):
        if cols[key] is None:
            df[key] = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[us]")
            continue
        text = raw[cols[key]]
        df[key] = _times(text, tz, now)
        given = ~text.str.strip().isin(["", "None", "nan", "NaN", "null", "Unknown"])
        flag(given & df[key].isna(), f"{cols[key]} {{value}} is not a plausible time")
    flag(df["submit_ts"].isna() & (problems == ""), "submit time is missing")
    flag(df["end_ts"].notna() & df["start_ts"].notna() & (df["end_ts"] < df["start_ts"]),
         "end time is before start time")
    bad_rows = problems[problems != ""]
    messages = [_message(path, i, problems[i], raw, cols) for i in bad_rows.index[:1000]]
    if len(bad_rows) and not skip_bad:
        more = f" (and {len(bad_rows) - 1} more bad rows)" if len(bad_rows) > 1 else ""
        raise TraceError(messages[0] + more + "; fix them or pass --skip-bad")
    df = df.drop(index=bad_rows.index).drop_duplicates("job_id", keep="last")
    return TraceResult(_batch(df), len(df), messages)


def _message(path, i: int, problem: str, raw: pd.DataFrame, cols: dict) -> str:
    col = next((c for c in raw.columns if problem.startswith(c + " ")), None)
    value = repr(raw.at[i, col]) if col else ""
    job = raw.at[i, cols["job_id"]]
    return f"{path} line {i + 2} (job_id {job!r}): {problem.format(value=value)}"


def _table(kind: str, frame: pd.DataFrame) -> pa.Table:
    frame = frame.reindex(columns=SCHEMAS[kind].names)
    return pa.Table.from_pandas(frame, schema=SCHEMAS[kind], preserve_index=False)


def _batch(df: pd.DataFrame) -> SchedulerBatch:
    jobs = df.assign(restarts=0)
    runs = df[df["start_ts"].notna()].assign(run_index=0)
    return SchedulerBatch(_table("jobs", jobs), _table("runs", runs),
                          SCHEMAS["allocations"].empty_table())


def read_sacct(path, *, gpus_per_node: int | None = None) -> tuple[SchedulerBatch, pd.DataFrame]:
    """Jobs, runs and allocations of a ``sacct --json -D`` dump (collector.slurm), and
    the runs' log paths (job_id, run_index, path) from stderr/stdout where sacct has them.
    Bad records are skipped and counted in the batch's ``dropped``."""
    try:
        with open(path, "rb") as fh:
            jobs = load_jobs(fh.read(), "sacct")
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read: {exc}") from None
    except SlurmParseError as exc:
        raise SlurmParseError(f"{path}: {exc}", exc.reason) from None
    batch = parse_sacct({"jobs": jobs}, gpus_per_node=gpus_per_node)
    return batch, _log_paths(jobs)


def _log_paths(jobs: list) -> pd.DataFrame:
    """Log path per run, numbered as parse_sacct numbers runs (by start time)."""
    by_job: dict[str, list] = {}
    for pos, rec in enumerate(jobs):
        if not isinstance(rec, Mapping):
            continue
        t = rec.get("time") if isinstance(rec.get("time"), Mapping) else {}
        try:
            start = number(t.get("start"), "time.start") or 0
        except SlurmParseError:
            continue
        path = next((rec.get(k) for k in ("stderr_expanded", "stderr", "stdout_expanded",
                                          "stdout") if isinstance(rec.get(k), str)
                     and rec.get(k)), None)
        by_job.setdefault(str(rec.get("job_id")), []).append((start, pos, path))
    rows = []
    for jid, recs in by_job.items():
        started = sorted(r for r in recs if r[0] > 0)
        rows += [(jid, i, p) for i, (_, _, p) in enumerate(started) if p]
    return pd.DataFrame(rows, columns=["job_id", "run_index", "path"])


def read_intensity_csv(path, *, tz: str = "UTC", region: str | None = None,
                       now: datetime | None = None) -> pd.DataFrame:
    """A carbon-intensity series: columns timestamp (or ts/datetime), region (optional
    when ``region`` is given) and gCO2e/kWh (g_co2_per_kwh, carbon_intensity...).
    Returns ts (naive UTC), region, g_co2_per_kwh; raises TraceError naming the first bad
    line (a time that is unreadable or implausible, see the module doc, or an intensity
    outside 0-5,000)."""
    tz = _zone(tz, path)
    now = naive_utc(now) if now is not None else utcnow()
    raw = _read_text_csv(path)
    columns = [str(c) for c in raw.columns]
    raw.columns = columns
    tcol = _find(columns, ("timestamp", "ts", "datetime", "time", "datetime (utc)"))
    gcol = next((c for c in columns if re.search(r"g_?co2|intensity", c, re.I)), None)
    rcol = _find(columns, ("region", "zone", "country"))
    if tcol is None or gcol is None or (rcol is None and not region) or (
            len(set(columns)) != len(columns)):
        raise TraceError(f"{path}: expected columns timestamp, region and gCO2e/kWh once "
                         f"each; found {columns}")
    ts = _times(raw[tcol], tz, now)
    g = pd.to_numeric(raw[gcol], errors="coerce")
    bad = ts.isna() | g.isna() | (g < 0) | (g > MAX_G_PER_KWH)
    regions = raw[rcol].str.strip() if rcol else pd.Series(region, index=raw.index)
    bad |= regions.isna() | (regions == "")
    if bad.any():
        i = bad[bad].index[0]
        line = int(raw.index.get_loc(i)) + 2
        raise TraceError(f"{path} line {line}: {tcol}={raw.at[i, tcol]!r:.60}, "
                         f"{gcol}={raw.at[i, gcol]!r:.60}: not a plausible time, region and "
                         f"intensity in 0..{MAX_G_PER_KWH:g} gCO2e/kWh")
    return pd.DataFrame({"ts": ts, "region": regions.str.upper(), "g_co2_per_kwh": g})
