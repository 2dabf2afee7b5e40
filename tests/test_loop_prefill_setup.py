"""What a server-loop prefill costs outside the models' forwards, and joining the batch at each γ: recorded
by the loop, measured by calibration (calibrate/measure/server_loop_costs.py), stored in the profile and
charged to each admission by the serving simulation (specsim/serve/profile_cost.py)."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from calibrate.measure.server_loop_costs import prefill_setup_ms
from calibrate.run.proposal import Request
from calibrate.run.server_loop import serve_loop
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.profile_format.batched_cost import BatchedCosts, ServerLoopCosts
from specsim.profiles import load_profile
from specsim.serve.arrivals import Requests
from specsim.serve.profile_cost import ProfileStepCost
from specsim.serve.simulator import simulate
from specsim.serve.speculation import ReplayAcceptance
from specsim.serve.step_cost import ConstantStepCost
from tests.tiny_pair import tiny_pair, tiny_prompts

BASE = ServerLoopCosts((0, 3), ((0.05, 0.01), (0.3, 0.05)), 0.5, 1.25)


def _cost(loop):
    forward = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-batch").latency.forward_costs()
    batched = replace(forward.batched, server_loop=loop)
    return ProfileStepCost(GridPassCost(replace(forward, batched=batched), batched))


def test_each_admission_pays_its_prefill_set_up_and_its_join_at_the_steps_gamma():
    """Target pass: + (join-and-leave ms at γ + target-only set-up) per admission over the older profile's
    flat join ms; draft: + (SD set-up − target-only set-up) per admission, outside the cold scale."""
    new = replace(BASE, prefill_host_ms=(0.2, 0.5), ms_per_request_by_gamma=(0.4, 1.0))
    old, cost = _cost(BASE), _cost(new)
    ctx, chunks = np.full(2, 60.0), [(40, 0, 0), (30, 0, 0)]
    for rows, joins in ((1, 0.4), (4, 1.0)):  # γ 0 and 3
        diff = cost.target_step_ms(2, rows, ctx, chunks) - old.target_step_ms(2, rows, ctx, chunks)
        assert diff == pytest.approx(2 * (joins + 0.2 - 0.5))
    assert new.request_ms(2) == pytest.approx(0.8)  # between γ 0 and 3
    assert cost.draft_ms(2, 3, ctx, chunks) - old.draft_ms(2, 3, ctx, chunks) == pytest.approx(2 * 0.3)
    assert cost.target_step_ms(2, 4, ctx) == old.target_step_ms(2, 4, ctx)  # no admission, no charge
    assert new.request_ms(5) == 1.0 and BASE.request_ms(3) == 0.5 and BASE.prefill_setup_ms(True) == 0.0


def test_the_new_fields_round_trip_older_profiles_load_and_bad_lengths_are_named():
    new = replace(BASE, prefill_host_ms=(0.2, 0.5), ms_per_request_by_gamma=(0.4, 1.0))
    assert ServerLoopCosts.from_json(new.to_json(), "x") == new
    assert ServerLoopCosts.from_json(BASE.to_json(), "x") == BASE
    assert "prefill_host_ms" not in BASE.to_json()
    batched = load_profile("zoo-cpu-batch").latency.forward_costs().batched
    for key, bad, what in (
        ("prefill_host_ms", [0.1], "target-only ms, SD ms"),
        ("ms_per_request_by_gamma", [0.1, 0.2, 0.3], "one ms per gamma"),
    ):
        with pytest.raises(SpecsimError, match=f"server_loop.{key}: expected .*{what}"):
            BatchedCosts.from_json(batched.to_json() | {"server_loop": new.to_json() | {key: bad}})
    with pytest.raises(SpecsimError, match=r"prefill_host_ms\[1\]"):
        ServerLoopCosts.from_json(new.to_json() | {"prefill_host_ms": [0.1, -1]}, "x")


def test_prefill_set_up_is_the_prefills_ms_outside_their_forwards_per_admitted_request():
    def step(gamma, admitted, prefill, forward):
        return SimpleNamespace(gamma=gamma, admitted=admitted, prefill_ms=prefill, prefill_forward_ms=forward)

    steps = [step(0, 2, 10.0, 9.0), step(0, 1, 5.0, 4.5), step(3, 1, 7.0, 6.0), step(1, 2, 9.0, 7.0)]
    assert prefill_setup_ms(steps) == pytest.approx((1.5 / 3, 3.0 / 3))
    assert prefill_setup_ms([step(0, 1, 5.0, 4.0)]) == pytest.approx((1.0, 0.0))  # no SD step: 0


def test_the_loop_records_its_prefill_forwards_inside_its_prefill_ms():
    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(4))]
    for gamma in (0, 2):
        run = serve_loop(target, draft, requests, [0.0, 0.0, 0.01, 0.02], gamma=gamma, max_new_tokens=6)
        admitting = [s for s in run.steps if s.admitted]
        assert sum(s.admitted for s in admitting) == len(requests)
        assert all(0 < s.prefill_forward_ms <= s.prefill_ms for s in admitting)
        assert all(s.prefill_forward_ms == 0 for s in run.steps if not s.admitted)


class _MaskingCost(ConstantStepCost):
    """A constant cost whose engine keeps rejected drafts as masked cache columns."""

    keeps_rejected_drafts = True


def test_an_engine_that_keeps_rejected_drafts_is_priced_over_its_cache_columns():
    """One request of a 10-position prompt and 4 tokens, no draft ever accepted (α 0, γ 3): its decode steps
    see 10, 14, 18 cache columns where rejected drafts stay masked, 10, 11, 12 where they are freed; the
    fast-forwarded run equals the step-by-step one."""
    req = Requests(np.zeros(1), np.array([10]), np.zeros(1, int), np.array([4]))
    kw = dict(target_ms=1.0, target_ms_per_context_token=0.5)
    never = ReplayAcceptance.from_matches([np.zeros(8, bool)])
    runs = {}
    for name, cost in (("kept", _MaskingCost(**kw)), ("freed", ConstantStepCost(**kw))):
        step, fast = (
            simulate(
                req,
                cost=cost,
                policy=GammaPolicy(3),
                acceptance=never,
                rng=np.random.default_rng(0),
                record=r,
            )
            for r in (True, False)
        )
        assert fast.finish_s[0] == pytest.approx(step.finish_s[0])
        runs[name] = step
    prefill = runs["kept"].first_token_s[0]
    decode_ms = {name: (run.finish_s[0] - prefill) * 1e3 for name, run in runs.items()}
    assert decode_ms["kept"] == pytest.approx(3 * 1.0 + 0.5 * (10 + 14 + 18))
    assert decode_ms["freed"] == pytest.approx(3 * 1.0 + 0.5 * (10 + 11 + 12))


def test_the_loop_costs_of_several_rounds_average_field_by_field():
    """check --serve-rates --remeasure-batched measures the loop's costs before every serving round and
    keeps their mean (its pass scales come from every round's passes, not from this mean)."""
    from calibrate.measure.server_loop_costs import mean_loop_costs

    a = ServerLoopCosts((0, 3), ((0.1, 0.02), (0.3, 0.04)), 0.6, 1.2, (1.1,), (1.2,), (0.1, 0.3), (0.4, 0.8))
    b = ServerLoopCosts((0, 3), ((0.3, 0.04), (0.5, 0.06)), 0.8, 1.0, (1.3,), (1.4,), (0.3, 0.5), (0.6, 1.0))
    mean = mean_loop_costs([a, b])
    assert np.allclose(mean.step_ms, ((0.2, 0.03), (0.4, 0.05)))
    assert (mean.ms_per_request, mean.cold_pass_ms_scale) == pytest.approx((0.7, 1.1))
    assert mean.prefill_host_ms == pytest.approx((0.2, 0.4))
    assert mean.ms_per_request_by_gamma == pytest.approx((0.5, 0.9))
    assert mean.target_pass_scale == () and mean_loop_costs([a]).step_ms == a.step_ms
    with pytest.raises(SpecsimError, match="same gammas"):
        mean_loop_costs([a, replace(b, gammas=(0, 5))])


def test_the_loop_runs_with_the_collector_off_and_gives_it_back():
    """Every reading of the loop's clock falls inside the run, with the cyclic collector off; it is on again
    after the run (calibrate.run.timing.gc_paused on serve_loop)."""
    import gc
    import time

    seen = []

    def clock():
        seen.append(gc.isenabled())
        return time.perf_counter()

    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(2))]
    serve_loop(target, draft, requests, [0.0, 0.0], gamma=2, max_new_tokens=4, clock=clock)
    assert seen and not any(seen) and gc.isenabled()
