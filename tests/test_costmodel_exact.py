"""The cost model reproduces a synthetic cost function exactly: calibration on tiny models with a clock that
only moves inside forward passes (by a known function of rows, context and batch), then the context walk
over the replayed blocks equals what the engine spent, ms for ms, for target-only and speculative runs."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate.drafting import EnsembleDrafter, TextDrafter  # noqa: E402
from calibrate.drafting.contexts import TextOnlyContext  # noqa: E402
from calibrate.measure import latency_plan as L  # noqa: E402
from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace  # noqa: E402
from calibrate.models.loaded_model import LoadedModel  # noqa: E402
from calibrate.run.engine import Request, speculative_decode, target_decode  # noqa: E402
from specsim.costs.grid_pass_cost import GridPassCost  # noqa: E402
from specsim.draft_shapes.block_plans import greedy_plan  # noqa: E402
from specsim.predict.chain_costs import sd_request_cost, target_request_cost  # noqa: E402
from tests.tiny_pair import tiny_pair, tiny_prompts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
NEW_TOKENS = 20


def synthetic_ms(role: str, rows: int, context: int, batch: int) -> float:
    """A cost that depends on all three axes and is linear in context (what linear interpolation is exact
    for)."""
    if role == "target":
        return 2.0 + 0.5 * rows + 0.01 * context + 0.002 * rows * context
    return 0.4 + 0.1 * rows + 0.003 * context + 0.25 * (batch - 1) + 0.001 * batch * context


class SyntheticClock:
    """Seconds that advance only when a hooked forward pass runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def hook(self, role: str):
        def pre(module, args, kwargs):
            x = kwargs.get("input_ids")
            x = kwargs.get("inputs_embeds") if x is None else x
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            context = 0 if cache is None else cache.get_seq_length()
            self.now += synthetic_ms(role, x.shape[1], context, x.shape[0]) / 1e3

        return pre


@pytest.fixture(scope="module")
def world():
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
    prompts = tiny_prompts(n=4, seed=3, min_len=4, max_len=12)
    return target, draft, loaded, clock, prompts


def _calibrate(loaded, clock, monkeypatch, tmp_path, gammas, batches):
    monkeypatch.setattr(time, "perf_counter", clock)
    plan = L.LatencyPlan(
        contexts_tokens=(2, 40),
        verify_context_tokens=40,
        gammas=gammas,
        batch_sizes=batches,
        prefill_tokens=(1, 24),
        warmup=0,
        min_repeats=2,
        max_repeats=2,
        prefill_warmup=0,
        prefill_min_repeats=1,
        prefill_max_repeats=1,
        sentinel_steps=1,
    )
    path, _ = L.calibrate_latency(loaded, plan, tmp_path / "p.json", progress=False)
    from specsim.profiles import load_profile

    return load_profile(str(path)).latency.cost_model


def test_grid_points_are_the_synthetic_cost(world, monkeypatch, tmp_path):
    *_, loaded, clock, _ = world
    cost = _calibrate(loaded, clock, monkeypatch, tmp_path, gammas=(1, 3), batches=(1, 2))
    for c_i, c in enumerate(cost.target_verify.context_tokens):
        for r_i, r in enumerate(cost.target_verify.rows):
            assert cost.target_verify.ms[r_i][c_i][0] == pytest.approx(synthetic_ms("target", r, c, 1))
    for c_i, c in enumerate(cost.draft_next.context_tokens):
        for b_i, b in enumerate(cost.draft_next.batch):
            assert cost.draft_next.ms[0][c_i][b_i] == pytest.approx(synthetic_ms("draft", 1, c, b))
    assert cost.draft_first.ms[1][0][1] == pytest.approx(synthetic_ms("draft", 2, 2, 2))
    assert cost.overhead_ms_per_target_step == pytest.approx(
        0.0, abs=1e-9
    )  # the clock moves only in forwards
    assert not cost.host_check.contended


@pytest.mark.parametrize("batch", [1, 2])
def test_walk_reproduces_the_engine_exactly(world, monkeypatch, tmp_path, batch):
    target, draft, loaded, clock, prompts = world
    gammas = (1, 2, 4)
    cost = _calibrate(loaded, clock, monkeypatch, tmp_path, gammas=gammas, batches=(1, batch))

    def drafter():
        return TextDrafter(draft) if batch == 1 else EnsembleDrafter(draft, [TextOnlyContext()] * batch)

    for i, ids in enumerate(prompts):
        req = Request(ids, prompt_id=f"p{i}")
        P = ids.shape[1]
        base = target_decode(target, req, max_new_tokens=NEW_TOKENS)
        pred = target_request_cost(GridPassCost(cost), prompt_tokens=P, new_tokens=NEW_TOKENS)
        assert pred.total_ms == pytest.approx(sum(b.block_ms for b in base.blocks), rel=1e-9)
        assert pred.prefill_ms == pytest.approx(base.blocks[0].verify_ms, rel=1e-9)
        trace = (
            acceptance_trace(target, draft, req, max_new_tokens=NEW_TOKENS)
            if batch == 1
            else drafter_trace(target, drafter(), req, max_new_tokens=NEW_TOKENS)
        ).trace
        for g in gammas:
            out = speculative_decode(target, drafter(), req, gamma=g, max_new_tokens=NEW_TOKENS)
            plan = greedy_plan(trace.match, g)
            # the plan is the engine's schedule, block for block
            assert plan.start.tolist() == list(np.cumsum([0] + [b.emitted for b in out.blocks])[:-1])
            assert plan.drafts.tolist() == [b.gamma for b in out.blocks]
            assert plan.first_rows[1:].tolist() == [b.draft_first_rows for b in out.blocks[1:]]
            pred = sd_request_cost(
                GridPassCost(cost), plan, target_prompt_tokens=P, draft_prompt_tokens=P, batch=batch
            )
            assert not pred.extrapolated
            assert pred.draft_ms + pred.draft_prefill_ms == pytest.approx(
                sum(b.draft_ms for b in out.blocks), rel=1e-9
            )
            assert pred.prefill_ms + pred.verify_ms == pytest.approx(
                sum(b.verify_ms for b in out.blocks), rel=1e-9
            )
            assert pred.total_ms == pytest.approx(sum(b.block_ms for b in out.blocks), rel=1e-9)
