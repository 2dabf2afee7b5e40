"""Draft-length policies in the real engine: lossless, block counts equal to their greedy replay from top-k
traces, and equal to HF transformers' assisted generation under the same schedule (target forwards
counted)."""

import numpy as np
import pytest
import torch

from calibrate.drafting import TextDrafter, make_drafter
from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace, target_reference
from calibrate.run.engine import Request, speculative_decode
from specsim.draft_shapes.policies import parse_policy, replay_policy_blocks_per_prompt
from tests.tiny_pair import tiny_pair, tiny_prompts, tiny_zoo

torch.set_num_threads(1)
NEW_TOKENS = 24
# thresholds inside the tiny draft's top-1 range (its 30th-70th percentiles), so the stop bites
POLICIES = (
    "heuristic:2",
    "heuristic:5,max=6",
    "confidence:0.25,gamma=5",
    "confidence:0.3,gamma=3,heuristic",
    "batch:1=2,8=4@8",
    "batch:1=2,8=0@8",
)


@pytest.fixture(scope="module")
def traced():
    target, draft = tiny_pair(seed=0, noise=0.05)
    reqs = [Request(ids, prompt_id=f"p{i}") for i, ids in enumerate(tiny_prompts(n=4, seed=5))]
    pts = [acceptance_trace(target, draft, r, max_new_tokens=NEW_TOKENS, top_k=2) for r in reqs]
    return target, draft, reqs, pts


def test_policy_runs_are_lossless_and_replay_exactly(traced):
    target, draft, reqs, pts = traced
    counts = {}
    for text in POLICIES:
        policy = parse_policy(text)
        runs = [
            speculative_decode(target, TextDrafter(draft), r, gamma=policy, max_new_tokens=NEW_TOKENS)
            for r in reqs
        ]
        assert all(o.tokens == pt.output_tokens for o, pt in zip(runs, pts)), text
        counts[text] = [len(o.blocks) for o in runs]
        np.testing.assert_array_equal(
            counts[text], replay_policy_blocks_per_prompt([pt.trace for pt in pts], policy), err_msg=text
        )
        assert all(b.gamma <= max(policy.gamma, 6) for o in runs for b in o.blocks)
    assert counts["batch:1=2,8=0@8"] == [NEW_TOKENS] * len(reqs)  # γ = 0: plain target steps
    assert (
        len({tuple(v) for v in counts.values()}) >= 4
    )  # the policies behave differently: the test has power


def test_confidence_policy_with_an_ensemble_replays_exactly():
    zoo = tiny_zoo()
    target, req = zoo["target"], zoo["requests"][1]
    kw = dict(max_new_tokens=12)
    ref = target_reference(target, req, **kw)
    trace = drafter_trace(
        target, make_drafter("MT", zoo["draft"], tokenizer=zoo["tok"]), req, reference=ref, top_k=1, **kw
    ).trace
    top1 = np.array([row[0] for row in trace.draft_top_probs])
    policy = parse_policy(f"confidence:{float(np.median(top1)):.4f},gamma=4")
    out = speculative_decode(
        target, make_drafter("MT", zoo["draft"], tokenizer=zoo["tok"]), req, gamma=policy, **kw
    )
    assert out.tokens == ref.tokens
    assert len(out.blocks) == replay_policy_blocks_per_prompt([trace], policy)[0]
    assert any(b.gamma < min(4, 12 - 1) for b in out.blocks[:-2])  # the confidence stop cut some blocks short


@pytest.mark.parametrize(
    "schedule, threshold, ours",
    [
        ("heuristic_transient", 0.0, "heuristic:5"),
        ("constant", 0.25, "confidence:0.25,gamma=5"),
    ],
)
def test_block_counts_equal_hf_assisted_generation(traced, schedule, threshold, ours):
    target, draft, reqs, _ = traced
    calls = []
    hook = target.register_forward_hook(lambda *_: calls.append(1))
    try:
        for r in reqs:
            draft.generation_config.num_assistant_tokens = 5
            draft.generation_config.num_assistant_tokens_schedule = schedule
            draft.generation_config.assistant_confidence_threshold = threshold
            calls.clear()
            hf = target.generate(
                r.input_ids,
                attention_mask=torch.ones_like(r.input_ids),
                assistant_model=draft,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )
            hf_blocks = len(
                calls
            )  # one target forward per assisted-generation round (the first includes prefill)
            out = speculative_decode(
                target, TextDrafter(draft), r, gamma=parse_policy(ours), max_new_tokens=NEW_TOKENS
            )
            assert list(out.tokens) == hf[0, r.input_ids.shape[1] :].tolist()
            assert len(out.blocks) == hf_blocks, (schedule, r.prompt_id)
    finally:
        hook.remove()
