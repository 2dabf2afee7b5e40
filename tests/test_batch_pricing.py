"""The batched walk (specsim/predict/batch_pricing.py) reproduces the batched engine's schedule exactly, the
batched sweep (calibrate/measure/batch_grid_sweep.py) writes a grid a schema-3 profile round-trips, and the
walk's sums are the hand-computed ones on a linear synthetic grid."""

import json
from dataclasses import replace

import numpy as np
import pytest

from calibrate.measure.batch_grid_sweep import BatchSweepPlan
from calibrate.measure.server_loop_costs import measure_batched
from calibrate.models.loaded_model import LoadedModel
from calibrate.run.batch_engine import PaddedCache, batch_speculative_decode, batch_target_decode
from calibrate.run.proposal import Request
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.errors import SpecsimError
from specsim.predict.batch_pricing import batch_schedule, price_batch
from specsim.profile_format.batched_cost import BatchedCosts
from specsim.profile_format.cost_grid import make_grid
from specsim.profile_format.overhead_grid import OverheadGrid
from tests.tiny_pair import tiny_pair, tiny_prompts

NEW = 16


def _emitted_alone(target, draft, requests, gamma):
    """Each request's tokens per block when it decodes alone (B = 1)."""
    out = []
    for r in requests:
        res = batch_speculative_decode(target, draft, [r], gamma=gamma, max_new_tokens=NEW)
        out.append(np.array([b.emitted[0] for b in res.blocks], float))
    return out


@pytest.mark.parametrize("batch,gamma", [(3, 2), (5, 4), (8, 3)])
def test_walk_reproduces_the_batched_engine(batch, gamma):
    """g per block, the cache widths each pass ran on and the tokens per block, from the requests' schedules
    alone, equal the batched engine's records."""
    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(batch))]
    emitted = _emitted_alone(target, draft, requests, gamma)
    res = batch_speculative_decode(target, draft, requests, gamma=gamma, max_new_tokens=NEW)
    gs, tokens, full, alive = batch_schedule(emitted, gamma)
    assert gs.tolist() == [b.gamma for b in res.blocks]
    assert tokens.tolist() == [sum(b.emitted) for b in res.blocks]
    assert alive.tolist() == [sum(1 for e in b.emitted if e) for b in res.blocks]
    P = max(r.input_ids.shape[1] for r in requests)
    t_width = P + gs[0] + np.concatenate([[0], np.cumsum(gs[1:-1] + 1)])
    assert t_width.tolist() == [b.target_columns for b in res.blocks[1:]]
    fed = np.where(full[:-1], 2, 1) + gs[1:] - 1
    d_width = P + gs[0] - 1 + np.concatenate([[0], np.cumsum(fed[:-1])])
    assert d_width.tolist() == [b.draft_columns for b in res.blocks[1:]]


def _linear_costs() -> BatchedCosts:
    """ms = a + b·width on two widths (exact for a line), by B 1 and 4."""
    ctx, batch = [0.0, 1000.0], [1, 4]

    def grid(rows, f):
        ms = [[[f(r, c, b) for b in batch] for c in ctx] for r in rows]
        return make_grid(rows, ctx, batch, ms)

    return BatchedCosts(
        target_decode=grid([1], lambda r, c, b: 3.0 + 0.01 * c * b),
        target_verify=grid([2, 4], lambda r, c, b: 2.0 * r + 0.01 * c * b),
        draft_step=grid([1], lambda r, c, b: 1.0 + 0.001 * c * b),
        overhead_ms_per_block=OverheadGrid((1, 3), (1, 4), ((0.5, 2.0), (0.5, 2.0))),
        overhead_ms_per_target_step=(0.2, 0.8),
    )


