"""Sampled-mode ``specsim check``: the Monte Carlo intervals cover what a finite run measures (a synthetic
world simulated block by block, a second implementation of the engine's loop), the pool against
specsim.acceptance.montecarlo and the cost-model walk, the reductions, the β checks, rows and tables."""

import math
import warnings

import numpy as np
import pytest

from specsim.acceptance.montecarlo import simulate
from specsim.check.check_tables import coverage, inside, sampled_table
from specsim.check.comparison import PromptSpec, RequestRun
from specsim.check.sampled import predict_sampled, sampled_row, simulate_pool, widen
from specsim.check.sampled_runs import beta_at_length, check_sampling_entry, measure_sampled, timing_halfwidth
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.errors import SpecsimError, SpecsimWarning
from specsim.predict.chain_costs import block_ms, sd_request_cost
from specsim.profile_format import CheckRow, LatencySection, MethodAcceptance, Profile, Trace
from tests.conftest import make_profile
from tests.test_costmodel import _cost_model

GAMMA, OVERHEAD_MS, Q_MS = 3, 0.3, 1.0
LENGTHS = (30, 45, 60)


def target_ms(rows):
    """The synthetic world's target pass: 10 ms + 2 ms per extra row, at any context."""
    return 10.0 + 2.0 * (rows - 1)


def _world(seed=0, shrink=1.0):
    """A schema-2 profile whose cost model is ``target_ms`` / Q_MS / OVERHEAD_MS at every context, β traces
    (×``shrink``) for three prompts, and their specs (prompt 40 tokens, max new tokens = trace length)."""
    rng = np.random.default_rng(seed)
    traces = tuple(
        Trace(beta=tuple(float(b) for b in shrink * rng.beta(3, 1.5, n)), prompt_id=f"p{i}")
        for i, n in enumerate(LENGTHS)
    )
    entry = MethodAcceptance(
        method="plain", scenario="s", images_per_prompt=0, traces=traces, notes="beta at T=1.0"
    )
    cm = _cost_model(f_target=lambda r, c: target_ms(r), f_draft=lambda r, c, b: Q_MS, overhead=OVERHEAD_MS)
    prof = Profile(
        provenance=make_profile().provenance, latency=LatencySection(cost_model=cm), acceptance=(entry,)
    )
    return prof, entry, [PromptSpec(f"p{i}", 40, 40, 0, n) for i, n in enumerate(LENGTHS)]


def _engine_run(beta, gamma, rng) -> list[tuple[int, int]]:
    """One sampled run as the engine loops, block by block: (drafts, emitted) per block. Draft i of a block
    is accepted with probability β at its position until the first rejection; γ capped at tokens left − 1."""
    n, t, blocks = len(beta), 0, []
    while t < n:
        g = max(0, min(gamma, n - t - 1))
        accepted = 0
        while accepted < g and rng.random() < beta[t + accepted]:
            accepted += 1
        blocks.append((g, accepted + 1))
        t += accepted + 1
    return blocks


def _noisy(rng, ms, sigma):
    return ms * math.exp(sigma * rng.standard_normal())


def _target_run(prompt_id, n, rng, sigma):
    step_ms = target_ms(1) + OVERHEAD_MS
    return RequestRun(prompt_id, 0.0, 5.0, 0.0, _noisy(rng, (n - 1) * step_ms, sigma), 0.0, n, 1, n)


def _measurement(entry, rng, rounds=4, sigma=0.03):
    """The synthetic world measured: per prompt and round, target-only runs before/after and one SD run,
    each run's ms times its own log-normal timing noise."""
    base, sd = {}, {}
    for t in entry.traces:
        n = len(t.beta)
        base[t.prompt_id] = [
            (_target_run(t.prompt_id, n, rng, sigma), _target_run(t.prompt_id, n, rng, sigma))
            for _ in range(rounds)
        ]
        sd[t.prompt_id] = []
        for _ in range(rounds):
            blocks = _engine_run(t.beta, GAMMA, rng)
            later = blocks[1:]
            verify = sum(target_ms(g + 1) if g else target_ms(1) for g, _ in later)
            noise = _noisy(rng, 1.0, sigma)
            sd[t.prompt_id].append(
                RequestRun(
                    t.prompt_id,
                    0.0,
                    7.0,
                    noise * Q_MS * sum(g for g, _ in later),
                    noise * verify,
                    noise * OVERHEAD_MS * len(later),
                    n,
                    blocks[0][1],
                    len(blocks),
                )
            )
    return base, sd


