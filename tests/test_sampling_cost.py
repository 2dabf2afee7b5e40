"""What sampling adds at T > 0 (specsim.profile_format.sampling_cost): the contract, interpolation, and the
sampled
check's walk pricing every draw and acceptance exactly once."""

from dataclasses import replace

import numpy as np
import pytest

from specsim.check.sampled import _base_ms, simulate_pool
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.errors import SpecsimError
from specsim.predict.chain_costs import sd_request_cost, target_request_cost
from specsim.profile_format import LatencySection
from specsim.profile_format.cost_model import CostModel
from specsim.profile_format.sampling_cost import SamplingCost
from tests.test_check_sampled import GAMMA, _world

COST = SamplingCost(
    draft_step_ms=0.2, target_step_ms=0.1, accept_gammas=(0, 1, 3), accept_ms=(0.05, 0.1, 0.3)
)


def test_accept_cost_interpolates_and_extrapolates_linearly():
    np.testing.assert_allclose(COST.accept_ms_at([0, 1, 2, 3]), [0.05, 0.1, 0.2, 0.3])
    np.testing.assert_allclose(COST.accept_ms_at([5, 8]), [0.5, 0.8])  # the last segment's slope
    np.testing.assert_allclose(COST.block_ms([0, 3]), [0.05, 0.6 + 0.3])
    flat = SamplingCost(0.0, 0.0, (0, 4), (0.4, 0.0))
    assert flat.accept_ms_at(9) == 0.0  # a falling noisy slope never gives a negative time


def test_round_trip_and_errors_name_the_field():
    assert SamplingCost.from_json(COST.to_json()) == COST
    good = COST.to_json()
    for bad, message in [
        ({**good, "draft_step_ms": -1}, "draft_step_ms: expected >= 0"),
        ({**good, "accept_ms": [0.1]}, "accept_ms: expected 3 values"),
        ({**good, "accept_gammas": [0, 3, 1]}, "accept_gammas: expected strictly increasing"),
        ({**good, "schema_version": True}, "schema_version: expected 1"),
        ({**good, "extra": 1}, "unknown field 'extra'"),
        ({**good, "target_step_ms": float("nan")}, "target_step_ms: expected a finite number"),
    ]:
        with pytest.raises(SpecsimError, match=message):
            SamplingCost.from_json(bad)


def test_cost_model_carries_sampling_and_older_profiles_load_without_it():
    prof, _, _ = _world()
    cm = replace(prof.latency.cost_model, sampling=COST)
    back = LatencySection.from_json(LatencySection(cost_model=cm).to_json())
    assert back.cost_model.sampling == COST
    plain = prof.latency.cost_model.to_json()
    assert "sampling" not in plain and CostModel.from_json(plain).sampling is None


def test_sampled_walk_adds_every_draw_and_acceptance_once():
    prof, entry, specs = _world()
    greedy = GridPassCost(prof.latency.cost_model)
    cm = GridPassCost(replace(prof.latency.cost_model, sampling=COST))
    beta = np.asarray(entry.traces[1].beta)
    kw = {"target_prompt_tokens": 40, "draft_prompt_tokens": 40}
    pool = simulate_pool(beta, specs[1], GAMMA, rng=np.random.default_rng(5), runs=16, cost=cm)
    draws = np.random.default_rng(5).random((16, beta.size)) < beta
    for i in (0, 9, 15):
        plan = greedy_plan(draws[i], GAMMA, specs[1].max_new_tokens)
        rest = plan.after_first()
        added_decode = float(np.sum(rest.drafts * 0.2 + COST.accept_ms_at(rest.drafts)))
        added_first = float(plan.drafts[0] * 0.2 + COST.accept_ms_at(plan.drafts[0]))
        decode = sd_request_cost(greedy, rest, fused=False, **kw).total_ms
        assert pool.decode_ms[i] == pytest.approx(decode + added_decode)
        assert pool.request_ms[i] == pytest.approx(
            sd_request_cost(greedy, plan, **kw).total_ms + added_first + added_decode
        )
    dec_ms, dec_tok, req_ms = _base_ms(cm, specs[1], 30)
    base = target_request_cost(greedy, prompt_tokens=41, new_tokens=29, fused=False).total_ms
    assert (dec_ms, dec_tok) == (pytest.approx(base + 29 * 0.1), 29.0)
    assert req_ms == pytest.approx(
        target_request_cost(greedy, prompt_tokens=40, new_tokens=30).total_ms + 3.0
    )
