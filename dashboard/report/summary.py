"""The plain-language summary at the top of the weekly report, generated from its numbers.

Every sentence states a figure of the report (or its change from the previous week)
and nothing else: no causes, no advice the numbers do not carry. A figure that is
missing leaves its sentence out rather than saying "0".
"""

from __future__ import annotations

from dashboard.figures.energy import intensity_sources
from dashboard.formatting import fmt_gpu_hours, fmt_hours, fmt_int, fmt_num, fmt_temp, missing
from dashboard.report.model import Report


def _trend(this, prev, *, unit_fmt) -> str:
    """``" (up from 71.0 %)"`` / ``" (down from ...)"`` / ``" (as last week)"``, or ""."""
    if missing(this) or missing(prev):
        return ""
    if unit_fmt(this) == unit_fmt(prev):
        return " (as last week)"
    word = "up" if this > prev else "down"
    return f" ({word} from {unit_fmt(prev)})"


def _pct(v) -> str:
    return f"{v:.0f} %"


def _prev(r: Report, section: str) -> dict:
    """The previous week's figures of ``section``, or none when it is not comparable."""
    return r.prev[section] if r.comparable else {}


def coverage(r: Report) -> list[str]:
    """Telemetry coverage, on every report; why there is no comparison when there is none."""
    cov, pcov = r.this["fleet"].get("coverage_pct"), r.prev["fleet"].get("coverage_pct")
    if missing(cov):
        return []
    text = (f"Telemetry covered {cov:.1f} % of the week's installed GPU-hours"
            + ("; figures from telemetry count that part only." if cov < 90 else "."))
    if not r.comparable:
        text += (f" The week before was covered {0 if missing(pcov) else pcov:.1f} %, too "
                 "little to compare with, so no change is shown.")
    return [text]


def fleet(r: Report) -> list[str]:
    f, p = r.this["fleet"], _prev(r, "fleet")
    if not f["gpus"]:
        return ["No GPUs are in the topology yet, so the fleet figures are empty."]
    if not f["reporting_gpu_h"]:
        return [f"The fleet has {fmt_int(f['gpus'])} GPUs, but none reported telemetry "
                "this week."]
    out = [f"The fleet has {fmt_int(f['gpus'])} GPUs; "
           f"{_pct(f['allocated_share_pct'])} of their GPU-hours were allocated to jobs"
           + _trend(f["allocated_share_pct"], p.get("allocated_share_pct"), unit_fmt=_pct) + "."]
    if not missing(f["util_of_allocated_pct"]):
        out.append(f"Allocated GPUs were {_pct(f['util_of_allocated_pct'])} utilised"
                   + _trend(f["util_of_allocated_pct"], p.get("util_of_allocated_pct"),
                            unit_fmt=_pct)
                   + f", and sat allocated but idle for "
                   f"{fmt_gpu_hours(f['idle_allocated_gpu_h'])}.")
    if f.get("multi_node_runs"):  # placement along the network tree (issue 15)
        out.append(f"{fmt_int(f['misplaced_runs'])} of {fmt_int(f['multi_node_runs'])} "
                   "multi-node runs spanned more racks or zones than their size needed "
                   f"({fmt_gpu_hours(f['misplaced_gpu_h'])}); "
                   f"{fmt_int(f['scattered_waits'])} of {fmt_int(f['large_waits'])} large "
                   "jobs that queued waited while enough GPUs were free but scattered.")
    return out


def _stragglers(x: dict) -> list[str]:
    """The GPU-hours slow members of multi-node jobs cost (issue 15), if any."""
    if not x.get("straggler_episodes"):
        return []
    return [f"Slow members of multi-node jobs (stragglers, "
            f"{fmt_int(x['straggler_episodes'])} episodes) cost "
            f"{fmt_gpu_hours(x['slow_gpu_hours_lost'])} besides the failures."]


