"""The batched speculative-decoding engine is lossless: every request's greedy output equals target-only
decoding of that request alone (the single-request engine), at B = 1..8, ragged prompts, fixed γ, for a
text pair, a tiny LLaVA with 1-, 2- and 5-image requests, and the shipped zoo's trained LLaVA pair
(multimodal and text-only drafting). Batched target-only decoding is checked the same way."""

import pytest
import torch

from calibrate.drafting.contexts import MultimodalContext, TextOnlyContext
from calibrate.run.batch_engine import PaddedCache, batch_speculative_decode, batch_target_decode
from calibrate.run.engine import target_decode
from calibrate.run.proposal import Request
from specsim.errors import SpecsimError
from tests.tiny_pair import tiny_pair, tiny_prompts, tiny_zoo

NEW_TOKENS = 20


@pytest.fixture(scope="module")
def text_world():
    target, draft = tiny_pair()
    requests = [Request(input_ids=p, prompt_id=f"p{i}") for i, p in enumerate(tiny_prompts(8))]
    assert len({r.input_ids.shape[1] for r in requests}) > 3  # ragged
    alone = [target_decode(target, r, max_new_tokens=NEW_TOKENS).tokens for r in requests]
    return target, draft, requests, alone


@pytest.mark.parametrize("batch", range(1, 9))
def test_text_batches_are_lossless(text_world, batch):
    target, draft, requests, alone = text_world
    for gamma in (1, 3, 5):
        out = batch_speculative_decode(
            target, draft, requests[:batch], gamma=gamma, max_new_tokens=NEW_TOKENS
        )
        assert out.tokens == tuple(alone[:batch]), gamma
        # every block's accepted drafts and emitted tokens add up to each request's output
        assert [sum(b.emitted[i] for b in out.blocks) for i in range(batch)] == [NEW_TOKENS] * batch
    base = batch_target_decode(target, requests[:batch], max_new_tokens=NEW_TOKENS)
    assert base.tokens == tuple(alone[:batch]) and len(base.blocks) == NEW_TOKENS


def test_requests_end_at_their_own_eos(text_world):
    """A request that stops early (EOS) keeps its place, masked; the others go on to their limit."""
    target, draft, requests, alone = text_world
    eos = alone[2][5]  # the 6th token of request 2 ends it (and any other request emitting it)
    single = [target_decode(target, r, max_new_tokens=NEW_TOKENS, eos_token_id=eos).tokens for r in requests]
    assert len(single[2]) <= 6 and max(len(s) for s in single) == NEW_TOKENS
    out = batch_speculative_decode(
        target, draft, requests, gamma=4, max_new_tokens=NEW_TOKENS, eos_token_id=eos
    )
    assert out.tokens == tuple(single)
    assert all(b.emitted[2] == 0 for b in out.blocks[len(out.blocks) - 1 :])


def test_rejected_drafts_are_masked_per_row():
    """Rollback by masking: the columns of each row's rejected drafts stop counting, per row."""
    target, _ = tiny_pair()
    cache = PaddedCache(target, 2, target.device)
    live = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    with torch.inference_mode():
        cache.forward(live, keep=1, input_ids=torch.tensor([[0, 5, 6, 7], [1, 2, 3, 4]]))
    assert cache.pos.tolist() == [3, 4]
    cache.reject(torch.tensor([2, 4]))
    assert cache.mask.tolist() == [[0, 1, 0, 0], [1, 1, 1, 1]] and cache.pos.tolist() == [1, 4]


def test_bad_batches_are_refused(text_world):
    target, draft, requests, _ = text_world
    with pytest.raises(SpecsimError, match="gamma: expected an integer >= 1"):
        batch_speculative_decode(target, draft, requests, gamma=0, max_new_tokens=4)
    with pytest.raises(SpecsimError, match="at least one request"):
        batch_target_decode(target, [], max_new_tokens=4)
    with pytest.raises(SpecsimError, match="one context"):
        batch_speculative_decode(
            target, draft, requests, gamma=2, max_new_tokens=4, members=[TextOnlyContext(), TextOnlyContext()]
        )


@pytest.fixture(scope="module")
def zoo_world():
    z = tiny_zoo()
    requests = [z["requests"][k] for k in (1, 2, 5)]
    return z, (requests * 3)[:8]


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 8])
def test_tiny_llava_batches_with_images_are_lossless(zoo_world, batch):
    z, requests = zoo_world
    eos, pad = z["tok"].eos_token_id, z["tok"].pad_token_id or 0
    alone = [target_decode(z["target"], r, max_new_tokens=16, eos_token_id=eos).tokens for r in requests]
    for members in ([MultimodalContext()], [TextOnlyContext(tokenizer=z["tok"])]):
        out = batch_speculative_decode(
            z["target"],
            z["draft"],
            requests[:batch],
            gamma=3,
            max_new_tokens=16,
            members=members,
            pad_id=pad,
            eos_token_id=eos,
        )
        assert out.tokens == tuple(alone[:batch]), members[0].code
    base = batch_target_decode(z["target"], requests[:batch], max_new_tokens=16, pad_id=pad, eos_token_id=eos)
    assert base.tokens == tuple(alone[:batch])


def test_the_shipped_zoo_pair_batched_with_1_2_and_5_images():
    """The trained zoo target and draft on held-out prompts with 1, 2 and 5 images, batched 4 at a time."""
    from calibrate.drafting import make_request
    from calibrate.zoo import weights_dir
    from calibrate.zoo.zoo_models import load_zoo_model
    from calibrate.zoo.zoo_prompts import select_examples

    torch.set_num_threads(1)
    target, proc = load_zoo_model(weights_dir("target"))
    draft, _ = load_zoo_model(weights_dir("draft"))
    examples = select_examples()[:4]
    assert sorted({e.images_per_prompt for e in examples}) == [1, 2, 5]
    requests = [make_request(proc, e.prompt, e.images(), prompt_id=e.uid) for e in examples]
    eos, pad = proc.tokenizer.eos_token_id, proc.tokenizer.pad_token_id or 0
    alone = [target_decode(target, r, max_new_tokens=24, eos_token_id=eos).tokens for r in requests]
    for members in ([MultimodalContext()], [TextOnlyContext(tokenizer=proc.tokenizer)]):
        out = batch_speculative_decode(
            target, draft, requests, gamma=4, max_new_tokens=24, members=members, pad_id=pad, eos_token_id=eos
        )
        assert out.tokens == tuple(alone), members[0].code
        assert sum(sum(b.accepted) for b in out.blocks) > 0  # the trained draft is accepted at all


@pytest.mark.slow
def test_the_reference_pair_batched_is_lossless():
    """Qwen2.5-Coder 1.5B target with its 0.5B draft (real weights, downloaded from PyPI once) on the
    reference prompts, ragged, batched 1..8."""
    from calibrate.models import loading as M
    from calibrate.workload.prompt_sets import encode, load_prompts

    target, draft = M.load_pair("qwen2.5-coder-0.5b-1.5b", threads=2, progress=False)
    requests = [Request(encode(target.tokenizer, p), prompt_id=p.id) for p in load_prompts("reference")[:8]]
    alone = [target_decode(target, r, max_new_tokens=24).tokens for r in requests]
    for batch in (1, 2, 4, 8):
        out = batch_speculative_decode(target, draft, requests[:batch], gamma=4, max_new_tokens=24)
        assert out.tokens == tuple(alone[:batch]), batch
