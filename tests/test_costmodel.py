"""The cost model's grids, interpolation rule and JSON contract, and the request walk (numpy only)."""

import json
from dataclasses import replace

import numpy as np
import pytest

from specsim.acceptance.replay import replay_block_starts, replay_blocks_per_prompt, replay_traces_tau
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.block_plans import expected_plan, greedy_plan
from specsim.errors import SpecsimError
from specsim.predict.chain_costs import sd_request_cost, target_request_cost
from specsim.predict.prediction import predict_entry
from specsim.profile_format import LatencySection, MethodAcceptance, Profile, Trace
from specsim.profile_format.cost_grid import grid_ms, make_grid
from specsim.profile_format.cost_model import CostModel, OverheadGrid
from specsim.profiles import load_profile, save_profile
from tests.conftest import make_profile

ROWS, CTX, BATCH = (1, 2, 4), (16.0, 64.0, 256.0), (1, 3)


def multilinear(r, c, b):
    """Linear in each axis (with cross terms): what multilinear interpolation reproduces exactly."""
    return 1.0 + 0.5 * r + 0.01 * c + 0.3 * b + 0.002 * r * c + 0.001 * c * b


def _grid(f=multilinear, rows=ROWS, ctx=CTX, batch=BATCH):
    ms = [[[f(r, c, b) for b in batch] for c in ctx] for r in rows]
    return make_grid(rows, ctx, batch, ms)


def test_interpolation_is_exact_for_a_multilinear_cost():
    rng = np.random.default_rng(0)
    r = rng.uniform(1, 4, 200)
    c = rng.uniform(16, 256, 200)
    b = rng.uniform(1, 3, 200)
    ms, out = grid_ms(_grid(), r, c, b)
    np.testing.assert_allclose(ms, multilinear(r, c, b), rtol=1e-12)
    assert not out.any()
    assert grid_ms(_grid(), 2, 64, 3)[0] == pytest.approx(multilinear(2, 64, 3))


def test_outside_the_grid():
    g = _grid()
    ms, out = grid_ms(g, [2, 2], [8.0, 512.0], 1)
    assert out.all()  # flagged, linear along context
    np.testing.assert_allclose(ms, multilinear(2, np.array([8.0, 512.0]), 1))
    with pytest.raises(SpecsimError, match="rows: 5 is outside the measured range 1..4"):
        grid_ms(g, 5, 64, 1, name="Tv")
    with pytest.raises(SpecsimError, match="batch: 4"):
        grid_ms(g, 1, 64, 4)
    # a noisy grid whose cost falls with context: extrapolation holds the end value instead of going negative
    falling = _grid(lambda r, c, b: 10.0 - 0.03 * c)
    assert grid_ms(falling, 1, 2000.0, 1)[0] == pytest.approx(10.0 - 0.03 * 256)
    # prefill grids (context 0): their rows are the prompt's tokens and follow the same rule
    prefill = make_grid((16, 64), (0.0,), (1,), [[[20.0]], [[50.0]]])
    ms, out = grid_ms(prefill, 128, 0, 1, along="rows")
    assert ms == pytest.approx(90.0) and out


def _cost_model(
    f_target=lambda r, c: 10.0 + 2 * (r - 1) + 0.01 * c,
    f_draft=lambda r, c, b: 1.0 + 0.001 * c,
    overhead=0.0,
    max_gamma=6,
) -> CostModel:
    ctx = (8.0, 512.0)
    rows_v = tuple(range(2, max_gamma + 2))
    t = lambda rows, cs: [[[f_target(r, c)] for c in cs] for r in rows]  # noqa: E731
    d = lambda rows, cs, bs: [[[f_draft(r, c, b) for b in bs] for c in cs] for r in rows]  # noqa: E731
    return CostModel(
        target_decode=make_grid((1,), ctx, (1,), t((1,), ctx)),
        target_verify=make_grid(rows_v, ctx, (1,), t(rows_v, ctx)),
        draft_first=make_grid((1, 2), ctx, (1, 2), d((1, 2), ctx, (1, 2))),
        draft_next=make_grid((1,), ctx, (1, 2), d((1,), ctx, (1, 2))),
        target_prefill=make_grid((1, 512), (0.0,), (1,), [[[5.0]], [[100.0]]]),
        draft_prefill=make_grid((1, 512), (0.0,), (1, 2), [[[1.0, 1.5]], [[10.0, 15.0]]]),
        overhead_ms_per_block=OverheadGrid(
            (1, max_gamma), (1, 2), ((overhead, overhead), (overhead, overhead))
        ),
        overhead_ms_per_target_step=overhead,
    )