def test_intervals_cover_finite_runs_of_a_synthetic_world():
    """The interval is computed once for the design (3 prompts × 4 seeds); 400 independent measurements of
    a world where the model holds exactly land inside it ~95% of the time, and measurements of a world with
    20% lower β mostly outside it (the check has power)."""
    prof, entry, specs = _world()
    rng = np.random.default_rng(1)
    first = measure_sampled(*_measurement(entry, rng))
    pred = predict_sampled(prof, entry, GAMMA, specs, first, rng=np.random.default_rng(2))
    assert pred.tau_interval[0] < pred.tau < pred.tau_interval[1]
    tau_in = speedup_in = 0
    for _ in range(400):
        m = measure_sampled(*_measurement(entry, rng))
        tau_in += inside(m.tau, pred.tau_interval)
        speedup_in += inside(
            m.decode_speedup, widen(pred.decode_speedup, pred.decode_interval, m.timing_halfwidth)
        )
    assert 0.92 <= tau_in / 400 <= 0.99
    assert 0.92 <= speedup_in / 400 <= 0.995
    worse = _world(shrink=0.8)[1]
    missed = sum(
        not inside(measure_sampled(*_measurement(worse, rng)).tau, pred.tau_interval) for _ in range(100)
    )
    assert missed >= 60


def test_interval_width_follows_the_number_of_runs():
    """More seeds per prompt: a narrower τ interval (the sampling spread of the design, ~1/√runs)."""
    prof, entry, specs = _world()
    rng = np.random.default_rng(3)
    widths = []
    for rounds in (2, 8, 32):
        m = measure_sampled(*_measurement(entry, rng, rounds=rounds))
        lo, hi = predict_sampled(prof, entry, GAMMA, specs, m, rng=np.random.default_rng(4)).tau_interval
        widths.append(hi - lo)
    assert widths[0] > 1.6 * widths[1] > 1.6 * 1.6 * widths[2]


def test_pool_blocks_equal_the_montecarlo_and_costs_equal_the_walk():
    prof, entry, specs = _world()
    beta = np.asarray(entry.traces[1].beta)
    pool = simulate_pool(
        beta,
        specs[1],
        GAMMA,
        rng=np.random.default_rng(5),
        runs=64,
        cost=GridPassCost(prof.latency.cost_model),
    )
    mc = simulate([beta], GAMMA, rng=np.random.default_rng(5), runs=64)
    np.testing.assert_array_equal(pool.blocks, mc.blocks[:, 0])
    draws = (
        np.random.default_rng(5).random((64, beta.size)) < beta
    )  # the same draws, walked one plan at a time
    for i in (0, 7, 63):
        plan = greedy_plan(draws[i], GAMMA, specs[1].max_new_tokens)
        kw = {"target_prompt_tokens": 40, "draft_prompt_tokens": 40}
        whole = sd_request_cost(GridPassCost(prof.latency.cost_model), plan, **kw)
        decode = sd_request_cost(GridPassCost(prof.latency.cost_model), plan.after_first(), fused=False, **kw)
        assert pool.request_ms[i] == pytest.approx(whole.total_ms)
        assert pool.decode_ms[i] == pytest.approx(decode.total_ms)
        assert pool.decode_tokens[i] == beta.size - plan.emitted[0]
        per_block = block_ms(GridPassCost(prof.latency.cost_model), plan, **kw)
        assert per_block.total_ms[1:].sum() == pytest.approx(decode.total_ms)


def test_measure_sampled_reduces_runs():
    run = lambda ms, tokens=10, blocks=4: RequestRun(
        "a", 1.0, 5.0, 0.2 * ms, 0.7 * ms, 0.1 * ms, tokens, 1, blocks
    )  # noqa: E731
    base = {
        "a": [(run(90.0, blocks=10), run(100.0, blocks=10)), (run(95.0, blocks=10), run(105.0, blocks=10))]
    }
    sd = {"a": [run(40.0, blocks=4), run(50.0, blocks=5)]}
    m = measure_sampled(base, sd)
    assert m.tau == pytest.approx(20 / 9) and m.rounds == 2 and m.sd_tokens == {"a": (10, 10)}
    assert m.decode_speedup == pytest.approx((390 / 36) / (90 / 18))
    assert m.request_speedup == pytest.approx(
        ((101.0 + 106.0) / 2) / ((46.0 + 56.0) / 2)
    )  # + 6 ms set-up, first
    assert m.terms_ms_per_block["verify"] == pytest.approx(0.7 * 90 / 7)
    assert timing_halfwidth(np.array([[10.0, 10.0]])) == 0.0
    assert 0 < m.timing_halfwidth < 1
    with pytest.raises(SpecsimError, match="at least 2 runs"):
        measure_sampled({"a": base["a"][:1]}, {"a": sd["a"][:1]})


