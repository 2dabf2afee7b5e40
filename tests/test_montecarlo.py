"""Monte Carlo of sampled SD from β traces against the i.i.d. closed form and exact limits."""

import numpy as np
import pytest

from specsim.acceptance.montecarlo import _blocks_per_run, iid_beta_traces, simulate
from specsim.acceptance.replay import replay_blocks_per_prompt
from specsim.acceptance.theory import tau_iid
from specsim.errors import SpecsimError
from specsim.profile_format import Trace


@pytest.mark.parametrize("alpha,gamma", [(0.3, 1), (0.6, 3), (0.8, 5), (0.95, 8)])
def test_iid_traces_match_closed_form(alpha, gamma):
    # positions a multiple of γ+1 is not enough to kill truncation; a long trace makes it negligible
    traces = iid_beta_traces(alpha, positions=20_000, prompts=2)
    res = simulate(traces, gamma, rng=np.random.default_rng(0), runs=40)
    expected = tau_iid(alpha, gamma)
    se = res.tau_samples.std(ddof=1) / np.sqrt(res.tau_samples.size)
    assert abs(res.tau_mean - expected) < 4 * se + 1e-3 * expected
    lo, hi = res.tau_ci
    assert lo <= res.tau_mean <= hi


def test_exact_limits():
    ones = iid_beta_traces(1.0, positions=12)
    assert simulate(ones, 3, rng=np.random.default_rng(0), runs=5).tau_samples.tolist() == [4.0] * 5
    zeros = iid_beta_traces(0.0, positions=12)
    assert simulate(zeros, 3, rng=np.random.default_rng(0), runs=5).tau_mean == 1.0


def test_blocks_per_run_equals_greedy_replay_row_by_row():
    rng = np.random.default_rng(3)
    m = rng.random((50, 37)) < 0.7
    for gamma in (1, 2, 5):
        expected = [replay_blocks_per_prompt([row], gamma)[0] for row in m]
        np.testing.assert_array_equal(_blocks_per_run(m, gamma), expected)


def test_seeded_reproducible_and_latency():
    traces = [Trace(beta=(0.9, 0.5, 0.7, 0.2, 0.99, 0.8)), Trace(beta=(0.4,) * 9)]
    a = simulate(traces, 2, rng=np.random.default_rng(7), runs=300, block_ms=10.0, setup_ms=[100.0, 50.0])
    b = simulate(traces, 2, rng=np.random.default_rng(7), runs=300, block_ms=10.0, setup_ms=[100.0, 50.0])
    np.testing.assert_array_equal(a.tau_samples, b.tau_samples)
    np.testing.assert_allclose(a.latency_ms, np.array([100.0, 50.0]) + a.blocks * 10.0)
    lo, hi = a.latency_ms_ci
    assert lo <= a.latency_ms_mean <= hi
    assert set(a.to_json()) >= {"tau_mean", "tau_ci", "latency_ms_mean", "latency_ms_ci"}


def test_chunking_does_not_change_results():
    traces = iid_beta_traces(0.7, positions=50, prompts=3)
    a = simulate(traces, 3, rng=np.random.default_rng(1), runs=64)
    b = simulate(traces, 3, rng=np.random.default_rng(1), runs=64, max_cells=10**9)
    assert a.blocks.shape == b.blocks.shape == (64, 3)
    # different chunking draws the same stream in the same order per prompt
    np.testing.assert_array_equal(a.blocks, b.blocks)


def test_bad_inputs():
    with pytest.raises(SpecsimError, match="beta"):
        simulate([Trace(match=(1, 0))], 2, rng=np.random.default_rng(0))
    with pytest.raises(SpecsimError, match="gamma"):
        simulate(iid_beta_traces(0.5, 4), 0, rng=np.random.default_rng(0))
    with pytest.raises(SpecsimError, match="probabilities"):
        simulate([np.array([1.5])], 2, rng=np.random.default_rng(0))
    with pytest.raises(SpecsimError, match="runs"):
        simulate(iid_beta_traces(0.5, 4), 2, rng=np.random.default_rng(0), runs=0)
