"""Multimodal drafting methods on tiny random LLaVA models: lossless, pooling, ensembles, adaptive weights."""

import numpy as np
import pytest
import torch

from calibrate.drafting import Method, TextDrafter, make_drafter, make_request
from calibrate.drafting.contexts import pool_features
from calibrate.run.engine import Request, speculative_decode, target_decode
from calibrate.run.proposal import Drafter
from calibrate.zoo.zoo_models import IMAGE_TOKENS_PER_IMAGE
from specsim.errors import SpecsimError
from tests.tiny_pair import tiny_zoo

torch.set_num_threads(1)
NEW_TOKENS = 16
METHODS = ("M", "T", "C", "Z", "P16", "P1", "MT", "MC", "MTC", "MTCP4", "MZ", "adaptive:MTC")


@pytest.fixture(scope="module")
def zoo():
    return tiny_zoo()


def _drafter(zoo, method, **kw):
    return make_drafter(method, zoo["draft"], tokenizer=zoo["tok"], captioner=zoo["captioner"], **kw)


def _accepted(out):
    return [b.accepted for b in out.blocks]


def test_every_method_is_lossless_and_records_its_costs(zoo):
    target = zoo["target"]
    for n_images, req in zoo["requests"].items():
        base = target_decode(target, req, max_new_tokens=NEW_TOKENS)
        assert set(base.setup_ms) == {"target_vision_ms"}  # the prefill is fused with the first step
        assert base.blocks[0].target_rows == req.input_ids.shape[1]
        for method in METHODS:
            drafter = _drafter(zoo, method)
            assert isinstance(drafter, Drafter)
            out = speculative_decode(target, drafter, req, gamma=3, max_new_tokens=NEW_TOKENS)
            assert out.tokens == base.tokens, f"{method}, {n_images} images"
            assert out.method == method and drafter.draft_batch_size == len(Method.parse(method).members)
            stages = set(out.setup_ms)
            assert ("draft_vision_ms" in stages) == any(c in method for c in "MP")
            assert ("caption_ms" in stages) == ("C" in method)
    one = zoo["requests"][1]
    assert speculative_decode(target, _drafter(zoo, "M"), one, gamma=3, max_new_tokens=NEW_TOKENS).tau > 1.5


def test_text_only_works_with_a_text_lm_draft(zoo):
    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM(zoo["draft"].config.text_config).eval()
    req = zoo["requests"][2]
    base = target_decode(zoo["target"], req, max_new_tokens=NEW_TOKENS)
    for method in ("T", "TC"):
        d = make_drafter(method, lm, tokenizer=zoo["tok"], captioner=zoo["captioner"])
        assert (
            speculative_decode(zoo["target"], d, req, gamma=4, max_new_tokens=NEW_TOKENS).tokens
            == base.tokens
        )
    with pytest.raises(SpecsimError, match="VLM draft"):
        make_drafter("MT", lm, tokenizer=zoo["tok"])


def test_zero_rows_feed_the_target_prompt_with_zeros_at_its_image_tokens(zoo):
    """Z, as llama.cpp's draft-simple on image input: one zero input row per target image token, the text
    rows the draft's own embeddings, positions contiguous; any LM draft works (no vision tower)."""
    from transformers import LlamaForCausalLM

    from calibrate.drafting.contexts import ZeroRowsContext

    req = zoo["requests"][2]
    ids = req.input_ids[0]
    image = ids == req.image_token_id
    assert int(image.sum()) == 2 * IMAGE_TOKENS_PER_IMAGE
    lm = LlamaForCausalLM(zoo["draft"].config.text_config).eval()
    for draft in (zoo["draft"].eval(), lm):
        ctx = ZeroRowsContext().build(req, draft, {}, "cpu")
        assert ctx.embeds.shape[0] == ids.numel() and ctx.last_id == int(ids[-1])
        assert not ctx.embeds[image].any() and ctx.stages_ms == {}
        torch.testing.assert_close(ctx.embeds[~image], draft.get_input_embeddings()(ids[~image]))
    base = target_decode(zoo["target"], req, max_new_tokens=NEW_TOKENS)
    out = speculative_decode(
        zoo["target"], make_drafter("zero-rows", lm), req, gamma=3, max_new_tokens=NEW_TOKENS
    )
    assert out.tokens == base.tokens and out.method == "Z"
    text = make_request(zoo["tok"], "USER: what is in the box? ASSISTANT:")  # no image: nothing zeroed
    ctx = ZeroRowsContext().build(text, lm, {}, "cpu")
    torch.testing.assert_close(ctx.embeds, lm.get_input_embeddings()(text.input_ids[0]))