def test_beta_checks():
    entry = _world()[1]
    with pytest.warns(SpecsimWarning, match="greedy output only"):  # no sampled paths in this world
        check_sampling_entry(entry, 1.0)
    with pytest.raises(SpecsimError, match=r"beta was measured at T=1, but --temperature is 0.7"):
        check_sampling_entry(entry, 0.7)
    greedy = MethodAcceptance(method="M", scenario="s", images_per_prompt=0, traces=(Trace(match=(1, 0)),))
    with pytest.raises(SpecsimError, match="acceptance entry M/s: a sampled check needs beta traces"):
        check_sampling_entry(greedy, 1.0)
    with (
        pytest.warns(SpecsimWarning, match="does not say at which temperature"),
        pytest.warns(SpecsimWarning, match="greedy output only"),
    ):
        check_sampling_entry(
            MethodAcceptance(method="M", scenario="s", images_per_prompt=0, traces=(Trace(beta=(0.5, 0.5)),)),
            1.0,
        )
    b, longer = beta_at_length([0.2, 0.4], 4)
    assert longer and b.tolist() == pytest.approx([0.2, 0.4, 0.3, 0.3])
    b, longer = beta_at_length([0.2, 0.4, 0.9], 2)
    assert not longer and b.tolist() == [0.2, 0.4]


def test_rows_table_coverage_and_profile_round_trip(tmp_path):
    from specsim.profiles import load_profile, save_profile

    prof, entry, specs = _world()
    m = measure_sampled(*_measurement(entry, np.random.default_rng(6)))
    rows = [
        sampled_row(prof, entry, g, specs, m, temperature=1.0, rng=np.random.default_rng(g)) for g in (1, 3)
    ]
    for r in rows:
        assert r.temperature == 1.0 and r.rounds == 4
        assert r.tau_interval[0] <= r.tau_predicted <= r.tau_interval[1]
        assert r.speedup_interval[0] <= r.speedup_predicted <= r.speedup_interval[1]
        assert set(r.terms_ms_per_block) == {"draft", "verify", "overhead"}
    cov = coverage(rows)
    assert cov["rows"] == 2 and 0 <= cov["both_coverage"] <= min(cov["tau_coverage"], cov["speedup_coverage"])
    text = sampled_table(rows)
    assert "95% interval" in text and "prediction interval: tau" in text and "nan" not in text
    greedy = CheckRow(
        method="plain",
        scenario="s",
        gamma=3,
        tau_predicted=2.0,
        tau_measured=2.0,
        speedup_predicted=1.5,
        speedup_measured=1.5,
    )
    path = save_profile(prof.with_checks([greedy]).with_checks(rows), tmp_path / "p.json")
    back = load_profile(str(path)).checks
    assert back[0] == greedy and back[1:] == tuple(rows)  # sampled rows do not replace greedy rows
    with pytest.raises(SpecsimError):
        coverage([greedy])


@pytest.mark.parametrize(
    "bad, message",
    [
        ([2.0, 1.5], "expected lo <= hi"),
        ([1.0], "expected [lo, hi]"),
        ([0.5, 2.0], "tau_interval[0]: expected >= 1"),
        ("1..2", "expected a non-empty list"),
    ],
)
def test_bad_intervals_name_the_field(bad, message):
    d = {
        "method": "M",
        "scenario": "s",
        "gamma": 2,
        "tau_predicted": 2.0,
        "tau_measured": 2.0,
        "speedup_predicted": 1.2,
        "speedup_measured": 1.2,
        "temperature": 1.0,
        "tau_interval": bad,
    }
    with pytest.raises(SpecsimError) as err:
        CheckRow.from_json(d, "checks[0]")
    assert message in str(err.value) and "checks[0].tau_interval" in str(err.value)


def test_schema1_profile_prices_its_tables_at_one_context():
    prof = make_profile()  # Tp 10, Tq 1, Tv(γ) = 10 + 2γ at context 128
    entry, specs = _world()[1:]
    m = measure_sampled(*_measurement(entry, np.random.default_rng(7)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pred = predict_sampled(prof, entry, 2, specs, m, rng=np.random.default_rng(8))
    assert pred.request_speedup is not None and "cost-model walk of simulated blocks" in pred.note
    # the tables read at the verify context 128: every full block costs 2·Tq + Tv(2) = 16 ms = 1.6 Tp
    assert pred.c == pytest.approx(0.1)
    assert pred.decode_speedup == pytest.approx(pred.tau / (2 * 0.1 + 1.4), rel=0.05)


def test_timing_noise_past_100_percent_keeps_the_interval_above_zero():
    """±117 % timing noise widened 1.09 to 0.000..2.36 (clipped at 0): a measured 0.25 read as inside, and a
    sampled check that ran a second reported 100 % coverage. Noise multiplies a speedup."""
    lo, hi = widen(1.089, (1.0, 1.2), 1.167)
    assert 0.4 < lo < 0.6 and hi == pytest.approx(
        1.089 * math.exp(math.hypot(math.log(1.2 / 1.089), math.log(2.167)))
    )
    assert not inside(0.253, (lo, hi))
    small = widen(2.0, (1.9, 2.1), 0.01)  # small noises: as the linear sum in quadrature, to first order
    assert small == pytest.approx(
        (2.0 * (1 - math.hypot(0.05, 0.01)), 2.0 * (1 + math.hypot(0.05, 0.01))), rel=2e-3
    )
