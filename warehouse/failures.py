"""Classification of failed runs from their evidence, into the derived ``failures`` table.

Evidence per failed run (see warehouse/goodput.py for which runs count as failed):

1. its log tail: the runs table's ``reason`` (the text the collectors saw) plus the tail
   of its log file when ``run_logs`` knows a path, matched against the rules of
   ``warehouse/data/failure_rules.csv`` (first match wins; operators extend the file);
2. XIDs and other GPU events on its GPUs (node-wide events on its nodes) from
   ``window_before`` before to ``window_after`` after it ended (Meta's attribution
   window, 10 and 5 minutes), looked up in NVIDIA's XID catalogue
   (``warehouse/data/xid_catalog.csv``);
3. Slurm's state, exit code and signal.

Decision: an infrastructure log rule wins; else a hardware XID (the GPU failed, whatever
the program printed); else any other log rule; else the state (NODE_FAIL, BOOT_FAIL ->
node failure; OUT_OF_MEMORY -> out of memory; TIMEOUT -> time limit); else an
application XID; else the exit code or signal. Each row keeps its evidence as JSON so a
user can see why. Categories follow Acme (NSDI'24): infrastructure, framework, script,
plus ``scheduler`` (time limits) and ``unknown``.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from functools import lru_cache

import duckdb
import pandas as pd

from warehouse import goodput
from warehouse.db import fill, read_data_csv, shipped, write_frame

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 16_384  # bytes read from the end of a run's log file


def load_rules(path: str = "") -> pd.DataFrame:
    """Log rules (priority, pattern, category, reason) from ``path`` or the shipped file.

    Raises OSError when the file cannot be read, and ValueError naming the file when it
    is not the rules' CSV (columns missing, a rule with an empty pattern or category). A
    rule whose pattern RE2 rejects (DuckDB's regular expressions, which match the rules)
    is left out with a warning naming it and why: the other rules still classify, and
    the refresh still runs (one bad rule costs that rule; before, every refresh failed).
    """
    name = path or "failure_rules.csv"
    try:
        text = open(path, encoding="utf-8").read() if path else shipped("failure_rules.csv")
        rules = read_data_csv(text).fillna("")  # a short row's missing cells are empty
    except ValueError as exc:  # not UTF-8, not CSV (pandas' ParserError, EmptyDataError)
        raise ValueError(f"rules file {name}: not a CSV of rules: {exc}") from None
    if not isinstance(rules.index, pd.RangeIndex):  # pandas made the first cells an index
        raise ValueError(f"rules file {name}: a rule has more cells than the header")
    missing = {"pattern", "category", "reason"} - set(rules.columns)
    if missing:
        raise ValueError(f"rules file {name}: missing columns {missing}")
    empty = rules[(rules["pattern"] == "") | (rules["category"] == "")]
    if len(empty):
        raise ValueError(f"rules file {name}: rule {empty.index[0] + 1}"
                         " has an empty pattern or category")
    why = _rejected(tuple(rules["pattern"]))
    bad = [i for i, p in enumerate(rules["pattern"]) if p in why]
    for i in bad:
        if (name, i, rules["pattern"][i]) not in _WARNED:  # once, not every refresh
            _WARNED.add((name, i, rules["pattern"][i]))
            log.warning("rules file %s: rule %d (%r) left out: RE2 rejects its pattern: %s",
                        name, i + 1, rules["pattern"][i], why[rules["pattern"][i]])
    rules = rules.drop(index=bad)[["pattern", "category", "reason"]].copy()
    rules.insert(0, "priority", range(len(rules)))
    return rules.reset_index(drop=True)


_RE2_SQL = "SELECT regexp_matches('', $pattern)"


#: (file, rule, pattern) of the rules already warned about: the refresh loads the rules
#: every ``analytics.interval_s``.
_WARNED: set[tuple[str, int, str]] = set()


@lru_cache(maxsize=16)
def _rejected(patterns: tuple[str, ...]) -> dict[str, str]:
    """The patterns (pattern: why) that DuckDB's RE2 cannot compile, as the
    classification gives them (case-insensitive)."""
    bad = {}
    with duckdb.connect() as con:
        for pattern in patterns:
            try:
                con.execute(_RE2_SQL, {"pattern": "(?i)" + pattern})
            except duckdb.Error as exc:
                bad[pattern] = str(exc)
    return bad


def xid_catalog() -> pd.DataFrame:
    """NVIDIA's XID catalogue as shipped: code, mnemonic, name, meaning, action, origin,
    category, reason (the last two empty for XIDs that never classify on their own)."""
    df = read_data_csv(shipped("xid_catalog.csv"))
    df["code"] = df["code"].astype("int32")
    return df


def read_log_tail(path: str, max_bytes: int = LOG_TAIL_BYTES) -> str | None:
    """The last ``max_bytes`` of a log file as text, None if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None


_TARGETS_SQL = fill("CREATE OR REPLACE TEMP TABLE _f AS {loss}",
                    loss=goodput.loss_sql(goodput.BY_RECHECK))

_LOG_PATHS_SQL = """
SELECT l.job_id, l.run_index, l.path FROM run_logs l JOIN _f USING (job_id, run_index)
"""

_CLASSIFY_SQL = """
WITH gpus_of AS (
    SELECT DISTINCT f.job_id, f.run_index, a.node, a.gpu_index
    FROM _f f JOIN allocations a USING (job_id, run_index)
),
nodes_of AS (
    SELECT DISTINCT job_id, run_index, node FROM gpus_of
    UNION SELECT job_id, run_index, failed_node FROM _f WHERE failed_node IS NOT NULL
),
ev AS (
    SELECT f.job_id, f.run_index, e.ts, e.node, e.gpu_index, e.kind, e.code, e.detail,
           x.name AS xid_name, x.origin, x.category AS xid_category, x.reason AS xid_reason
    FROM _f f
    JOIN nodes_of n USING (job_id, run_index)
    JOIN gpu_events e ON e.node = n.node
     AND e.ts >= f.end_ts - $before AND e.ts <= f.end_ts + $after
    LEFT JOIN _xids x ON e.kind = 'xid' AND x.code = e.code
    WHERE e.gpu_index IS NULL
       OR NOT EXISTS (SELECT 1 FROM gpus_of g WHERE g.job_id = f.job_id
                      AND g.run_index = f.run_index)
       OR EXISTS (SELECT 1 FROM gpus_of g WHERE g.job_id = f.job_id
                  AND g.run_index = f.run_index AND g.node = e.node
                  AND g.gpu_index = e.gpu_index)
),
ev_agg AS (
    SELECT job_id, run_index,
           list(code ORDER BY ts) FILTER (WHERE kind = 'xid') AS xids,
           list({'ts': ts, 'node': node, 'gpu': gpu_index, 'kind': kind, 'code': code,
                 'name': coalesce(xid_name, detail)} ORDER BY ts) AS events,
           arg_min(xid_category, ts) FILTER (WHERE origin = 'hardware') AS hw_category,
           arg_min(xid_reason, ts) FILTER (WHERE origin = 'hardware') AS hw_reason,
           arg_min(code, ts) FILTER (WHERE origin = 'hardware') AS hw_code,
           arg_min(node, ts) FILTER (WHERE origin = 'hardware') AS hw_node,
           arg_min(xid_category, ts) FILTER (WHERE xid_category <> '') AS app_category,
           arg_min(xid_reason, ts) FILTER (WHERE xid_category <> '') AS app_reason,
           arg_min(code, ts) FILTER (WHERE xid_category <> '') AS app_code
    FROM ev GROUP BY job_id, run_index
),
texts AS (
    SELECT f.job_id, f.run_index,
           nullif(concat_ws(chr(10), f.reason, t.log_tail), '') AS text
    FROM _f f LEFT JOIN _logs t USING (job_id, run_index)
),
ruled AS (  -- the first rule (by priority) each text matches, NULL: none
    SELECT job_id, run_index, text, CASE {first_rule} END AS priority FROM texts
),
matched AS (
    SELECT t.job_id, t.run_index, r.category AS log_category, r.reason AS log_reason,
           r.pattern AS log_rule, CASE t.priority {rule_match} END AS log_match
    FROM ruled t JOIN _rules r USING (priority)
),
verdicts AS (  -- one ladder, first match wins: evidence source, category, reason
    SELECT f.*, t.text, m.log_rule, m.log_match, e.xids, e.events, e.hw_node,
        CASE WHEN m.log_category = 'infrastructure'
                  THEN {'source': 'log', 'category': m.log_category, 'reason': m.log_reason}
             WHEN e.hw_category IS NOT NULL
                  THEN {'source': 'xid', 'category': e.hw_category, 'reason': e.hw_reason}
             WHEN m.log_category IS NOT NULL
                  THEN {'source': 'log', 'category': m.log_category, 'reason': m.log_reason}
             WHEN f.state IN ('NODE_FAIL', 'BOOT_FAIL')
                  THEN {'source': 'state', 'category': 'infrastructure',
                        'reason': 'node failure'}
             WHEN f.state = 'OUT_OF_MEMORY'
                  THEN {'source': 'state', 'category': 'framework', 'reason': 'out of memory'}
             WHEN f.state IN ('TIMEOUT', 'DEADLINE')
                  THEN {'source': 'state', 'category': 'scheduler', 'reason': 'time limit'}
             WHEN e.app_category IS NOT NULL
                  THEN {'source': 'xid', 'category': e.app_category, 'reason': e.app_reason}
             WHEN f.exit_code IN (126, 127)
                  THEN {'source': 'exit', 'category': 'script', 'reason': 'command not found'}
             WHEN coalesce(f.signal, 0) <> 0
                  THEN {'source': 'exit', 'category': 'unknown',
                        'reason': 'killed by signal ' || f.signal}
             WHEN coalesce(f.exit_code, 0) <> 0
                  THEN {'source': 'exit', 'category': 'unknown',
                        'reason': 'exit code ' || f.exit_code}
             ELSE {'source': 'none', 'category': 'unknown', 'reason': 'unclassified'}
        END AS verdict
    FROM _f f
    LEFT JOIN texts t USING (job_id, run_index)
    LEFT JOIN matched m USING (job_id, run_index)
    LEFT JOIN ev_agg e USING (job_id, run_index)
),
decided AS (
    SELECT * EXCLUDE (verdict), verdict.source AS source, verdict.category AS category,
           verdict.reason AS reason_class
    FROM verdicts
),
single_node AS (
    SELECT job_id, run_index, any_value(node) AS node FROM nodes_of
    GROUP BY job_id, run_index HAVING count(DISTINCT node) = 1
),
single_rack AS (  -- the rack of a run held within one rack, whatever failed it
    SELECT o.job_id, o.run_index, any_value(k.rack) AS rack
    FROM nodes_of o JOIN nodes k ON k.node = o.node
    GROUP BY o.job_id, o.run_index HAVING count(DISTINCT k.rack) = 1
)
SELECT d.job_id, d.run_index, d.start_ts, d.end_ts, d.state, j.user_name, j.partition,
       j.job_type, d.gpus,
       (SELECT count(DISTINCT node) FROM nodes_of n WHERE n.job_id = d.job_id
          AND n.run_index = d.run_index)::INTEGER AS nodes,
       coalesce(d.failed_node, CASE WHEN d.category = 'infrastructure'
                                    THEN coalesce(d.hw_node, s.node) END) AS node,
       sr.rack AS rack,
       d.category, d.reason_class AS reason, d.source,
       coalesce(d.xids, []::INTEGER[]) AS xids,
       to_json({'state': d.state, 'exit_code': d.exit_code, 'signal': d.signal,
                'failed_node': d.failed_node, 'rule': d.log_rule, 'matched': d.log_match,
                'log_tail': right(d.text, 500), 'events': d.events,
                'next_run_start': d.next_start_ts,
                'checkpoint_known': d.checkpoint_known, 'loss_basis': d.loss_basis,
                'queue_wait_h': d.queue_wait_h})::VARCHAR AS evidence,
       d.restarted, d.since_checkpoint_h, d.restart_overhead_h, d.gpu_hours_lost,
       d.checkpoint_known, $now AS classified_at
FROM decided d
LEFT JOIN jobs j USING (job_id)
LEFT JOIN single_node s USING (job_id, run_index)
LEFT JOIN single_rack sr USING (job_id, run_index)
"""

#: The statements that replace the rows of the runs of ``_f``; ``{classify_sql}``: the
#: rows of :data:`_CLASSIFY_SQL` (parameters $now, $before, $after and the rules').
_REPLACE_SQL = fill("""
DELETE FROM failures WHERE (job_id, run_index) IN (SELECT (job_id, run_index) FROM _f);
-- runs that ended before the observed history are no failures (warehouse/goodput.py)
DELETE FROM failures WHERE end_ts <= ({history_start_sql});
INSERT INTO failures BY NAME ({classify_sql});
-- a run across racks is placed in its failed node's rack, when one is known
UPDATE failures SET rack = n.rack FROM nodes n
WHERE failures.node = n.node AND failures.rack IS NULL
  AND (failures.job_id, failures.run_index) IN (SELECT (job_id, run_index) FROM _f);
""", history_start_sql=goodput.HISTORY_START_SQL)


@lru_cache(maxsize=8)
def _replace_statements(rules: int) -> tuple[str, ...]:
    """:data:`_REPLACE_SQL`'s statements for ``rules`` log rules, rule ``i`` (priority
    ``i``) being parameter ``$rule_i`` (:func:`_rule_params`): each rule is a parameter, so
    DuckDB compiles its pattern once, not once per run and rule as a pattern read from a
    column is (issue 17: 57,501 runs x 31 rules took the refresh 29 s at 24,576 GPUs)."""
    first = " ".join(fill("WHEN regexp_matches(text, $rule_{i}) THEN {i}", i=i)
                     for i in range(rules)) or "WHEN FALSE THEN NULL::BIGINT"
    match = " ".join(fill("WHEN {i} THEN regexp_extract(text, $rule_{i})", i=i)
                     for i in range(rules)) or "WHEN NULL THEN NULL::VARCHAR"
    sql = fill(_REPLACE_SQL, classify_sql=fill(_CLASSIFY_SQL, first_rule=first,
                                               rule_match=match))
    return tuple(filter(str.strip, sql.split(";\n")))


def _rule_params(rules: pd.DataFrame) -> dict[str, str]:
    """``$rule_i``: the case-insensitive pattern of the rule of priority ``i``."""
    return {f"rule_{p}": "(?i)" + pattern
            for p, pattern in zip(rules["priority"], rules["pattern"], strict=True)}


def refresh_failures(con, now: datetime, *, recheck_from: datetime, rules: pd.DataFrame,
                     interval_h: float, warmup_h: float, window_before: timedelta,
                     window_after: timedelta) -> int:
    """Classify and cost failed runs ended by ``now`` that are new or ended after
    ``recheck_from``; replace their rows of ``failures``. Runs on the writer thread, in
    the caller's transaction. Returns the number of runs (re)classified."""
    con.execute(_TARGETS_SQL, goodput.loss_params(
        now=now, interval_h=interval_h, warmup_h=warmup_h, recheck_from=recheck_from))
    try:
        n = con.execute("SELECT count(*) FROM _f").fetchone()[0]
        if not n:
            return 0
        paths = con.execute(_LOG_PATHS_SQL).fetchall()
        logs = pd.DataFrame(
            [(j, r, read_log_tail(p)) for j, r, p in paths],
            columns=["job_id", "run_index", "log_tail"],
        ).astype({"job_id": "string", "run_index": "int32", "log_tail": "string"})
        con.register("_logs", logs)
        # priorities 0..n-1 in order, as the statement's rule parameters are numbered
        rules = rules.sort_values("priority", kind="stable").assign(priority=range(len(rules)))
        con.register("_rules", rules)
        con.register("_xids", xid_catalog())
        params = {"now": now, "before": window_before, "after": window_after,
                  **_rule_params(rules)}
        for stmt in _replace_statements(len(rules)):
            con.execute(stmt, params if "$" in stmt else None)
        return int(n)
    finally:
        for view in ("_logs", "_rules", "_xids"):
            try:
                con.unregister(view)
            except Exception:  # noqa: BLE001 - not registered when we returned early
                pass
        con.execute("DROP TABLE IF EXISTS _f")




_RUN_LOGS_SQL = """
INSERT INTO run_logs SELECT job_id, run_index, path FROM _paths
ON CONFLICT (job_id, run_index) DO UPDATE SET path = excluded.path
"""


def write_run_logs(con, paths: pd.DataFrame) -> int:
    """Upsert log paths (job_id, run_index, path) of runs; runs on the writer thread."""
    paths = paths.drop_duplicates(["job_id", "run_index"], keep="last")
    return write_frame(con, _RUN_LOGS_SQL, "_paths", paths) if len(paths) else 0
