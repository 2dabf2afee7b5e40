"""The server loop's passes after an admission: measured against the grid by steps since the admission
(calibrate/measure/server_loop_costs.py), stored in the profile, priced by the serving simulation."""

import numpy as np
import pytest

from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.serve.arrivals import Requests, poisson_arrivals
from specsim.serve.simulator import simulate
from specsim.serve.speculation import ReplayAcceptance
from specsim.serve.step_cost import ConstantStepCost


def _loop_cost(**scales):
    from dataclasses import replace

    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.profile_format.batched_cost import ServerLoopCosts
    from specsim.profiles import load_profile
    from specsim.serve.profile_cost import ProfileStepCost

    forward = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-batch").latency.forward_costs()
    loop = ServerLoopCosts((0, 3), ((0.05, 0.01), (0.3, 0.05)), 0.5, 1.25, **scales)
    batched = replace(forward.batched, server_loop=loop)
    return ProfileStepCost(GridPassCost(replace(forward, batched=batched), batched)), ProfileStepCost(
        GridPassCost(forward, forward.batched)
    )


def test_passes_after_an_admission_price_at_the_loops_scale_by_steps_since():
    """With the loop's pass scales measured, the k-th step after an admission prices its target pass and its
    draft steps at scale[k] (the last entry for every later step, and for a step with no admission in sight);
    prefills stay at the cold-pass scale; the scales load back equal and a bad one names its field."""
    from specsim.profile_format.batched_cost import BatchedCosts, ServerLoopCosts

    cost, grid = _loop_cost(target_pass_scale=(1.5, 1.3, 1.1), draft_pass_scale=(1.2, 1.05))
    ctx = np.full(4, 60.0)
    plain = grid.target_step_ms(4, 4, ctx)
    for since, scale in ((0, 1.5), (1, 1.3), (2, 1.1), (9, 1.1), (None, 1.1)):
        assert cost.target_step_ms(4, 4, ctx, since_admission=since) == pytest.approx(plain * scale)
    draft = grid.draft_ms(4, 3, ctx)
    assert cost.draft_ms(4, 3, ctx, since_admission=0) == pytest.approx(draft * 1.2)
    assert cost.draft_ms(4, 3, ctx, since_admission=5) == pytest.approx(draft * 1.05)
    # a step that admits a request: its pass at scale[0], its prefill cold, its join-and-leave ms once
    chunks = [(40, 0, 0)]
    prefill = grid.target_step_ms(0, 1, ctx, chunks)
    assert cost.target_step_ms(4, 4, ctx, chunks) == pytest.approx(plain * 1.5 + prefill * 1.25 + 0.5)
    loop = cost.batched.server_loop
    assert ServerLoopCosts.from_json(loop.to_json(), "x") == loop
    with pytest.raises(SpecsimError, match=r"server_loop.target_pass_scale\[1\]"):
        bad = loop.to_json() | {"target_pass_scale": [1.2, float("nan")]}
        BatchedCosts.from_json(cost.batched.to_json() | {"server_loop": bad})


def test_loop_pass_scales_are_measured_against_the_grid_by_steps_since_an_admission():
    """Σ loop ms / Σ grid ms per bucket of steps since the last admission, exactly; an empty bucket takes the
    next measured one, trailing empty ones the last; draft steps against the grid's block of steps; the steps
    since an admission counted from a loop run's records."""
    from types import SimpleNamespace

    from calibrate.measure.server_loop_costs import LoopPass, loop_pass_scales, loop_passes
    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.costs.pass_cost import draft_steps_ms
    from specsim.profile_format.cost_grid import grid_ms
    from specsim.profiles import load_profile

    batched = load_profile("zoo-cpu-batch").latency.forward_costs().batched
    factor = {0: 1.6, 1: 1.3, 3: 1.1}
    passes = []
    for k, f in factor.items():
        for gamma, batch, width in ((0, 2, 80), (3, 4, 120)):
            grid = batched.target_verify if gamma else batched.target_decode
            ms, _ = grid_ms(grid, gamma + 1, float(width), batch)
            steps = draft_steps_ms(GridPassCost(None, batched), width + np.arange(gamma), batch)[0]
            draft = float(np.sum(steps)) if gamma else 0.0
            passes.append(LoopPass(k, gamma, batch, width, draft * (f + 0.1), float(ms) * f))
    target, draft = loop_pass_scales(passes, batched, steps=5)
    assert target == pytest.approx((1.6, 1.3, 1.1, 1.1, 1.1))
    assert draft == pytest.approx((1.7, 1.4, 1.2, 1.2, 1.2))
    assert loop_pass_scales([p for p in passes if not p.gamma], batched)[1] == ()

    def step(admitted, decoding):
        return SimpleNamespace(
            admitted=admitted, decoding=decoding, gamma=0, width=9, draft_ms=0.0, verify_ms=1.0
        )

    run = SimpleNamespace(steps=[step(2, 0), step(0, 2), step(0, 2), step(1, 1), step(0, 2)])
    assert [p.since_admission for p in loop_passes(run)] == [1, 2, 0, 1]


class _SpyCost(ConstantStepCost):
    """A constant cost whose passes run slower for two steps after an admission; records what it was told."""

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        self.__dict__.setdefault("seen", []).append(since_admission)
        plain = super().target_step_ms(batch, rows_per_seq, context_tokens, prefill_chunks)
        return plain * (1.0 + 0.5 * (since_admission is not None and since_admission < 2))


def test_the_simulation_counts_steps_since_an_admission_on_both_paths():
    """The hand schedule of test_serve (admissions at steps 1, 2 and 5) tells the cost 0, 0, 1, 2, 0, 1; a
    cost that depends on it serves fast-forwarded runs exactly as step by step."""
    from tests.test_serve import _hand_run

    hand = _SpyCost(target_ms=10.0, target_ms_per_row=1.0, prefill_ms_per_token=0.1, draft_ms_per_pass=2.0)
    _hand_run(hand)
    assert hand.seen == [0, 0, 1, 2, 0, 1]
    rng = np.random.default_rng(3)
    req = Requests(
        poisson_arrivals(40, 40.0, rng), rng.integers(5, 40, 40), np.zeros(40, int), rng.integers(1, 20, 40)
    )
    cost = _SpyCost(
        target_ms=5.0, target_ms_per_row=0.2, target_ms_per_context_token=0.001, draft_ms_per_pass=0.7
    )
    acc = ReplayAcceptance.from_matches([rng.random(30) < 0.6 for _ in range(4)])
    step, fast = (
        simulate(
            req, cost=cost, policy=GammaPolicy(3), acceptance=acc, rng=np.random.default_rng(0), record=r
        )
        for r in (True, False)
    )
    assert np.array_equal(step.finish_s, fast.finish_s) and np.array_equal(
        step.first_token_s, fast.first_token_s
    )
    assert fast.steps == step.steps and step.steps > 40


def test_the_calibration_loop_spaces_arrivals_to_keep_its_batch_nearly_full():
    """One arrival every (new tokens × a target step's ms at B) / B: B requests' tokens per B steps."""
    from calibrate.measure.server_loop_costs import arrival_spacing_s
    from specsim.profile_format.cost_grid import grid_ms
    from specsim.profiles import load_profile

    batched = load_profile("zoo-cpu-batch").latency.forward_costs().batched
    step, _ = grid_ms(batched.target_decode, 1, 120.0, 4)
    assert arrival_spacing_s(batched, 4, 24, 120.0) == pytest.approx(float(step) * 24 / 4 / 1e3)
    assert arrival_spacing_s(batched, 8, 24, 120.0) < arrival_spacing_s(batched, 1, 24, 120.0)