def test_walk_sums_by_hand():
    """Two requests, γ 3, prompts 10 and 6 (draft prompts 8 and 4): A emits 4,4,1 (9 tokens), B 1,2."""
    cost = _linear_costs()
    emitted = [np.array([4.0, 4.0, 1.0]), np.array([1.0, 2.0])]
    p = price_batch(GridPassCost(None, cost), 3, emitted, [10, 6], [8, 4])
    # blocks: g0 = 3; block 1: max left = 8 -> g 3; block 2: A left 1 -> g 0. B = 2 (between 1 and 4).
    # target width: block 1 at 10 + 3 = 13, block 2 at 13 + 4 = 17. Block 0: A accepted 3 = g (full).
    # draft width: 8 + 3 - 1 = 10 before block 1; block 1 feeds 2 + 2 -> 14 before block 2 (no drafts).
    lerp = lambda v1, v4: v1 + (v4 - v1) / 3  # noqa: E731  (B = 2 between measured 1 and 4)
    draft = sum(lerp(1 + 0.001 * w, 1 + 0.004 * w) for w in (10, 11, 12))
    verify = lerp(8 + 0.13, 8 + 0.52) + lerp(3 + 0.17, 3 + 0.68)  # rows 4 at 13; a target step at 17
    overhead = 2 * lerp(0.5, 2.0)
    assert p.draft_ms == pytest.approx(draft)
    assert p.verify_ms == pytest.approx(verify)
    assert p.overhead_ms == pytest.approx(overhead)
    assert (p.sd_tokens, p.blocks, p.drafts, p.request_blocks) == (4 + 2 + 1, 2, 3, 3)
    # target-only: 9 steps, steps 1..8 on 10..17 columns
    base = sum(lerp(3 + 0.01 * w, 3 + 0.04 * w) for w in range(10, 18))
    assert p.target_ms == pytest.approx(base)
    assert p.target_overhead_ms == pytest.approx(8 * lerp(0.2, 0.8))
    assert p.target_tokens == 8 + 2 and p.target_steps == 8
    assert p.decode_speedup == pytest.approx(
        (base + 8 * lerp(0.2, 0.8)) / 10 / ((draft + verify + overhead) / 7)
    )
    with pytest.raises(SpecsimError, match="batch 5 was not measured"):
        price_batch(GridPassCost(None, cost), 3, emitted * 2 + emitted[:1], [10] * 5, [8] * 5)


def test_target_only_steps_without_a_masked_column_are_priced_unpadded():
    """Prompts of one length: target-only steps price at the unpadded grid until the first request finishes
    (its row feeds masked pads from then on); ragged prompts never; a profile without the grid falls back."""
    cost = _linear_costs()
    fast = replace(
        cost, target_decode_unpadded=replace(cost.target_decode, ms=_scaled(cost.target_decode, 0.5))
    )
    emitted = [np.array([4.0, 4.0, 1.0]), np.array([1.0, 2.0])]  # 9 and 3 tokens
    lerp = lambda v1, v4: v1 + (v4 - v1) / 3  # noqa: E731
    step = [lerp(3 + 0.01 * w, 3 + 0.04 * w) for w in range(10, 18)]  # steps 1..8 on 10..17 columns
    p = price_batch(GridPassCost(None, fast), 3, emitted, [10, 10], [8, 8])
    # steps 1 and 2 run with both rows live (B finishes after its third token, at step 2): unpadded
    assert p.target_ms == pytest.approx(0.5 * sum(step[:2]) + sum(step[2:]))
    assert price_batch(GridPassCost(None, fast), 3, emitted, [10, 6], [8, 4]).target_ms == pytest.approx(
        price_batch(GridPassCost(None, cost), 3, emitted, [10, 6], [8, 4]).target_ms
    )
    assert price_batch(GridPassCost(None, cost), 3, emitted, [10, 10], [8, 8]).target_ms == pytest.approx(
        sum(step)
    )
    assert BatchedCosts.from_json(json.loads(json.dumps(fast.to_json()))) == fast


def test_a_blocks_first_draft_step_is_priced_apart_where_measured():
    """With ``draft_first_step`` the first step of every block is read from it, the others from
    ``draft_step``: the hand sum of test_walk_sums_by_hand with the first step's grid doubled."""
    cost = _linear_costs()
    first = replace(cost, draft_first_step=replace(cost.draft_step, ms=_scaled(cost.draft_step, 2.0)))
    emitted = [np.array([4.0, 4.0, 1.0]), np.array([1.0, 2.0])]
    lerp = lambda v1, v4: v1 + (v4 - v1) / 3  # noqa: E731
    steps = [lerp(1 + 0.001 * w, 1 + 0.004 * w) for w in (10, 11, 12)]
    p = price_batch(GridPassCost(None, first), 3, emitted, [10, 6], [8, 4])
    assert p.draft_ms == pytest.approx(2 * steps[0] + steps[1] + steps[2])
    assert price_batch(GridPassCost(None, cost), 3, emitted, [10, 6], [8, 4]).draft_ms == pytest.approx(
        sum(steps)
    )
    assert BatchedCosts.from_json(json.loads(json.dumps(first.to_json()))) == first