def test_pool_features_is_2d_average_pooling():
    feats = torch.randn(2, 64, 5)  # 2 images, 8×8 patches, 5 channels
    grid = feats.reshape(2, 8, 8, 5)
    pooled = pool_features(feats, 16)
    assert pooled.shape == (2, 16, 5)
    manual = grid.reshape(2, 4, 2, 4, 2, 5).mean((2, 4)).reshape(2, 16, 5)  # 2×2 blocks, row-major
    torch.testing.assert_close(pooled, manual)
    torch.testing.assert_close(pool_features(feats, 1)[:, 0], feats.mean(1))
    torch.testing.assert_close(pool_features(feats, 64), feats)
    for bad in (5, 81, 0):
        with pytest.raises(SpecsimError, match="pool"):
            pool_features(feats, bad)


def test_context_lengths_and_left_padding_masks(zoo):
    req = zoo["requests"][2]
    s = req.input_ids.shape[1]
    text_only = zoo["tok"](req.text.replace("<image>", "\n"))["input_ids"]
    d = _drafter(zoo, "MP4T")
    d.prefill(req)
    assert d.context_tokens == [s, s - 2 * (IMAGE_TOKENS_PER_IMAGE - 4), len(text_only)]
    assert d.cache.get_seq_length() == 0  # the prefill is fused with the first draft step
    d.propose(1)
    # the first step fed each row's whole context, right-aligned: pads (0) on the left only
    lengths = torch.tensor(d.context_tokens)
    assert d.mask.sum(1).tolist() == lengths.tolist() and d.pos.tolist() == lengths.tolist()
    cols = d.mask.shape[1]
    for row, n in zip(d.mask, lengths.tolist()):
        assert row[: cols - n].sum() == 0 and row[cols - n :].all()
    assert d.cache.get_seq_length() == cols


def test_single_text_member_equals_the_plain_text_drafter(zoo):
    req = zoo["requests"][1]
    ids = zoo["tok"](req.text.replace("<image>", "\n"), return_tensors="pt")["input_ids"]
    plain = TextDrafter(zoo["draft"])
    plain.prefill(Request(ids))
    ens = _drafter(zoo, "T")
    ens.prefill(req)
    for n_acc in (1, 0, 3):  # also rolls back: keep some drafts, then none, then all (γ = 3)
        a = plain.propose(3)
        b = ens.propose(3)
        assert a.tokens.tolist() == b.tokens.tolist()
        target_tok = (int(a.tokens[n_acc]) + 1) % len(zoo["tok"]) if n_acc < 3 else 7
        plain.accept(n_acc, target_tok)
        ens.accept(n_acc, target_tok)


def test_weights_one_zero_equal_the_first_member(zoo):
    target, req = zoo["target"], zoo["requests"][2]
    kw = dict(gamma=4, max_new_tokens=NEW_TOKENS)
    for method, weights, alone in (("MT", (1, 0), "M"), ("MT", (0, 1), "T"), ("CM", (1, 0), "C")):
        mixed = speculative_decode(target, _drafter(zoo, method, weights=weights), req, **kw)
        assert _accepted(mixed) == _accepted(speculative_decode(target, _drafter(zoo, alone), req, **kw)), (
            method
        )
    assert _accepted(speculative_decode(target, _drafter(zoo, "MT"), req, **kw)) != _accepted(
        speculative_decode(target, _drafter(zoo, "T"), req, **kw)
    )  # the comparison has power


