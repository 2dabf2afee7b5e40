"""The tree grids, and the tree and policy walks, reproduce a synthetic cost exactly (as
test_costmodel_exact.py does for chains): calibration with a clock that moves only inside forward passes, by a
known function of rows, context and batch; then the walk over each prompt's replayed blocks equals what the
tree engine and the policy-driven chain engine spent, ms for ms, on the text drafter and on an in-batch
ensemble."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate.drafting import EnsembleDrafter, TextDrafter, tree_drafting  # noqa: E402
from calibrate.drafting.contexts import TextOnlyContext  # noqa: E402
from calibrate.measure import latency_plan as L  # noqa: E402
from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace  # noqa: E402
from calibrate.models.loaded_model import LoadedModel  # noqa: E402
from calibrate.run.engine import Request, speculative_decode  # noqa: E402
from calibrate.run.tree_engine import tree_decode  # noqa: E402
from specsim.costs.grid_pass_cost import GridPassCost  # noqa: E402
from specsim.draft_shapes.draft_plans import policy_plan, tree_plan  # noqa: E402
from specsim.draft_shapes.policies import parse_policy  # noqa: E402
from specsim.draft_shapes.trees import parse_tree  # noqa: E402
from specsim.predict.chain_costs import sd_request_cost  # noqa: E402
from specsim.predict.tree_costs import tree_request_cost  # noqa: E402
from specsim.profiles import load_profile  # noqa: E402
from tests.test_costmodel_exact import SyntheticClock, synthetic_ms  # noqa: E402
from tests.tiny_pair import tiny_pair, tiny_prompts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
NEW_TOKENS = 20
TREES = ("2,2", "chain:3")  # level passes of 1 row on two contexts and of 2 rows: the line fit is exact
POLICIES = ("heuristic:2,max=4", "confidence:0.5,gamma=4")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    target, draft = tiny_pair(seed=0, noise=0.05)
    clock = SyntheticClock()
    target.register_forward_pre_hook(clock.hook("target"), with_kwargs=True)
    draft.register_forward_pre_hook(clock.hook("draft"), with_kwargs=True)
    loaded = {
        role: LoadedModel(
            model=m, tokenizer=None, name=role, kind="causal", weights="random", device="cpu", dtype="float32"
        )
        for role, m in (("target", target), ("draft", draft))
    }
    plan = L.LatencyPlan(
        contexts_tokens=(2, 40),
        verify_context_tokens=40,
        gammas=(1, 2, 4),
        batch_sizes=(1, 2),
        prefill_tokens=(1, 24),
        warmup=0,
        min_repeats=2,
        max_repeats=2,
        prefill_warmup=0,
        prefill_min_repeats=1,
        prefill_max_repeats=1,
        sentinel_steps=1,
        trees=TREES,
    )
    real = time.perf_counter
    time.perf_counter = clock
    try:
        path, _ = L.calibrate_latency(
            loaded, plan, tmp_path_factory.mktemp("tree") / "p.json", progress=False
        )
    finally:
        time.perf_counter = real
    cost = load_profile(str(path)).latency.cost_model
    return target, draft, clock, cost, tiny_prompts(n=4, seed=3, min_len=4, max_len=12)


def test_tree_grid_points_are_the_synthetic_cost(world):
    *_, cost, _ = world
    tc = cost.tree
    assert (
        tc.trees == ("chain:1", "chain:3", "2,2") and tc.verify.rows == (2, 4, 7) and tc.draft.rows == (1, 2)
    )
    for c_i, c in enumerate(tc.verify.context_tokens):
        for r_i, r in enumerate(tc.verify.rows):
            assert tc.verify.ms[r_i][c_i][0] == pytest.approx(synthetic_ms("target", r, c, 1))
    assert tc.draft.context_tokens == (3.0, 41.0) and tc.draft.batch == (1, 2)
    for r_i, r in enumerate(tc.draft.rows):
        for c_i, c in enumerate(tc.draft.context_tokens):
            for b_i, b in enumerate(tc.draft.batch):
                assert tc.draft.ms[r_i][c_i][b_i] == pytest.approx(synthetic_ms("draft", r, c, b))
    assert tc.overhead_ms_per_block.gamma == (1, 3, 6)
    assert np.allclose(tc.overhead_ms_per_block.ms, 0.0, atol=1e-9)  # the clock moves only in forwards


def _drafter(draft, batch):
    return TextDrafter(draft) if batch == 1 else EnsembleDrafter(draft, [TextOnlyContext()] * batch)


def _traces(target, draft, req, batch):
    if batch == 1:
        return acceptance_trace(target, draft, req, max_new_tokens=NEW_TOKENS, top_k=4).trace
    return drafter_trace(target, _drafter(draft, batch), req, max_new_tokens=NEW_TOKENS, top_k=4).trace


@pytest.mark.parametrize("batch", [1, 2])
def test_tree_and_policy_walks_reproduce_the_engines_exactly(world, monkeypatch, batch):
    target, draft, clock, cost, prompts = world
    monkeypatch.setattr(time, "perf_counter", clock)
    roots = 0
    for i, ids in enumerate(prompts):
        req = Request(ids, prompt_id=f"p{i}")
        P = ids.shape[1]
        trace = _traces(target, draft, req, batch)
        for spec in TREES:
            out = tree_decode(
                target, tree_drafting(_drafter(draft, batch)), req, tree=spec, max_new_tokens=NEW_TOKENS
            )
            plan = tree_plan(trace.draft_rank, parse_tree(spec), NEW_TOKENS)
            # the plan is the engine's schedule, block for block (root rows included)
            assert [b.emitted for b in plan.steps] == [b.emitted for b in out.blocks], spec
            assert [b.tree.n if b.tree else 0 for b in plan.steps] == [b.gamma for b in out.blocks]
            assert [b.root_rows for b in plan.steps[1:] if b.tree] == [
                b.draft_first_rows for b in out.blocks[1:] if b.gamma
            ]
            roots += sum(b.root_rows == 2 for b in plan.steps)
            pred = tree_request_cost(
                GridPassCost(cost), plan, target_prompt_tokens=P, draft_prompt_tokens=P, batch=batch
            )
            assert not pred.extrapolated
            assert pred.prefill_ms == pytest.approx(out.setup_ms["target_prefill_ms"], rel=1e-9)
            assert pred.draft_ms + pred.draft_prefill_ms == pytest.approx(
                sum(b.draft_ms for b in out.blocks), rel=1e-9
            )
            assert pred.verify_ms == pytest.approx(sum(b.verify_ms for b in out.blocks), rel=1e-9)
            assert pred.total_ms == pytest.approx(out.decode_ms + out.setup_ms["target_prefill_ms"], rel=1e-9)
        for spec in POLICIES:
            out = speculative_decode(
                target, _drafter(draft, batch), req, gamma=parse_policy(spec), max_new_tokens=NEW_TOKENS
            )
            plan = policy_plan(trace, parse_policy(spec), NEW_TOKENS)
            assert plan.drafts.tolist() == [b.gamma for b in out.blocks], spec
            pred = sd_request_cost(
                GridPassCost(cost), plan, target_prompt_tokens=P, draft_prompt_tokens=P, batch=batch
            )
            assert pred.total_ms == pytest.approx(out.decode_ms, rel=1e-9), spec
    assert roots > 0  # 2-row root passes (a block ending on a leaf) occur, so their pricing is tested