def reliability(r: Report) -> list[str]:
    x, p = r.this["reliability"], _prev(r, "reliability")
    if not x["failures"]:
        return ["No run failed this week."] + _stragglers(x)
    out = [f"{fmt_int(x['failures'])} runs failed ({fmt_int(x['infra_failures'])} from "
           f"infrastructure), losing {fmt_gpu_hours(x['gpu_hours_lost'])} to failures and "
           "restarts" + _trend(x["gpu_hours_lost"], p.get("gpu_hours_lost"),
                               unit_fmt=fmt_gpu_hours) + "."]
    out += _stragglers(x)
    reasons = x["by_reason"]
    if len(reasons):
        top = reasons.iloc[0]
        share = top["share_of_lost"]
        out.append(f"The largest loss was {top['reason']} ({top['category']}): "
                   f"{fmt_gpu_hours(top['gpu_hours_lost'])}"
                   + ("" if missing(share) else f", {share:.0%} of the GPU-hours lost") + ".")
    lemons = x["nodes"][x["nodes"]["lemon"]] if len(x["nodes"]) else x["nodes"]
    if len(lemons):
        n = lemons.iloc[0]
        out.append(f"Node {n['node']} had {fmt_int(n['infra_failures'])} infrastructure "
                   f"failures against {n['expected_failures']:.1f} expected at the fleet's "
                   f"rate (p = {n['p_value']:.2g}): a lemon candidate.")
    if x["infra_failures"]:
        out.append(f"At this week's rate of {fmt_num(x['r_f_per_1000_node_days'], 2)} "
                   "failures per 1,000 node-days, a 1,024-GPU job would fail every "
                   f"{fmt_hours(x['mttf_1024_h'])} and a 4,096-GPU job every "
                   f"{fmt_hours(x['mttf_4096_h'])}.")
    if x["large_jobs"]:
        out.append(f"{fmt_int(x['large_jobs'])} large jobs ({fmt_int(x['large_job_gpus'])} "
                   f"GPUs or more) had a GPU-weighted ETTR of {x['large_ettr']:.2f}"
                   + _trend(x["large_ettr"], p.get("large_ettr"),
                            unit_fmt=lambda v: f"{v:.2f}") + ".")
    return out


def thermal(r: Report) -> list[str]:
    t = r.this["thermal"]
    head = (f"{fmt_int(t['alerts_fired'])} thermal alerts fired "
            f"({fmt_int(t['critical_alerts'])} critical)" if t["alerts_fired"]
            else "No thermal alert fired")
    hot = t["hottest_racks"]
    if len(hot):
        rack = hot.iloc[0]
        head += (f"; the hottest rack was {rack['rack']} (95th percentile "
                 f"{fmt_temp(rack['p95_c'])}, peak {fmt_temp(rack['max_c'])})")
    head += f", and GPUs were thermally throttled for {fmt_gpu_hours(t['throttled_gpu_h'])}."
    return [head]


def energy(r: Report) -> list[str]:
    e, p = r.this["energy"], _prev(r, "energy")
    if not e["it_kwh"]:
        return ["No energy was measured this week."]
    out = [f"The cluster used {fmt_num(e['facility_kwh'], 0, 'kWh')} at the facility"
           + _trend(e["facility_kwh"], p.get("facility_kwh"),
                    unit_fmt=lambda v: fmt_num(v, 0, "kWh"))
           + f", {fmt_num(e['it_kwh'], 0, 'kWh')} of it in IT equipment, and emitted "
           f"{fmt_num(e['tco2e'], 2, 't CO₂e')}."]
    out.append(f"Idle GPUs used {fmt_num(e['idle_kwh'], 0, 'kWh')}; the GPU-hours lost to "
               f"failures cost {fmt_num(e['lost_kwh'], 0, 'kWh')} and "
               f"{fmt_num(e['lost_carbon_kg'], 0, 'kg CO₂e')}.")
    g = e.get("g_per_productive_gpu_h")
    if not missing(g):
        out.append(f"Each GPU-hour that produced kept work cost {fmt_num(g, 0, 'g CO₂e')}"
                   + _trend(g, p.get("g_per_productive_gpu_h"),
                            unit_fmt=lambda v: fmt_num(v, 0, "g"))
                   + " (all GPU-hours' emissions, failures and idle GPUs included).")
    out.append(f"Grid intensity: {intensity_sources(e['by_day'], x='day')}.")
    if len(e["top_users"]):
        u = e["top_users"].iloc[0]
        share = u["facility_kwh"] / e["facility_kwh"] if e["facility_kwh"] else None
        out.append(f"The user with the most energy was {u['user_name']} with "
                   f"{fmt_num(u['facility_kwh'], 0, 'kWh')}"
                   + ("" if missing(share) else f" ({share:.0%} of the facility energy)")
                   + ".")
    return out


def summarise(r: Report) -> list[str]:
    """The summary's sentences, in section order."""
    lines = []
    if r.in_progress:
        lines.append(f"This week is still in progress: figures run to "
                     f"{r.end:%a %d %b %H:%M} UTC.")
    for part in (coverage, fleet, reliability, thermal, energy):
        lines.extend(part(r))
    return lines
