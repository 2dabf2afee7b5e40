"""A llama.cpp profile priced through the one pass-cost seam: the draft's catch-up pass, the per-token work,
the prompt pass that emits one token, the lookup drafter; against a second implementation written block by
block from llama.cpp's loop; and the contract's new fields."""

from dataclasses import replace

import numpy as np
import pytest

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import CATCHUP, DRAFT, FIRST, TARGET
from specsim.draft_shapes.ngram_lookup import NgramSimple, ngram_plan
from specsim.errors import SpecsimError
from specsim.predict.pricing import RequestSpec, price
from specsim.profile_format.cost_grid import make_grid
from specsim.profile_format.cost_model import CostModel
from specsim.profile_format.overhead_grid import OverheadGrid
from specsim.profiles import load_profile


def llama_like_profile():
    """The Xeon profile's grids with llama.cpp's terms added (a catch-up grid, 3 ms per token, 40 ms per
    lookup block, prompt pass without drafts)."""
    profile = load_profile("qwen2.5-coder-0.5b-1.5b-cpu-xeon")
    model = profile.latency.forward_costs()
    ctx = model.draft_next.context_tokens
    rows = (2, 3, 4, 5, 6, 7)
    catch = make_grid(rows, ctx, (1,), [[[30.0 + 10 * r + 0.01 * c] for c in ctx] for r in rows])
    lookup = OverheadGrid((1, 6), (1,), ((40.0,), (45.0,)))
    model = replace(model, draft_catchup=catch, overhead_ms_per_token=3.0, first_pass_drafts=False,
                    lookup_overhead_ms_per_block=lookup)  # fmt: skip
    return replace(profile, latency=replace(profile.latency, cost_model=model))


def _by_hand(cost, match, gamma, n, P, D):
    """llama.cpp's decode phase, block by block (examples/speculative-simple, tools/server)."""
    t, sd = 1, 0.0
    while t < n:
        g = max(0, min(gamma, n - t - 1))
        run = 0
        while run < g and match[t + run]:
            run += 1
        e = min(run + 1, n - t)
        if g == 0:
            sd += float(cost.pass_ms(TARGET, 1, P - 1 + t).ms) + cost.step_overhead_ms()
        else:
            sd += float(cost.pass_ms(DRAFT, 1, D - 1 + t, kind=FIRST).ms)
            sd += sum(float(cost.pass_ms(DRAFT, 1, D - 1 + t + i).ms) for i in range(1, g))
            sd += float(cost.pass_ms(DRAFT, g + 1, D - 1 + t, kind=CATCHUP).ms)
            sd += float(cost.pass_ms(TARGET, g + 1, P - 1 + t).ms)
            sd += float(cost.block_overhead_ms(g, 1, P - 1 + t)) + e * cost.token_overhead_ms()
        t += e
    base = sum(float(cost.pass_ms(TARGET, 1, P + k).ms) + cost.step_overhead_ms() for k in range(n - 1))
    return base, sd


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_the_decode_phase_equals_llama_cpps_loop_written_by_hand(gamma):
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    cost = GridPassCost.request(profile.latency)
    assert cost.draft_catchup and not cost.first_pass_drafts and cost.token_overhead_ms() == 3.0
    for trace in entry.traces[:4]:
        n, P = len(trace.match), float(trace.prompt_tokens or 60)
        spec = RequestSpec(P, P, 0, trace, n)
        got = price(profile, entry, gamma, [spec])
        base, sd = _by_hand(cost, trace.match, gamma, n, P, P)
        assert got.base_decode.total_ms == pytest.approx(base, rel=1e-9)
        assert got.sd_decode.total_ms == pytest.approx(sd, rel=1e-9)
        assert got.sd_decode.tokens == n - 1  # the first token is the prompt pass's


def test_a_shorter_run_than_its_trace_prices_the_trace_prefix():
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    trace = entry.traces[0]
    spec = RequestSpec(60.0, 60.0, 0, trace, 32)
    got = price(profile, entry, 3, [spec])
    assert got.sd_request.tokens == 32


def test_the_lookup_drafter_runs_no_draft_pass():
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    trace = replace(entry.traces[0], tokens=tuple(range(64)), prompt_ids=tuple(range(10)))
    cost = GridPassCost.lookup(profile.latency)
    assert float(cost.pass_ms(DRAFT, 3, 100.0).ms) == 0.0 and not cost.draft_catchup
    got = price(
        profile,
        replace(entry, traces=(trace,)),
        NgramSimple(3, 6),
        [RequestSpec(60.0, 60.0, 0, trace, 64)],
        cost,
    )
    plan = ngram_plan(trace.prompt_ids, trace.tokens, NgramSimple(3, 6), 64)
    assert got.sd_decode.blocks == plan.blocks
    assert got.sd_decode.draft_ms == 0.0
    with pytest.raises(SpecsimError, match="lookup_overhead_ms_per_block"):
        GridPassCost.lookup(load_profile("qwen2.5-coder-0.5b-1.5b-cpu-xeon").latency)


def test_the_new_cost_model_fields_round_trip_and_bad_ones_name_themselves():
    model = llama_like_profile().latency.forward_costs()
    again = CostModel.from_json(model.to_json())
    assert again == model
    d = model.to_json()
    with pytest.raises(SpecsimError, match="first_pass_drafts"):
        CostModel.from_json(d | {"first_pass_drafts": "no"})
    bad = dict(d["draft_catchup"], rows=[1, 2, 3, 4, 5, 6])
    with pytest.raises(SpecsimError, match="draft_catchup"):
        CostModel.from_json(d | {"draft_catchup": bad})
    with pytest.raises(SpecsimError, match="overhead_ms_per_token"):
        CostModel.from_json(d | {"overhead_ms_per_token": -1})
    assert "first_pass_drafts" not in load_profile("zoo-cpu").latency.forward_costs().to_json()
    assert np.isfinite(float(GridPassCost(model).pass_ms(DRAFT, 4, 80.0, kind=CATCHUP).ms))