def test_a_sweep_of_one_draft_step_per_block_stores_it_as_the_draft_step():
    """γ = 1 only: every draft step is a block's first, fitted into ``draft_step`` with no first-step grid;
    with γ 1 and 3 the first steps get their own grid and ``draft_step`` holds the later ones."""
    from calibrate.measure.batch_grid_sweep import Samples, batched_costs

    samples = Samples()
    for b in (1, 2):
        for w in range(10, 20):
            samples.passes[("target_decode", 1, b, 8)].append((w, 1.0 + 0.01 * w))
            samples.passes[("target_decode_unpadded", 1, b, 8)].append((w, 0.9 + 0.01 * w))
            for rows in (2, 4):
                samples.passes[("target_verify", rows, b, 8)].append((w, 1.5 + 0.01 * w))
            samples.passes[("draft_first_step", 1, b, 8)].append((w, 0.6 + 0.001 * w))
            samples.passes[("draft_step", 1, b, 8)].append((w, 0.4 + 0.001 * w))
        for g in (0, 1, 3):
            samples.overhead[(g, b)] += [0.1, 0.2]
    one = batched_costs(samples, (1, 2), [1], (8,))
    assert one.draft_first_step is None and one.target_decode_unpadded is not None
    assert one.draft_step.values()[0, 0, 0] == pytest.approx(0.61)
    both = batched_costs(samples, (1, 2), [1, 3], (8,))
    assert both.draft_first_step.values()[0, 0, 0] == pytest.approx(0.61)
    assert both.draft_step.values()[0, 0, 0] == pytest.approx(0.41)
    for b in (1, 2):  # a sweep that did not time the unpadded step (--no-unpadded-step) stores none
        samples.passes.pop(("target_decode_unpadded", 1, b, 8))
    assert batched_costs(samples, (1, 2), [1, 3], (8,)).target_decode_unpadded is None


def _scaled(grid, k):
    return tuple(tuple(tuple(k * x for x in cell) for cell in row) for row in grid.ms)


def test_the_engine_masks_no_column_exactly_where_the_walk_says():
    """Target-only decoding of prompts of one length feeds no masked column until a request ends."""
    target, _ = tiny_pair()
    prompts = [p[:, :6] for p in tiny_prompts(3)]
    ref = batch_target_decode(target, [Request(input_ids=p) for p in prompts], max_new_tokens=NEW)
    eos = ref.tokens[1][4]  # request 1 ends at its 5th token (or earlier, where it emitted eos before)
    seen = []
    forward = PaddedCache.forward

    def spy(self, live, **kw):
        out = forward(self, live, **kw)
        seen.append(bool(self.mask.all()))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PaddedCache, "forward", spy)
        res = batch_target_decode(
            target, [Request(input_ids=p) for p in prompts], max_new_tokens=NEW, eos_token_id=eos
        )
    first_end = min(len(t) for t in res.tokens)
    assert first_end < NEW
    steps = np.arange(1, len(res.blocks))
    assert seen[1:] == (steps < first_end).tolist()


def test_sweep_writes_a_grid_that_round_trips():
    target, draft = tiny_pair()
    models = {
        "target": LoadedModel(target, None, "tiny-target", "causal", "random", "cpu", "float32"),
        "draft": LoadedModel(draft, None, "tiny-draft", "causal", "random", "cpu", "float32"),
    }
    plan = BatchSweepPlan(batch_sizes=(1, 2, 4), gammas=(1, 3), prompt_tokens=(8, 16), new_tokens=8, rounds=1)
    costs, (grid_s, loop_s) = measure_batched(models, plan)
    assert grid_s > 0 and loop_s > 0 and costs.batch_sizes == (1, 2, 4) and costs.server_loop is not None
    assert 0.1 < costs.server_loop.cold_pass_ms_scale < 10.0  # measured (a flushed step over a warm one)
    lean, (_, no_loop) = measure_batched(models, plan, server_loop=False)
    assert no_loop is None and lean.server_loop is None and lean.batch_sizes == costs.batch_sizes
    assert costs.target_verify.rows == (2, 4) and costs.overhead_ms_per_block.gamma == (1, 3)
    again = BatchedCosts.from_json(json.loads(json.dumps(costs.to_json())))
    assert again == costs
    assert all(v > 0 for v in np.ravel(costs.target_decode.values()))
    assert costs.target_decode_unpadded.batch == costs.batch_sizes  # prompts of one length, measured too
    assert costs.draft_first_step.batch == costs.batch_sizes  # a block's first draft step, apart
    assert all(v > 0 for v in np.ravel(costs.target_decode_unpadded.values()))
    bad = costs.to_json() | {"overhead_ms_per_target_step": [0.1]}
    with pytest.raises(SpecsimError, match="overhead_ms_per_target_step: expected 3 values"):
        BatchedCosts.from_json(bad)


