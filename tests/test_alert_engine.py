"""The evaluator on recorded series, with exact timings."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import pandas as pd

from alerts.engine import evaluate
from alerts.model import FIRING, PENDING, RESOLVED, Rule, Silence, State
from alerts.rules import DEFAULTS, from_settings
from tests.support.alerts import STEP, T0, Cluster, fleet_frame, fleet_window, series_window

RULE = Rule("hot", "gpu_column", "gpu", "critical", threshold=85.0, clear=80.0, hold_s=60.0,
            resolve_hold_s=30.0, unit="C", params={"column": "temp_c"})


def run(recorded: list[float], rule: Rule = RULE, silences=()):
    """Evaluate once per 15-s sample; return per step (state or None, notifications)."""
    temps, state, trace = {}, State(), []
    for i, value in enumerate(recorded):
        now = T0 + i * STEP
        temps[now] = value
        result = evaluate([rule], series_window(now, temps), now, state, silences)
        state = result.state
        alert = next(iter(state.alerts.values()), None)
        resolved = [a for a in result.upserts if a.state == RESOLVED]
        trace.append(((RESOLVED if resolved else (alert.state if alert else None)),
                      [n.kind for n in result.notifications]))
    return trace


def test_pending_then_firing_after_the_hold_then_resolved_after_the_resolve_hold():
    # 0 s: 70; 15 s..: 90 (pending at 15 s, fires at 75 s = 15 + 60), 120 s: 75 (below
    # clear), resolves 30 s later at 150 s.
    recorded = [70, 90, 90, 90, 90, 90, 90, 90, 75, 75, 75, 75]
    trace = run(recorded)
    states = [s for s, _ in trace]
    assert states == [None, PENDING, PENDING, PENDING, PENDING, FIRING, FIRING, FIRING,
                      FIRING, FIRING, RESOLVED, None]
    notes = [(i, n) for i, (_, ns) in enumerate(trace) for n in ns]
    assert notes == [(5, "firing"), (10, "resolved")]


def test_pending_that_drops_below_threshold_goes_back_to_inactive():
    trace = run([90, 90, 84, 90, 90, 90, 90])
    assert [s for s, _ in trace] == [PENDING, PENDING, None, PENDING, PENDING, PENDING,
                                     PENDING]
    assert all(not ns for _, ns in trace)


def test_hysteresis_keeps_firing_between_clear_and_threshold():
    # fires at 60 s; then 82 (below threshold, above clear) keeps it firing; 79 starts the
    # resolve hold, 83 interrupts it, 79 x3 resolves.
    trace = run([90, 90, 90, 90, 90, 82, 82, 79, 83, 79, 79, 79])
    assert [s for s, _ in trace] == [PENDING, PENDING, PENDING, PENDING, FIRING, FIRING,
                                     FIRING, FIRING, FIRING, FIRING, FIRING, RESOLVED]


def test_silence_mutes_notifications_but_not_state():
    silence = Silence("s1", expires_at=T0 + timedelta(hours=1), rack="r1", comment="swap")
    trace = run([90, 90, 90, 90, 90, 90, 70, 70, 70], silences=(silence,))
    assert FIRING in [s for s, _ in trace] and RESOLVED in [s for s, _ in trace]
    assert all(not ns for _, ns in trace)


def test_expired_silence_does_not_match():
    silence = Silence("s1", expires_at=T0, rule="hot")
    trace = run([90, 90, 90, 90, 90, 90], silences=(silence,))
    assert trace[4][1] == ["firing"]


def test_restarting_from_a_stored_state_does_not_notify_again():
    temps, state = {}, State()
    for i in range(8):
        now = T0 + i * STEP
        temps[now] = 90
        result = evaluate([RULE], series_window(now, temps), now, state)
        state = result.state
    # the state as reloaded after a restart is the same dataclass content
    again = evaluate([RULE], series_window(now + STEP, temps | {now + STEP: 90}), now + STEP,
                     State(dict(state.alerts), dict(state.groups)))
    assert again.notifications == ()


def test_alerts_of_one_rule_in_one_rack_share_one_notification():
    now = T0
    win = series_window(now, {now: 90})
    two = replace(win, node=np.array(["n01", "n02"], dtype=object),
                  gpu_index=np.array([0, 0]), rack=np.array(["r1", "r1"], dtype=object),
                  model=np.array(["H100", "H100"], dtype=object),
                  series={k: np.repeat(v, 2, axis=0) for k, v in win.series.items()})
    rule = replace(RULE, hold_s=0.0)
    result = evaluate([rule], two, now)
    assert len(result.notifications) == 1
    assert len(result.notifications[0].alerts) == 2


def test_settings_override_rule_fields_and_disable_rules():
    rules = from_settings({"gpu_temp.threshold": 90.0, "disabled": "temp_rise, hbm_temp"})
    names = [r.name for r in rules]
    assert "temp_rise" not in names and "hbm_temp" not in names
    assert next(r for r in rules if r.name == "gpu_temp").threshold == 90.0


def _fleet(hot_rack_delta: float, hot_gpu_delta: float = 0.0, racks: int = 6):
    rng = np.random.default_rng(1)
    n = racks * 16
    rack = np.repeat([f"r{i}" for i in range(racks)], 16)
    power = np.where(np.arange(n) % 2 == 0, 650.0, 65.0)
    node = [f"{r}n{i // 8}" for r, i in zip(rack, np.arange(n) % 16, strict=True)]
    rows = []
    for k in range(60):
        temp = 24 + 0.066 * power + rng.normal(0, 0.3, n)
        if k >= 50:
            temp = temp + np.where(rack == "r3", hot_rack_delta, 0.0)
        temp[0] += hot_gpu_delta
        rows.append(fleet_frame(k, node, temp, power))
    return fleet_window(rows)


def test_rack_cooling_names_the_hot_rack_only():
    rule = next(r for r in DEFAULTS if r.name == "rack_cooling")
    hot = evaluate([replace(rule, hold_s=0)], _fleet(8.0), T0)
    assert [(a.rack, a.state) for a in hot.upserts] == [("r3", FIRING)]
    assert hot.upserts[0].value > 7.0
    assert evaluate([rule], _fleet(0.0), T0).upserts == ()


def test_gpu_hot_vs_peers_finds_the_poorly_cooled_gpu():
    rule = replace(next(r for r in DEFAULTS if r.name == "gpu_hot_vs_peers"), hold_s=0)
    result = evaluate([rule], _fleet(0.0, hot_gpu_delta=15.0), T0)
    assert [(a.node, a.gpu_index) for a in result.upserts] == [("r0n0", 0)]
    assert evaluate([rule], _fleet(0.0), T0).upserts == ()


def test_critical_xids_are_grouped_per_node():
    rule = replace(next(r for r in DEFAULTS if r.name == "critical_xid"))
    win = _fleet(0.0)
    events = pd.DataFrame({"ts": [T0 - timedelta(minutes=1)] * 3, "node": ["r1n0"] * 3,
                           "gpu_index": [0, 1, 2], "code": [79, 48, 13]})
    result = evaluate([rule], replace(win, events=events), T0)
    [alert] = result.upserts
    assert (alert.node, alert.rack, alert.state, alert.value) == ("r1n0", "r1", FIRING, 2.0)
    assert alert.context["codes"] == [48, 79]


def test_cluster_rise_ramps_like_the_simulator():
    c = Cluster()
    c.incidents.append(("r2", T0, T0 + timedelta(minutes=30), 12.0))
    assert c.rise("r2", T0) == 2.4
    assert c.rise("r2", T0 + timedelta(minutes=4, seconds=59)) == 12.0
    assert c.rise("r1", T0 + timedelta(minutes=10)) == 0.0
    assert c.rise("r2", T0 + timedelta(minutes=40)) == 0.0
