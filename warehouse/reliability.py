"""Reliability models of large training jobs: MTTF, expected ETTR, checkpoint intervals.

Pure functions, hours as the unit of time. Sources:

- Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
  Clusters", arXiv:2410.21680 (2024), Meta RSC-1/RSC-2: the failure rate r_f in failures
  per node-day, MTTF = 1 / (N_nodes * r_f), and the Effective Training Time Ratio
  ETTR = productive time / wall time with its expectation under Poisson failures.
- J. W. Young, "A first order approximation to the optimum checkpoint interval",
  CACM 17(9), 1974: tau_opt = sqrt(2 * delta * M).
- J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
  restart dumps", FGCS 22(3), 2006.
- F. Garwood, "Fiducial limits for the Poisson distribution", Biometrika 28, 1936:
  the exact confidence interval of a Poisson rate, used for r_f.
"""

from __future__ import annotations

import math

HOURS_PER_DAY = 24.0


def _per_hour(n_nodes: float, failures_per_node_day: float) -> float:
    """Failure rate of a job spanning ``n_nodes`` nodes, failures per hour."""
    return n_nodes * failures_per_node_day / HOURS_PER_DAY


def mttf_hours(n_gpus: float, failures_per_node_day: float, gpus_per_node: int) -> float:
    """Mean time to failure of a job on ``n_gpus`` GPUs of nodes holding ``gpus_per_node``
    each (read it from the warehouse: warehouse/queries/fleet.py), hours.

    Kokolis et al. 2024 (Sec. "failure model"): failures of nodes are independent and
    Poisson with rate r_f per node-day, so a job on N_nodes = n_gpus / gpus_per_node nodes
    fails at N_nodes * r_f per day and MTTF = 1 / (N_nodes * r_f) days. With RSC-1's
    r_f = 6.50 / 1000 node-days, a 16,384-GPU job has an MTTF of 1.8 hours and a
    131,072-GPU job of 0.23 hours (the paper's projection). Returns ``inf`` for r_f = 0.
    """
    n_nodes = n_gpus / gpus_per_node
    rate = _per_hour(n_nodes, failures_per_node_day)
    return math.inf if rate <= 0 else 1.0 / rate


def expected_ettr(
    n_nodes: float,
    failures_per_node_day: float,
    restart_overhead_h: float,
    checkpoint_interval_h: float,
    checkpoint_write_h: float = 0.0,
) -> float:
    """Expected Effective Training Time Ratio of a job on ``n_nodes`` nodes (0..1).

    Kokolis et al. 2024: failures arrive at lambda = N_nodes * r_f per unit time; each
    costs the restart overhead u_0 plus, on average, half a checkpoint interval of
    recomputation, so to first order E[ETTR] = 1 - lambda * (u_0 + dt_cp / 2). Writing a
    checkpoint that blocks training for delta hours every dt_cp hours of work costs a
    further delta / dt_cp (Young 1974's first-order waste), giving

        E[ETTR] = 1 - delta / dt_cp - lambda * (u_0 + dt_cp / 2),   clipped to [0, 1].

    With delta = 0 this is the paper's expression; it is maximised at Young's interval
    sqrt(2 delta / lambda) (see :func:`optimal_checkpoint_interval_h`). The first-order
    form holds while lambda * (u_0 + dt_cp) << 1.
    """
    if checkpoint_interval_h <= 0:
        raise ValueError("checkpoint_interval_h must be positive")
    lam = _per_hour(n_nodes, failures_per_node_day)
    waste = (checkpoint_write_h / checkpoint_interval_h
             + lam * (restart_overhead_h + checkpoint_interval_h / 2.0))
    return min(1.0, max(0.0, 1.0 - waste))


def optimal_checkpoint_interval_h(
    n_nodes: float, failures_per_node_day: float, checkpoint_write_h: float,
    method: str = "daly",
) -> float:
    """Checkpoint interval (hours of work between checkpoints) that maximises goodput.

    With M = MTTF = 1 / (N_nodes * r_f) hours and delta the checkpoint write time:

    - ``method="young"`` (Young 1974): tau = sqrt(2 * delta * M);
    - ``method="daly"`` (Daly 2006, eq. 37, the default): for delta < 2M,
      tau = sqrt(2 delta M) * (1 + sqrt(delta / (2M)) / 3 + delta / (18 M)) - delta,
      else tau = M.

    Returns ``inf`` when failures never happen, 0 when checkpoints are free.
    """
    rate = _per_hour(n_nodes, failures_per_node_day)
    if rate <= 0:
        return math.inf
    m = 1.0 / rate
    d = checkpoint_write_h
    if d <= 0:
        return 0.0
    young = math.sqrt(2.0 * d * m)
    if method == "young":
        return young
    if method != "daly":
        raise ValueError(f"method must be 'young' or 'daly', not {method!r}")
    if d >= 2.0 * m:
        return m
    return young * (1.0 + math.sqrt(d / (2.0 * m)) / 3.0 + d / (18.0 * m)) - d


# ----------------------------------------------------------------------- Poisson rates


def _gamma_p(a: float, x: float) -> float:
    """Regularised lower incomplete gamma P(a, x) (Numerical Recipes, 6.2)."""
    if x <= 0:
        return 0.0
    if x < a + 1.0:  # series
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return total * math.exp(-x + a * math.log(x) - math.lgamma(a))
    # continued fraction for Q = 1 - P (modified Lentz)
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return 1.0 - math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def _gamma_quantile(a: float, p: float) -> float:
    """x with P(a, x) = p, by bisection (monotone in x). It stops once the midpoint
    rounds to an end (~60 steps, not 200: issue 17), where further steps keep returning
    that same float."""
    lo, hi = 0.0, max(1.0, a)
    while _gamma_p(a, hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            return mid
        if _gamma_p(a, mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def poisson_tail(observed: int, expected: float) -> float:
    """P(X >= observed) for X ~ Poisson(expected): the surprise of a node's failure count."""
    if observed <= 0:
        return 1.0
    if expected <= 0:
        return 0.0
    return _gamma_p(float(observed), expected)


def rate_interval(count: int, exposure: float, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Garwood 1936) confidence interval of a Poisson rate count / exposure.

    lower = G^-1(alpha/2; k) / E, upper = G^-1(1 - alpha/2; k + 1) / E, where G is the
    gamma distribution (equivalently chi2(2k)/2 and chi2(2k+2)/2). For k = 0 the lower
    bound is 0 and the 95 % upper bound is -ln(0.025) = 3.689 / E.
    """
    if exposure <= 0:
        return (math.nan, math.nan)
    alpha = 1.0 - confidence
    lower = 0.0 if count <= 0 else _gamma_quantile(float(count), alpha / 2.0)
    upper = _gamma_quantile(float(count) + 1.0, 1.0 - alpha / 2.0)
    return lower / exposure, upper / exposure
