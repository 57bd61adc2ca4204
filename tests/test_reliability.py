"""Reliability formulas against worked numbers from their sources (hours throughout)."""

import math

import pytest

from warehouse import reliability as R

RSC1 = 6.50 / 1000  # Meta RSC-1 failures per node-day (Kokolis et al. 2024)


def test_mttf_matches_the_papers_projection():
    # Kokolis et al.: MTTF = 1 / (N_nodes r_f); 16,384 GPUs on RSC-1 -> 1.8 h,
    # 131,072 GPUs -> 0.23 h.
    assert R.mttf_hours(16384, RSC1, 8) == pytest.approx(24 / (2048 * RSC1))
    assert round(R.mttf_hours(16384, RSC1, 8), 1) == 1.8
    assert round(R.mttf_hours(131072, RSC1, 8), 2) == 0.23
    assert R.mttf_hours(64, 0.0, 8) == math.inf
    # gpus_per_node changes the node count, not the per-node rate
    assert R.mttf_hours(64, RSC1, gpus_per_node=4) == pytest.approx(R.mttf_hours(128, RSC1, 8))


def test_expected_ettr_first_order_model():
    lam = 128 * RSC1 / 24  # failures per hour of a 128-node job
    u0, dt = 0.25, 2.0
    assert R.expected_ettr(128, RSC1, u0, dt) == pytest.approx(1 - lam * (u0 + dt / 2))
    # a blocking checkpoint write of 6 minutes every 2 hours costs 0.1 / 2 more
    assert R.expected_ettr(128, RSC1, u0, dt, 0.1) == pytest.approx(
        1 - 0.1 / dt - lam * (u0 + dt / 2))
    assert R.expected_ettr(1, 0.0, 1.0, 3.0) == 1.0
    assert R.expected_ettr(100_000, 1.0, 5.0, 10.0) == 0.0  # clipped
    with pytest.raises(ValueError):
        R.expected_ettr(8, RSC1, 0.1, 0.0)


def test_young_interval_worked_example():
    # Young 1974: tau = sqrt(2 delta M). One node failing once a day: M = 24 h;
    # a 5-minute checkpoint: tau = sqrt(2 * (1/12) * 24) = 2 h.
    assert R.optimal_checkpoint_interval_h(1, 1.0, 1 / 12, method="young") == pytest.approx(2.0)


def test_daly_interval_worked_example():
    # Daly 2006 eq. 37 with delta = 1/12 h, M = 24 h:
    # sqrt(2 delta M) = 2, delta / 2M = 1/576, so tau = 2 (1 + (1/24)/3 + 1/5184) - 1/12
    expected = 2 * (1 + 1 / 72 + 1 / 5184) - 1 / 12
    assert R.optimal_checkpoint_interval_h(1, 1.0, 1 / 12) == pytest.approx(expected)
    # for delta >= 2M Daly's optimum is M itself
    assert R.optimal_checkpoint_interval_h(1, 1.0, 60.0) == pytest.approx(24.0)
    assert R.optimal_checkpoint_interval_h(1, 0.0, 0.1) == math.inf
    assert R.optimal_checkpoint_interval_h(1, 1.0, 0.0) == 0.0


def test_young_interval_maximises_expected_ettr():
    n, delta, u0 = 512, 0.05, 0.25
    best = R.optimal_checkpoint_interval_h(n, RSC1, delta, method="young")
    grid = [best * k / 100 for k in range(50, 151)]
    by_grid = max(grid, key=lambda t: R.expected_ettr(n, RSC1, u0, t, delta))
    assert by_grid == pytest.approx(best, rel=0.011)


def test_garwood_interval_matches_tables():
    # exact Poisson limits (Garwood 1936): k = 0 -> [0, 3.689]; k = 10 -> [4.795, 18.390]
    low, high = R.rate_interval(0, 1.0)
    assert low == 0 and high == pytest.approx(-math.log(0.025), abs=1e-6)
    low, high = R.rate_interval(10, 2.0)
    assert low == pytest.approx(4.795 / 2, abs=1e-3) and high == pytest.approx(18.390 / 2, abs=1e-3)
    assert all(math.isnan(v) for v in R.rate_interval(3, 0.0))


def test_poisson_tail():
    assert R.poisson_tail(1, 0.5) == pytest.approx(1 - math.exp(-0.5))
    # P(X >= 3 | 1) = 1 - e^-1 (1 + 1 + 1/2)
    assert R.poisson_tail(3, 1.0) == pytest.approx(1 - math.exp(-1) * 2.5)
    assert R.poisson_tail(0, 2.0) == 1.0
