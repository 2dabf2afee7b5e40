"""Synthetic acceptance in the engines (one request, the static batch, the server loop).

- given a real run's own teacher-forced trace as the schedule, a synthetic run's blocks, passes and cache
  widths (and tokens) equal the real run's;
- given any other schedule, each request's blocks are the trace replay's (:func:`greedy_plan`), which is what
  the prediction prices;
- the acceptance step under a schedule caps at g and emits the target's argmax after the accepted drafts.
"""

import dataclasses

import numpy as np
import pytest
import torch

from calibrate.drafting import TextDrafter
from calibrate.measure.acceptance_traces import acceptance_trace
from calibrate.run.batch_engine import batch_speculative_decode
from calibrate.run.engine import speculative_decode
from calibrate.run.proposal import Request
from calibrate.run.server_loop import serve_loop
from calibrate.run.synthetic_acceptance import SyntheticAcceptance, scripted_accept
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.errors import SpecsimError
from tests.test_server_loop import FakeClock
from tests.tiny_pair import tiny_pair, tiny_prompts

NEW = 16
GAMMAS = (1, 3, 5)


@pytest.fixture(scope="module")
def world():
    """The tiny pair, 5 ragged requests and the schedule of their own traces (NEW + max γ positions, so a
    block drafting past a request's last token reads what the real run would have accepted there)."""
    torch.manual_seed(0)
    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(5))]
    match = {
        r.prompt_id: acceptance_trace(target, draft, r, max_new_tokens=NEW + max(GAMMAS)).trace.match
        for r in requests
    }
    assert 0 < np.mean([m for ms in match.values() for m in ms]) < 1  # both decisions occur
    return target, draft, requests, SyntheticAcceptance(source="own traces", match=match)


def _untimed(record) -> dict:
    """A record's fields without its timings (ms)."""
    return {k: v for k, v in dataclasses.asdict(record).items() if not k.endswith("_ms")}


@pytest.mark.parametrize("gamma", GAMMAS)
def test_one_request_with_its_own_trace_runs_as_the_real_run(world, gamma):
    target, draft, requests, own = world
    accepted = set()
    for r in requests:
        real = speculative_decode(target, TextDrafter(draft), r, gamma=gamma, max_new_tokens=NEW)
        synth = speculative_decode(
            target, TextDrafter(draft), r, gamma=gamma, max_new_tokens=NEW, acceptance=own
        )
        assert synth.tokens == real.tokens
        assert [_untimed(b) for b in synth.blocks] == [_untimed(b) for b in real.blocks]
        accepted |= {b.accepted for b in real.blocks}
    assert len(accepted) >= min(gamma + 1, 3)  # rejections, partial and full acceptance are exercised


@pytest.mark.parametrize("gamma", GAMMAS)
def test_static_batch_with_its_own_traces_runs_as_the_real_batch(world, gamma):
    target, draft, requests, own = world
    real = batch_speculative_decode(target, draft, requests, gamma=gamma, max_new_tokens=NEW)
    synth = batch_speculative_decode(target, draft, requests, gamma=gamma, max_new_tokens=NEW, acceptance=own)
    assert synth.tokens == real.tokens
    assert [_untimed(b) for b in synth.blocks] == [_untimed(b) for b in real.blocks]
    assert len({b.target_columns for b in real.blocks}) == len(real.blocks)  # widths grow block by block


@pytest.mark.parametrize("gamma", (2, 4))
def test_server_loop_with_its_own_traces_serves_as_the_real_loop(world, gamma):
    target, draft, requests, own = world
    arrivals = [0.0, 0.0, 0.04, 0.09, 0.2]
    runs = []
    for acceptance in (None, own):
        clock = FakeClock()
        runs.append(
            serve_loop(
                target, draft, requests, arrivals, gamma=gamma, max_new_tokens=NEW, max_num_seqs=3,
                compact_columns=2, clock=clock, sleep=clock.sleep, acceptance=acceptance,
            )
        )  # fmt: skip
    real, synth = runs
    assert [r.tokens for r in synth.requests] == [r.tokens for r in real.requests]
    assert [_untimed(s) | {"start_s": 0, "end_s": 0} for s in synth.steps] == [
        _untimed(s) | {"start_s": 0, "end_s": 0} for s in real.steps
    ]
    assert len({s.width for s in real.steps}) > 3 and max(s.decoding for s in real.steps) == 3


def _drawn(requests, tau: float, gamma: int, seed: int) -> SyntheticAcceptance:
    from specsim.acceptance.theory import alpha_from_tau

    alpha = alpha_from_tau(tau, gamma)
    rates = {r.prompt_id: np.full(NEW + gamma, alpha) for r in requests}
    return SyntheticAcceptance.drawn(f"tau:{tau}@{gamma}", rates, np.random.default_rng(seed))


@pytest.mark.parametrize("gamma, tau", [(2, 1.4), (4, 3.6)])
def test_any_schedule_runs_as_its_replay(world, gamma, tau):
    """A drawn schedule (not the pair's acceptance): every request's blocks, alone and in the batch, are the
    trace replay's; the tokens are not the target's greedy output any more."""
    target, draft, requests, _ = world
    schedule = _drawn(requests, tau, gamma, seed=3)
    batch = batch_speculative_decode(
        target, draft, requests, gamma=gamma, max_new_tokens=NEW, acceptance=schedule
    )
    for i, r in enumerate(requests):
        plan = greedy_plan(schedule.traces([r.prompt_id], NEW)[0].match, gamma, NEW)
        one = speculative_decode(
            target, TextDrafter(draft), r, gamma=gamma, max_new_tokens=NEW, acceptance=schedule
        )
        assert [b.emitted for b in one.blocks] == plan.emitted.tolist()
        assert [b.gamma for b in one.blocks] == plan.drafts.tolist()
        assert [b.emitted[i] for b in batch.blocks if b.emitted[i]] == plan.emitted.tolist()
        assert len(one.tokens) == NEW
    # the same seed draws the same schedule; another seed another one
    assert _drawn(requests, tau, gamma, 3) == schedule != _drawn(requests, tau, gamma, 4)


def test_scripted_accept_caps_at_gamma_and_emits_the_argmax_after():
    logits = torch.zeros(3, 4, 10)  # B = 3, g = 3
    logits[0, 0, 7] = logits[1, 2, 5] = logits[2, 3, 9] = 1.0
    n, nxt = scripted_accept(logits, [0, 2, 8])
    assert n.tolist() == [0, 2, 3] and nxt.tolist() == [7, 5, 9]


def test_schedule_lookups_and_refusals(world):
    target, draft, requests, own = world
    s = SyntheticAcceptance(source="x", match={"a": (1, 1, 0, 1)})
    assert [s.accepted("a", 0, g) for g in (1, 2, 3)] == [1, 2, 2]
    assert s.accepted("a", 3, 4) == 1 and s.accepted("a", 9, 2) == 0  # past the end: rejected
    with pytest.raises(SpecsimError, match="no schedule for prompt 'b'"):
        s.accepted("b", 0, 1)
    with pytest.raises(SpecsimError, match="prompt 'a' has 4 positions, the run emits 6"):
        s.traces(["a"], 6)
    with pytest.raises(SpecsimError, match="temperature: expected 0, got 1.0"):
        speculative_decode(
            target, TextDrafter(draft), requests[0], gamma=2, max_new_tokens=4, temperature=1.0,
            acceptance=own,
        )  # fmt: skip
