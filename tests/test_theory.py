"""Closed forms vs limits, monotonicity, a seeded Monte Carlo of accept/reject, and round trips."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import SpecsimError
from specsim.acceptance.theory import (
    alpha_from_tau,
    optimal_gamma,
    speedup,
    survival_from_histogram,
    survival_iid,
    tau_from_histogram,
    tau_from_survival,
    tau_iid,
)

alphas = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
gammas = st.integers(min_value=1, max_value=64)


@given(gammas)
def test_tau_limits(gamma):
    assert tau_iid(0.0, gamma) == 1.0
    assert tau_iid(1.0, gamma) == gamma + 1


@given(alphas, gammas)
def test_tau_bounds_and_monotone_in_gamma(alpha, gamma):
    t = tau_iid(alpha, gamma)
    assert 1.0 - 1e-12 <= t <= gamma + 1 + 1e-9
    assert tau_iid(alpha, gamma + 1) >= t - 1e-12


@given(st.floats(0, 0.999), st.floats(0, 0.999), gammas)
def test_tau_monotone_in_alpha(a, b, gamma):
    lo, hi = sorted((a, b))
    assert tau_iid(lo, gamma) <= tau_iid(hi, gamma) + 1e-12


def test_tau_matches_geometric_sum_and_is_stable_near_one():
    for g in (1, 5, 30):
        for a in (0.1, 0.5, 0.9, 0.999):
            assert tau_iid(a, g) == pytest.approx(sum(a**i for i in range(g + 1)), rel=1e-12)
    # Near α = 1 the naive ratio (1 - a^(g+1)) / (1 - a) loses all digits; the series must not.
    for d in (1e-7, 1e-10, 1e-13):
        exact = sum((1 - d) ** i for i in range(6))
        assert tau_iid(1 - d, 5) == pytest.approx(exact, rel=1e-12)


def test_tau_vectorised_broadcasts():
    out = tau_iid(np.array([0.0, 0.5, 1.0])[:, None], np.array([1, 2, 3]))
    assert out.shape == (3, 3)
    assert out[2].tolist() == [2.0, 3.0, 4.0]


def test_closed_form_matches_monte_carlo_of_accept_reject():
    rng = np.random.default_rng(1234)
    n_blocks = 200_000
    for alpha, gamma in [(0.3, 3), (0.7, 5), (0.9, 8)]:
        accept = rng.random((n_blocks, gamma)) < alpha
        # drafts accepted until the first rejection, +1 (resampled or bonus token)
        first_reject = np.where(accept.all(axis=1), gamma, np.argmin(accept, axis=1))
        tau_mc = (first_reject + 1).mean()
        se = (first_reject + 1).std() / np.sqrt(n_blocks)
        assert abs(tau_mc - tau_iid(alpha, gamma)) < 4 * se


@given(alphas, st.integers(1, 20))
def test_survival_and_iid_agree(alpha, gamma):
    assert tau_from_survival(survival_iid(alpha, gamma)) == pytest.approx(tau_iid(alpha, gamma), rel=1e-9)


def test_histogram_forms():
    # 10 blocks: k accepted = 0,0,1,2,2,2,3,3,3,3  -> tau = 1 + mean(k) = 1 + 19/10
    hist = [2, 1, 3, 4]
    assert tau_from_histogram(hist) == pytest.approx(2.9)
    assert survival_from_histogram(hist).tolist() == pytest.approx([0.8, 0.7, 0.4])
    with pytest.raises(SpecsimError):
        tau_from_histogram([0, 0, 0])
    with pytest.raises(SpecsimError):
        tau_from_survival([0.5, 0.7])


@settings(max_examples=200)
@given(st.floats(0.0, 1.0), gammas)
def test_alpha_round_trip(alpha, gamma):
    tau = tau_iid(alpha, gamma)
    back = alpha_from_tau(tau, gamma)
    assert tau_iid(back, gamma) == pytest.approx(tau, abs=1e-9)


def test_alpha_from_tau_rejects_impossible():
    with pytest.raises(SpecsimError, match="tau"):
        alpha_from_tau(7.0, 5)
    with pytest.raises(SpecsimError, match="gamma"):
        alpha_from_tau(2.0, 0)


def test_speedup_formula_and_paper_cell():
    assert speedup(2.24, 5, 0.0, 1.0) == pytest.approx(2.24)
    # seed 003: c = 0.05, tau = 2.5 -> batch 2 vs 1 draft cost (c doubled) changes speedup a lot only if c
    # large
    assert speedup(3.0, 4, 0.25, 1.0) == pytest.approx(1.5)
    with pytest.raises(SpecsimError):
        speedup(2.0, 0, 0.1, 1.0)
    with pytest.raises(SpecsimError):
        speedup(2.0, 2, 0.1, 0.0)


def test_optimal_gamma_against_brute_force():
    alpha = np.linspace(0.05, 0.95, 19)
    c = np.array([0.01, 0.05, 0.2, 0.5])[:, None]
    g_best, s_best = optimal_gamma(alpha, c, gamma_max=12)
    for i in range(c.shape[0]):
        for j, a in enumerate(alpha):
            vals = [tau_iid(a, g) / (g * c[i, 0] + 1) for g in range(1, 13)]
            assert g_best[i, j] == int(np.argmax(vals)) + 1
            assert s_best[i, j] == pytest.approx(max(vals))
    # higher alpha and cheaper drafts never want a shorter block
    assert np.all(np.diff(g_best, axis=1) >= 0)
    assert np.all(np.diff(g_best, axis=0) <= 0)
