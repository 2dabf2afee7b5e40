"""Greedy trace replay: the vectorised segment form against a block-by-block reference, limits, speed."""

import numpy as np
import pytest

from specsim.acceptance.replay import (
    match_rate_by_position,
    replay_block_starts,
    replay_blocks_per_prompt,
    replay_histogram,
    replay_survival,
    replay_tau,
    replay_tau_per_prompt,
    replay_traces_tau,
    tau_table,
)
from specsim.acceptance.theory import tau_from_histogram
from specsim.errors import SpecsimError
from specsim.profile_format import Trace


def _random_traces(rng, n=20, p=0.7):
    return [(rng.random(int(rng.integers(0, 60))) < p).astype(int) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_blocks_equal_reference_loop(seed):
    rng = np.random.default_rng(seed)
    traces = [t for t in _random_traces(rng, p=rng.uniform(0.2, 0.95)) if t.size] or [np.ones(3, int)]
    for gamma in (1, 2, 3, 5, 8, 40):
        ref = np.array([len(replay_block_starts(t, gamma)) for t in traces])
        np.testing.assert_array_equal(replay_blocks_per_prompt(traces, gamma), ref)
        tokens = sum(t.size for t in traces)
        assert replay_traces_tau(traces, gamma) == pytest.approx(tokens / ref.sum(), rel=1e-15)


def test_limits_all_match_and_no_match():
    ones, zeros = np.ones(12, int), np.zeros(12, int)
    assert replay_tau(ones, 3) == 4.0  # 12 positions, blocks of 4
    assert replay_tau(ones, 5) == 6.0
    assert replay_tau(ones, 4) == pytest.approx(12 / 3)  # 5 + 5 + 2 (last block capped by tokens left)
    assert replay_tau(zeros, 7) == 1.0


def test_hand_worked_example():
    # positions: 0 1 2 3 4 5 6 7 ; mismatches at 2 and 3
    m = [1, 1, 0, 0, 1, 1, 1, 1]
    assert replay_block_starts(m, 2) == [0, 3, 4, 7]
    assert replay_blocks_per_prompt([m], 2).tolist() == [4]
    np.testing.assert_array_equal(replay_histogram([m], 2), [2, 0, 2])  # accepted 2, 0, 2, 0


def test_gamma_array_and_table():
    rng = np.random.default_rng(1)
    traces = [t for t in _random_traces(rng) if t.size]
    gammas = np.array([1, 2, 4, 8])
    taus = replay_traces_tau(traces, gammas)
    assert taus.shape == (4,)
    assert np.all(np.diff(taus) >= -1e-12)  # more drafts never emit fewer tokens per block
    assert tau_table(traces, [1, 2, 4, 8]) == pytest.approx(dict(zip([1, 2, 4, 8], taus)))


def test_histogram_and_survival_consistent_with_tau():
    rng = np.random.default_rng(2)
    traces = [Trace(match=tuple(int(x) for x in t)) for t in _random_traces(rng) if t.size]
    for gamma in (1, 3, 6):
        hist = replay_histogram(traces, gamma)
        assert hist.sum() == replay_blocks_per_prompt(traces, gamma).sum()
        assert tau_from_histogram(hist) == pytest.approx(replay_traces_tau(traces, gamma), rel=1e-12)
        surv = replay_survival(traces, gamma)
        assert surv.shape == (gamma,) and np.all(np.diff(surv) <= 0)


def test_per_prompt_and_position_rates():
    traces = [np.array([1, 0, 1, 1]), np.array([], int), np.array([0, 0])]
    per = replay_tau_per_prompt(traces, 2)
    assert per[0] == pytest.approx(4 / 2) and np.isnan(per[1]) and per[2] == 1.0
    rate, count = match_rate_by_position(traces)
    np.testing.assert_allclose(rate, [0.5, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(count, [2, 2, 1, 1])


def test_bad_inputs():
    with pytest.raises(SpecsimError, match="gamma"):
        replay_tau([1, 0], 0)
    with pytest.raises(SpecsimError, match="0 and 1"):
        replay_tau([1, 2], 1)
    with pytest.raises(SpecsimError, match="at least one"):
        replay_traces_tau([], 2)
    with pytest.raises(SpecsimError, match="empty"):
        replay_traces_tau([np.array([], int)], 2)
    with pytest.raises(SpecsimError, match="beta"):
        replay_traces_tau([Trace(beta=(0.5,))], 2)