@pytest.mark.parametrize(
    "extra, lengths, target_tokens",
    [
        ([], (12, 37, 62), 64),
        (["--request-prompt-lengths", "2", "--request-target-tokens", "16"], (12, 62), 16),
        (["--request-prompt-lengths", "1"], (37,), 64),
        (["--no-unpadded-step"], (12, 37, 62), 64),
    ],
)
def test_the_batched_sweep_is_sized_by_its_flags(extra, lengths, target_tokens):
    """calibrate latency's flags size the batched sweep: prompt lengths from the workload's shortest to its
    longest (contexts less the new tokens), target-only run length from --request-target-tokens."""
    from calibrate.cli.cmd_latency import batch_sweep_plan
    from specsim.cli.main import build_parser

    argv = ["calibrate", "latency", "--preset", "zoo", "--request-batches", "4,1,2", "--out", "p", *extra]
    sweep = batch_sweep_plan(build_parser().parse_args(argv), (10, 126))
    assert sweep.prompt_tokens == lengths and sweep.target_new_tokens == target_tokens
    assert sweep.batch_sizes == (1, 2, 4) and sweep.gammas == (1, 3, 5) and sweep.new_tokens == 24
    assert sweep.unpadded == ("--no-unpadded-step" not in extra)
    # a workload whose prompts all differ in length has no batch without pads: its unpadded step is not timed
    args = build_parser().parse_args(argv)
    assert not batch_sweep_plan(args, (10, 126), workload_tokens=[12, 40, 62]).unpadded
    assert batch_sweep_plan(args, (10, 126), workload_tokens=[12, 40, 40]).unpadded == sweep.unpadded


def test_interleaved_grid_fits_every_round_and_fills_the_sizes_the_check_skipped():
    """The batched sweep of ``check --remeasure-batched``, one round at a time: rounds counted per batch size,
    the sizes a check did not run completed, the server loop's costs measured, and a profile whose batched
    cost is the one fitted from all rounds (the profile's batch sizes and gammas, the new samples' values)."""
    from types import SimpleNamespace

    from calibrate.measure.interleaved_grid import InterleavedGrid
    from specsim.profiles import load_profile

    target, draft = tiny_pair()
    setup = SimpleNamespace(
        target=LoadedModel(target, None, "tiny-target", "causal", "random", "cpu", "float32"),
        draft=LoadedModel(draft, None, "tiny-draft", "causal", "random", "cpu", "float32"),
        requests=[Request(input_ids=p) for p in tiny_prompts(6)],
    )
    profile = load_profile("zoo-cpu-batch")
    old = profile.latency.forward_costs().batched
    grid = InterleavedGrid(profile, setup, seed=3)
    assert grid.plan.batch_sizes == old.batch_sizes and grid.plan.prompt_tokens[-1] == 12
    grid.round((2,))
    grid.round((2,))
    grid.complete(2)
    assert grid.rounds == {2: 2, 1: 2, 4: 2, 8: 2} and grid.seconds > 0
    assert grid.measured_profile().latency.forward_costs().batched.server_loop == old.server_loop
    grid.measure_server_loop()
    new = grid.measured_profile().latency.forward_costs().batched
    assert new.batch_sizes == old.batch_sizes and new.server_loop != old.server_loop
    assert new.overhead_ms_per_block.gamma == old.overhead_ms_per_block.gamma
    assert new.target_decode.context_tokens[-1] > 12 > new.target_decode.context_tokens[0]
    assert grid.measured_profile().acceptance == profile.acceptance