def test_cost_model_json_round_trip_and_errors(tmp_path):
    cm = _cost_model()
    assert CostModel.from_json(json.loads(json.dumps(cm.to_json()))) == cm
    assert cm.max_gamma == 6
    prof = make_profile(latency=LatencySection(cost_model=cm))
    path = save_profile(prof, tmp_path / "p.json")
    assert load_profile(str(path)).latency.cost_model == cm
    data = json.loads(path.read_text())
    data["latency"]["cost_model"]["target_verify"]["ms"][0][1] = [-1.0]
    path.write_text(json.dumps(data))
    with pytest.raises(
        SpecsimError, match=r"latency.cost_model.target_verify.ms\[0\]\[1\]\[0\]: expected > 0"
    ):
        load_profile(str(path))
    data["latency"]["cost_model"]["target_verify"]["ms"] = [[[1.0]]]
    path.write_text(json.dumps(data))
    with pytest.raises(SpecsimError, match="target_verify.ms: expected 6 rows"):
        load_profile(str(path))


def test_a_target_step_below_the_grid_loads_but_never_prices_a_step_at_zero():
    """Real target-only runs may find the engine's step faster than the decode grid's timing (a residual
    below 0, kept with its sign), down to just above the grid's fastest step (10.08 ms here); no further."""
    cm = replace(_cost_model(), overhead_ms_per_target_step=-5.4)
    back = CostModel.from_json(json.loads(json.dumps(cm.to_json())))
    assert back.overhead_ms_per_target_step == -5.4
    assert GridPassCost(back).step_overhead_ms() == -5.4
    for bad in (-10.08, -20.0):
        with pytest.raises(
            SpecsimError, match=r"overhead_ms_per_target_step: expected > -10.08 \(the target"
        ):
            CostModel.from_json(cm.to_json() | {"overhead_ms_per_target_step": bad})
    with pytest.raises(SpecsimError, match="overhead_ms_per_target_step: expected a finite number"):
        CostModel.from_json(cm.to_json() | {"overhead_ms_per_target_step": float("nan")})


def test_llama_cpp_blocks_below_their_forwards_load_but_never_price_a_block_at_its_verification():
    """A profile whose prompt pass drafts nothing (llama.cpp's) keeps each γ's block residual with its sign,
    down to just above minus its cheapest verification (γ + 1 rows: 10 + 2γ ms at context 8 here); our
    engines' profiles still refuse a negative block overhead."""
    cm = replace(_cost_model(), first_pass_drafts=False)
    grid = OverheadGrid((1, 6), (1,), ((-11.9,), (-21.9,)))
    back = CostModel.from_json(json.loads(json.dumps(replace(cm, overhead_ms_per_block=grid).to_json())))
    assert back.overhead_ms_per_block == grid
    assert GridPassCost(back).block_overhead_ms(3) == pytest.approx(-11.9 - 10.0 * 2 / 5)
    for bad, at in (((-12.09,), (0.0,)), ((0.0,), (-22.2,))):
        d = cm.to_json() | {"overhead_ms_per_block": OverheadGrid((1, 6), (1,), (bad, at)).to_json()}
        g, floor = (1, 12.08) if bad[0] else (6, 22.08)
        with pytest.raises(SpecsimError, match=rf"overhead_ms_per_block: expected > -{floor} at gamma {g}"):
            CostModel.from_json(d)
    lookup = cm.to_json() | {"lookup_overhead_ms_per_block": OverheadGrid((1,), (1,), ((-13.0,),)).to_json()}
    with pytest.raises(SpecsimError, match=r"lookup_overhead_ms_per_block: expected > -12.08 at gamma 1"):
        CostModel.from_json(lookup)
    by_ctx = OverheadGrid((1,), (1,), ((-13.0,),), (8.0,), (((-1.0,),),))  # pooled below, by context above
    with pytest.raises(SpecsimError, match=r"overhead_ms_per_block: expected > -12.08 at gamma 1"):
        CostModel.from_json(cm.to_json() | {"overhead_ms_per_block": by_ctx.to_json()})
    ours = _cost_model().to_json() | {"overhead_ms_per_block": grid.to_json()}
    with pytest.raises(SpecsimError, match=r"overhead_ms_per_block.ms\[0\]\[0\]: expected a value"):
        CostModel.from_json(ours)