def test_batch_padding_does_not_change_a_members_distribution(zoo):
    req = zoo["requests"][2]
    codes = ("M", "T", "C", "P4")
    for j, code in enumerate(codes):
        weights = [float(i == j) for i in range(len(codes))]  # the batch follows member j's own tokens
        ens, alone = _drafter(zoo, "".join(codes), weights=weights), _drafter(zoo, code)
        ens.prefill(req)
        alone.prefill(req)
        for n_acc in (2, 4, 0):
            a, b = ens.propose(4), alone.propose(4)
            assert a.tokens.tolist() == b.tokens.tolist()
            torch.testing.assert_close(ens.member_probs[:, j], alone.member_probs[:, 0], atol=1e-5, rtol=1e-4)
            ens.accept(n_acc, 5)
            alone.accept(n_acc, 5)


def test_sampled_proposal_reports_the_mixture_it_sampled_from(zoo):
    d = _drafter(zoo, "MTC", weights=(2, 1, 1))
    d.prefill(zoo["requests"][1])
    prop = d.propose(3, temperature=0.7, generator=torch.Generator().manual_seed(0))
    mix = (torch.tensor([0.5, 0.25, 0.25])[None, :, None] * d.member_probs).sum(1)  # [γ, V]
    torch.testing.assert_close(prop.q_probs, mix)
    torch.testing.assert_close(prop.q_probs.sum(-1), torch.ones(3))


def test_adaptive_weights_stay_normalised_and_output_lossless(zoo):
    target = zoo["target"]
    for req in zoo["requests"].values():
        base = target_decode(target, req, max_new_tokens=NEW_TOKENS)
        d = _drafter(zoo, "adaptive:MTC")
        out = speculative_decode(target, d, req, gamma=3, max_new_tokens=NEW_TOKENS)
        assert out.tokens == base.tokens
        w = d.weights
        assert float(w.sum()) == pytest.approx(1.0) and bool((w >= d.floor / 3 - 1e-12).all())
        assert not torch.allclose(w, d.prior)  # the verdicts moved the weights
        assert int(w.argmax()) == 0  # M: the draft is a noisy copy of the target and sees the same images


def test_parse_method_and_bad_inputs(zoo):
    adaptive = Method.parse("adaptive:MTC")
    assert (adaptive.adaptive, adaptive.members) == (True, Method.parse("MTC").members)
    assert [s.code for s in Method.parse("MTCP144").members] == ["M", "T", "C", "P144"]
    assert [s.code for s in Method.parse("pooled(36)").members] == ["P36"]
    assert [s.code for s in Method.parse("text-only").members] == ["T"]
    for bad in ("", "X", "MP", "P0", "adaptive:", "MTx"):
        with pytest.raises(SpecsimError, match="method"):
            Method.parse(bad)
    for bad in ("P5", "MTP99999", "pooled(2)"):  # refused once the models had loaded, naming no --method
        with pytest.raises(SpecsimError, match=r"^--method .*: pooled\(n\) takes n a square number"):
            Method.parse(bad)
    with pytest.raises(SpecsimError, match="weights"):
        _drafter(zoo, "MT", weights=(1, 2, 3))
    with pytest.raises(SpecsimError, match="captioner"):
        make_drafter("C", zoo["draft"], tokenizer=zoo["tok"])
    with pytest.raises(SpecsimError, match="placeholders"):
        make_request(zoo["proc"], "USER: <image> <image> hi ASSISTANT:", [None])


