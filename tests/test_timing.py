"""The timing primitive against a fake clock where the answer is known, and the median CI against theory."""

from math import comb

import numpy as np
import pytest

from calibrate.run.timing import Timing, measure, median_ci_rank, summarize, timed
from specsim.errors import SpecsimError


class FakeClock:
    """A clock (seconds) that only moves when a fake workload says so."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def workload(self, durations_ms):
        it = iter(durations_ms)

        def fn() -> None:
            self.t += next(it) / 1e3

        return fn


def _rank_by_comb(n: int, confidence: float = 0.95) -> int:
    """Second implementation of the CI rank: exact binomial sums with integers."""
    tail = (1 - confidence) / 2
    best = 0
    for k in range(1, n // 2 + 1):
        if sum(comb(n, i) for i in range(k)) / 2**n <= tail:
            best = k
    return best


@pytest.mark.parametrize("n", [1, 5, 6, 9, 10, 20, 37, 100])
def test_ci_rank_matches_exact_binomial(n):
    assert median_ci_rank(n) == _rank_by_comb(n)


def test_known_ranks():
    assert median_ci_rank(5) == 0  # no 95% interval exists below n = 6
    assert median_ci_rank(6) == 1
    assert median_ci_rank(10) == 2


def test_summarize_known_answer():
    t = summarize([float(i) for i in range(1, 11)])  # k = 2: CI [x2, x9] = [2, 9]
    assert t.median_ms == 5.5
    assert t.halfwidth_ms == pytest.approx(3.5)
    assert t.n == 10
    assert t.spread_ms == pytest.approx(np.percentile(range(1, 11), 75) - np.percentile(range(1, 11), 25))
    small = summarize([3.0, 1.0, 2.0])  # below n = 6 the whole range is used
    assert small.halfwidth_ms == pytest.approx(1.0)


def test_constant_workload_stops_at_min_repeats():
    clock = FakeClock()
    t = measure(clock.workload([10.0] * 100), clock=clock, warmup=2, min_repeats=5, max_repeats=50)
    assert t.n == 5
    assert t.median_ms == pytest.approx(10.0)
    assert t.halfwidth_ms == pytest.approx(0.0)


def test_warmup_is_discarded():
    clock = FakeClock()
    t = measure(clock.workload([500.0, 400.0] + [10.0] * 20), clock=clock, warmup=2, min_repeats=5)
    assert max(t.samples_ms) == pytest.approx(10.0)


def test_stops_once_halfwidth_reached():
    # n=5..8: the CI spans the outliers 5 and 15; at n=9 (k=2) it is [10, 10] -> stop.
    clock = FakeClock()
    t = measure(
        clock.workload([5.0, 15.0] + [10.0] * 40), clock=clock, warmup=0, min_repeats=5, max_repeats=50
    )
    assert t.n == 9
    assert t.median_ms == pytest.approx(10.0)
    assert t.halfwidth_ms == pytest.approx(0.0)


def test_noisy_workload_hits_the_cap():
    clock = FakeClock()
    t = measure(clock.workload([9.0, 11.0] * 50), clock=clock, warmup=0, min_repeats=5, max_repeats=30)
    assert t.n == 30
    assert t.rel_halfwidth > 0.02


def test_max_seconds_stops_early():
    clock = FakeClock()
    t = measure(
        clock.workload([900.0, 1100.0] * 50),
        clock=clock,
        warmup=0,
        min_repeats=3,
        max_repeats=50,
        max_seconds=4.0,
    )
    assert t.n == 4  # 0.9 + 1.1 + 0.9 + 1.1 s >= 4 s


def test_setup_is_not_timed():
    clock = FakeClock()

    def setup() -> None:
        clock.t += 1.0  # one second of untimed work per call

    t = measure(clock.workload([10.0] * 20), clock=clock, setup=setup, warmup=1, min_repeats=5)
    assert t.median_ms == pytest.approx(10.0)


def test_timed_context_manager():
    clock = FakeClock()
    with timed("cpu", clock) as t:
        clock.t += 0.25
    assert t.ms == pytest.approx(250.0)


def test_bad_arguments():
    with pytest.raises(SpecsimError, match="min_repeats"):
        measure(lambda: None, min_repeats=0)
    with pytest.raises(SpecsimError, match="max_repeats"):
        measure(lambda: None, min_repeats=5, max_repeats=3)
    with pytest.raises(SpecsimError, match="warmup"):
        measure(lambda: None, warmup=-1)
    with pytest.raises(SpecsimError, match="at least one sample"):
        summarize([])


def test_json_round_trip():
    t = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert Timing.from_json(t.to_json()) == t


def test_median_ci_coverage_monte_carlo():
    """The order-statistic interval covers the true median at least 95% of the time (n=20: 95.9%)."""
    rng = np.random.default_rng(0)
    samples = rng.lognormal(mean=0.0, sigma=0.3, size=(4000, 20))  # skewed, true median 1.0
    k = median_ci_rank(20)
    ordered = np.sort(samples, axis=1)
    lo, hi = ordered[:, k - 1], ordered[:, 20 - k]
    coverage = np.mean((lo <= 1.0) & (1.0 <= hi))
    assert 0.94 <= coverage <= 0.975
    assert summarize(samples[0]).halfwidth_ms == pytest.approx((hi[0] - lo[0]) / 2)


def test_interleaved_round_robin_and_joint_stop():
    from calibrate.run.timing import measure_interleaved

    clock = FakeClock()
    order = []

    def make(name, durations):
        work = clock.workload(durations)

        def fn():
            order.append(name)
            work()

        return fn

    # "a" is steady; "b" has outliers in its first two calls, so rounds go on until b's CI is tight (n=9).
    out = measure_interleaved(
        {"a": (make("a", [10.0] * 50), None), "b": (make("b", [5.0, 15.0] + [20.0] * 48), None)},
        clock=clock,
        warmup=1,
        min_repeats=5,
        max_repeats=50,
    )
    assert order[:6] == ["a", "b", "a", "b", "a", "b"]  # warm-up round, then alternating
    assert out["a"].n == out["b"].n == 9
    assert out["a"].median_ms == pytest.approx(10.0) and out["b"].median_ms == pytest.approx(20.0)


def test_gc_paused_turns_the_collector_off_inside_and_restores_it():
    """A timed serving run runs with the cyclic collector off (collected before it); the collector's state
    comes back after it, also when the run raises, and stays off where it was off."""
    import gc

    from calibrate.run.timing import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("run failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("max_seconds", [None, 1e-9])
def test_a_point_stops_at_two_samples_at_the_least(max_seconds):
    """--min-repeats 1 stopped every point at one sample, whose half-width reads 0.0 ms (met by any target),
    and a time budget did the same: two samples give the first spread."""
    clock = FakeClock()
    t = measure(clock.workload([10.0, 12.0] * 10), clock=clock, warmup=0, min_repeats=1, max_repeats=5,
                max_seconds=max_seconds)  # fmt: skip
    assert t.n >= 2 and t.halfwidth_ms > 0