def test_schema1_profile_still_loads(tmp_path):
    data = make_profile().to_json() | {"schema_version": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    prof = load_profile(str(path))
    assert prof.schema_version == 1 and prof.latency.cost_model_from_tables  # its tables, at one context
    assert "cost_model" not in prof.latency.to_json()


@pytest.mark.parametrize("seed", range(5))
def test_greedy_plan_is_the_replayed_schedule(seed):
    """A second implementation: the plan's blocks are replay's block starts and counts, EOS-cut traces too."""
    rng = np.random.default_rng(seed)
    match = rng.random(40) < 0.7
    for g in (1, 2, 3, 5, 8):
        plan = greedy_plan(match, g)
        assert plan.start.tolist() == replay_block_starts(match, g)
        assert plan.blocks == replay_blocks_per_prompt([match], g)[0]
        assert plan.tokens == 40 and plan.tokens / plan.blocks == pytest.approx(replay_traces_tau([match], g))
        assert all(d == min(g, 40 - t - 1) for d, t in zip(plan.drafts, plan.start))
        # an EOS-cut trace in a run allowed 64 tokens drafts full blocks to the end, as the engine does
        eos = greedy_plan(match, g, max_new_tokens=64)
        assert eos.blocks == plan.blocks and (eos.drafts >= plan.drafts).all()


def test_expected_plan_spreads_tokens_in_blocks_of_tau():
    plan = expected_plan(2.5, 4, 64, full_rate=0.2)
    assert plan.tokens == pytest.approx(64) and plan.blocks == pytest.approx(64 / 2.5)
    assert np.allclose(plan.first_rows, 1.2)
    with pytest.raises(SpecsimError, match="tau"):
        expected_plan(6.0, 4, 64)


@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_fewer_tokens_than_tau_are_one_block_that_emits_them(tokens):
    """A request of N < τ tokens still runs a block (drafts, and a verification that emits N): a fraction
    1/τ of a τ-block emitted 4.1 tokens per block for a 1-token request and priced a quarter of its passes."""
    plan = expected_plan(4.095, 4, tokens, full_rate=0.3)
    assert plan.blocks == 1 and plan.tokens == tokens and plan.emitted.max() == tokens
    assert plan.draft_tokens == 4 and np.allclose(plan.first_rows, 1.3)
    assert expected_plan(4.095, 4, 5).blocks == pytest.approx(5 / 4.095)  # from τ tokens on: blocks of τ


def test_constant_costs_reduce_the_walk_to_the_formula():
    """With costs that do not depend on context and no overhead, speedup = τ / (γ·c + v) exactly."""
    cm = _cost_model(f_target=lambda r, c: 10.0 + 2 * (r - 1), f_draft=lambda r, c, b: 1.0)
    match = np.random.default_rng(3).random(60) < 0.8
    plan = greedy_plan(match, 4)
    sd = sd_request_cost(
        GridPassCost(cm), plan, target_prompt_tokens=100, draft_prompt_tokens=100, fused=False
    )
    base = target_request_cost(GridPassCost(cm), prompt_tokens=100, new_tokens=60, fused=False)
    tau = plan.tokens / plan.blocks
    drafts = plan.drafts.sum()
    # every block: its drafts at 1 ms, and a verification of g+1 rows at 10 + 2g ms
    assert sd.total_ms == pytest.approx(drafts * 1.0 + sum(10.0 + 2 * g for g in plan.drafts))
    assert base.total_ms == pytest.approx(600.0)
    full = [g for g in plan.drafts if g == 4]
    assert len(full) >= plan.blocks - 2  # only the capped last blocks differ from γ
    assert base.total_ms / sd.total_ms == pytest.approx(tau * 10.0 * plan.blocks / sd.total_ms)


def _one_trace_world():
    """(cost model, one 30-token trace of a 40-token prompt, its entry, a profile holding both)."""
    cm = _cost_model(overhead=0.5)
    traces = (
        Trace(
            match=tuple(int(x) for x in np.random.default_rng(1).random(30) < 0.8),
            prompt_id="a",
            prompt_tokens=40,
            draft_prompt_tokens=40,
        ),
    )
    entry = MethodAcceptance(method="plain", scenario="s", images_per_prompt=0, traces=traces)
    prof = Profile(
        provenance=make_profile().provenance, latency=LatencySection(cost_model=cm), acceptance=(entry,)
    )
    return cm, traces, entry, prof


def test_predict_walks_the_traces_of_a_schema2_profile():
    cm, traces, entry, prof = _one_trace_world()
    row = predict_entry(prof, entry, 3)
    # the decode phase: SD blocks after the first against target-only steps after the first
    plan = greedy_plan(traces[0].match, 3)
    after = plan.after_first()
    sd = sd_request_cost(
        GridPassCost(cm), after, target_prompt_tokens=40, draft_prompt_tokens=40, fused=False
    )
    base = target_request_cost(GridPassCost(cm), prompt_tokens=41, new_tokens=29, fused=False)
    tp = base.total_ms / 29
    assert row.speedup == pytest.approx(tp / (sd.total_ms / after.tokens))
    assert row.tau == pytest.approx(replay_traces_tau(traces, 3))
    assert row.gamma_c_plus_v == pytest.approx(sd.total_ms / after.blocks / tp)
    assert row.o == pytest.approx(0.5 / tp)
    e2e = predict_entry(prof, entry, 3, new_tokens=30).end_to_end
    assert e2e["speedup"] < row.speedup  # the prefill is not accelerated
    # a context that has no prompt length is a clear note, not a crash
    bare = MethodAcceptance(method="x", scenario="s", images_per_prompt=0, gamma=3, tau=2.0)
    assert "prompt length is unknown" in predict_entry(prof, bare, 3).note


def test_check_row_names_the_target_only_step_term():
    """The speedup's denominator is a term of its own: predicted vs measured ms per target-only step."""
    from specsim.check.check_tables import terms_table
    from specsim.check.comparison import PromptSpec, RequestRun, check_row, measure

    cm, traces, entry, prof = _one_trace_world()
    run = RequestRun(
        prompt_id="a",
        setup_ms=0.0,
        first_ms=5.0,
        draft_ms=30.0,
        verify_ms=60.0,
        overhead_ms=10.0,
        tokens=30,
        first_tokens=1,
        blocks=9,
    )
    row = check_row(
        prof, entry, 3, [PromptSpec("a", 40, 40, 0, 30)], measure({"a": [run] * 2}, {"a": [run] * 2})
    )
    step = row.terms_ms_per_block["target_step"]
    base = target_request_cost(GridPassCost(cm), prompt_tokens=41, new_tokens=29, fused=False)
    assert step["predicted"] == pytest.approx(base.total_ms / 29)
    assert step["measured"] == pytest.approx(100.0 / 29)
    assert "target step pred" in terms_table([row])


def test_overhead_by_context_is_interpolated_and_walked_per_block():
    """With a context axis, each block pays the overhead at its own target context (linear between measured
    contexts, the end value outside); without one, the pooled value; the JSON keys come in pairs."""

    pooled = OverheadGrid((1, 6), (1, 2), ((1.0, 1.0), (1.0, 1.0)))
    grid = replace(
        pooled,
        context_tokens=(8.0, 512.0),
        ms_by_context=(((0.5, 0.5), (2.5, 2.5)), ((1.5, 1.5), (3.5, 3.5))),
    )
    assert grid.at(1, 1, 260.0) == pytest.approx(1.5) and grid.at(6, 2, 8.0) == pytest.approx(1.5)
    assert grid.at(1, 1, 4000.0) == pytest.approx(2.5) and grid.at(1, 1) == pytest.approx(1.0)
    np.testing.assert_allclose(grid.at(np.array([1, 6]), 1, np.array([8.0, 512.0])), [0.5, 3.5])
    assert OverheadGrid.from_json(json.loads(json.dumps(grid.to_json())), "o") == grid
    lonely = grid.to_json()
    del lonely["ms_by_context"]
    with pytest.raises(SpecsimError, match="both context_tokens and ms_by_context"):
        OverheadGrid.from_json(lonely, "o")
    cm = replace(_cost_model(), overhead_ms_per_block=grid)
    plan = greedy_plan(tuple(int(x) for x in np.random.default_rng(2).random(40) < 0.7), 3)
    sd = sd_request_cost(
        GridPassCost(cm), plan, target_prompt_tokens=100, draft_prompt_tokens=100, fused=False
    )
    by_hand = sum(grid.at(max(int(g), 1), 1, 99.0 + t) for g, t in zip(plan.drafts, plan.start))
    assert sd.overhead_ms == pytest.approx(by_hand)
    assert sd.overhead_ms != pytest.approx(float(grid.at(3, 1)) * plan.blocks)  # not the pooled value


def test_an_adaptive_ensemble_pays_its_weight_update_per_block(tmp_path):
    """``adaptive_ms_per_block`` is added to each block of an adaptive method's walk (at its γ, batch and
    context), to no other method's; profiles without it price the update as free; it round-trips."""

    update = OverheadGrid(
        (1, 6),
        (1, 2),
        ((0.25, 0.5), (0.75, 1.0)),
        (8.0, 512.0),
        (((0.1, 0.2), (0.3, 0.4)), ((0.5, 0.6), (0.7, 0.8))),
    )
    cm = replace(_cost_model(overhead=1.0), adaptive_ms_per_block=update)
    assert CostModel.from_json(json.loads(json.dumps(cm.to_json()))) == cm
    plan = greedy_plan(tuple(int(x) for x in np.random.default_rng(4).random(40) < 0.7), 4)
    kw = {"target_prompt_tokens": 100, "draft_prompt_tokens": 100, "batch": 2, "fused": False}
    fixed = sd_request_cost(GridPassCost(cm), plan, **kw)
    adaptive = sd_request_cost(GridPassCost(cm), plan, adaptive=True, **kw)
    by_hand = sum(update.at(max(int(g), 1), 2, 99.0 + t) for g, t in zip(plan.drafts, plan.start))
    assert fixed.overhead_ms == pytest.approx(plan.blocks * 1.0)
    assert adaptive.overhead_ms - fixed.overhead_ms == pytest.approx(by_hand) and by_hand > 0
    assert adaptive.draft_ms == fixed.draft_ms and adaptive.verify_ms == fixed.verify_ms
    old = replace(cm, adaptive_ms_per_block=None)
    assert sd_request_cost(GridPassCost(old), plan, adaptive=True, **kw).overhead_ms == pytest.approx(
        fixed.overhead_ms
    )
    assert MethodAcceptance(method="adaptive:MTC", scenario="s", images_per_prompt=1).adaptive
    assert not MethodAcceptance(method="MTC", scenario="s", images_per_prompt=1).adaptive
    bad = cm.to_json()
    bad["adaptive_ms_per_block"]["ms"] = [[0.25, 0.5]]
    with pytest.raises(SpecsimError, match="adaptive_ms_per_block"):
        CostModel.from_json(bad)


def test_extrapolation_below_the_grid_never_goes_negative():
    """A steep (noisy) slope carried far below the first measured context stops at 0 ms, flagged."""
    from specsim.profile_format.cost_grid import grid_ms, make_grid

    grid = make_grid(rows=(1,), context_tokens=(64, 256), batch=(1,), ms=[[[1.0], [9.0]]])
    ms, out = grid_ms(grid, 1, 8, 1, name="draft_next")
    assert out and ms == 0.0
    ms, out = grid_ms(grid, 1, 48, 1, name="draft_next")
    assert out and ms == pytest.approx(1.0 - 16 / 192 * 8.0)


def test_tree_overhead_plane_in_size_and_depth():
    """A plane through swept trees of 3+ depths prices a deep chain exactly (a grid by n alone would price it
    as a shallow tree); fewer depths give no fit; the JSON names a bad field."""
    from specsim.profile_format.overhead_grid import TreeOverheadFit

    plane = lambda n, d, c, b: 0.3 + 0.07 * d + 0.006 * n + 0.001 * c + 0.05 * b  # noqa: E731
    sizes, depths = (1, 2, 4, 8, 16, 20, 22, 24), (1, 2, 2, 2, 2, 3, 4, 2)
    ms = [[[plane(n, d, c, b) for b in (1, 2)] for c in (13.0, 230.0)] for n, d in zip(sizes, depths)]
    fit = TreeOverheadFit.fit(sizes, depths, ms, (1, 2), (13.0, 230.0))
    assert fit.at(10, 10, 1, 13.0) == pytest.approx(
        plane(10, 10, 13.0, 1)
    )  # chain:10, far outside the depths
    assert fit.at(10, 10, 2, 100.0) == pytest.approx(plane(10, 10, 100.0, 2))
    assert TreeOverheadFit.fit(sizes[:5], depths[:5], ms[:5], (1, 2), (13.0, 230.0)) is None
    assert TreeOverheadFit.from_json(json.loads(json.dumps(fit.to_json())), "fit") == fit
    bad = fit.to_json() | {"ms_per_level": [[0.07, float("nan")], [0.07, 0.07]]}
    with pytest.raises(SpecsimError, match=r"fit\.ms_per_level\[0\]\[1\]"):
        TreeOverheadFit.from_json(bad, "fit")