def test_protocol_trace_replays_to_the_engine_for_every_method(zoo):
    from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace
    from specsim.acceptance.replay import replay_blocks_per_prompt

    target, req = zoo["target"], zoo["requests"][2]
    for method in ("M", "T", "MTC", "P4"):
        pt = drafter_trace(target, _drafter(zoo, method), req, max_new_tokens=NEW_TOKENS)
        assert len(pt.trace.match) == NEW_TOKENS and all(0 <= b <= 1 for b in pt.trace.beta)
        for gamma in (2, 5):
            out = speculative_decode(
                target, _drafter(zoo, method), req, gamma=gamma, max_new_tokens=NEW_TOKENS
            )
            assert replay_blocks_per_prompt([pt.trace], gamma)[0] == len(out.blocks), (method, gamma)
    # second implementation: the plain drafter's protocol trace equals the two-forward teacher-forced one
    ids = zoo["tok"](req.text.replace("<image>", "\n"), return_tensors="pt")["input_ids"]
    text_req = Request(ids, prompt_id="t")
    a = drafter_trace(target, TextDrafter(zoo["draft"]), text_req, max_new_tokens=NEW_TOKENS)
    b = acceptance_trace(target, zoo["draft"], text_req, max_new_tokens=NEW_TOKENS)
    assert a.trace.match == b.trace.match
    assert a.trace.beta == pytest.approx(b.trace.beta, abs=1e-4)


def test_adaptive_trace_replays_the_engine_block_by_block(zoo):
    """An adaptive ensemble's weights move per block, so its replay re-runs them
    (specsim.draft_shapes.adaptive): the replayed accepted counts equal the engine's at every γ and under
    draft-length policies (a confidence
    stop reads the mixture's top probability at the block's weights), on 1, 2 and 5 images."""
    from calibrate.measure.acceptance_traces import acceptance_entry, drafter_trace
    from specsim.draft_shapes.adaptive import AdaptiveTrace, adaptive_plan
    from specsim.draft_shapes.draft_plans import draft_plan
    from specsim.draft_shapes.policies import parse_policy
    from specsim.predict.tau_at_gamma import tau_at
    from specsim.profile_format import MethodAcceptance, Trace

    target = zoo["target"]
    for n_images, req in zoo["requests"].items():
        pt = drafter_trace(target, _drafter(zoo, "adaptive:MTC"), req, max_new_tokens=NEW_TOKENS)
        ad = pt.trace.adaptive
        assert isinstance(ad, AdaptiveTrace) and len(ad) == len(pt.trace.match)
        assert Trace.from_json(pt.trace.to_json(), "t") == pt.trace
        for gamma in (1, 2, 3, 5, parse_policy("heuristic:2,max=4"), parse_policy("confidence:0.6,gamma=4")):
            out = speculative_decode(
                target, _drafter(zoo, "adaptive:MTC"), req, gamma=gamma, max_new_tokens=NEW_TOKENS
            )
            plan = adaptive_plan(ad, gamma, NEW_TOKENS)
            assert [int(e) - 1 for e in plan.emitted] == _accepted(out), (n_images, gamma)
            assert [int(g) for g in plan.drafts] == [b.gamma for b in out.blocks], (n_images, gamma)
            assert (draft_plan(gamma, pt.trace, NEW_TOKENS).start == plan.start).all()
            if isinstance(gamma, int):  # predict's τ column reads the same replay
                entry = MethodAcceptance(
                    method="adaptive:MTC", scenario="s", images_per_prompt=n_images, traces=(pt.trace,)
                )
                assert tau_at(entry, gamma)[0] == pytest.approx(len(out.tokens) / len(out.blocks))
                # and the entry calibrate stores records the engine's blocks, not the per-token match
                stored = acceptance_entry([pt], method="adaptive:MTC", scenario="s", reference_gamma=gamma)
                assert (
                    list(stored.accepted_histogram)
                    == np.bincount(_accepted(out), minlength=gamma + 1).tolist()
                )
                assert stored.tau == pytest.approx(len(out.tokens) / len(out.blocks))
    assert (
        _drafter(zoo, "MTC") is not None
        and drafter_trace(target, _drafter(zoo, "MTC"), zoo["requests"][1], max_new_tokens=4).trace.adaptive
        is None
    )
