"""Sampled SD with a VLM never emits an image placeholder (issue: the LLaVA target's verify failed with
"Image features and image tokens do not match" when a sampled draft proposed one)."""

import copy

import pytest
import torch

from calibrate.drafting import make_drafter
from calibrate.models.loaded_model import LoadedModel
from calibrate.models.placeholders import forbid_placeholders, placeholder_ids
from calibrate.run.engine import speculative_decode, target_decode
from tests.tiny_pair import tiny_zoo

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def zoo():
    return tiny_zoo()


def _favour_placeholder(model, image_id: int):
    """A copy whose output head strongly prefers the image placeholder (unmasked: sampled almost surely)."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        head = m.get_output_embeddings()
        head.weight[image_id] = 50.0 * head.weight.abs().max() * torch.sign(head.weight.sum(0))
        if getattr(head, "bias", None) is not None:
            head.bias[image_id] = 1e4
    return m


def test_placeholder_ids_read_the_config(zoo):
    ids = placeholder_ids(zoo["target"].config)
    assert ids and ids[0] == zoo["target"].config.image_token_id
    assert placeholder_ids(zoo["target"].config.text_config) == ()


def test_sampled_sd_with_a_placeholder_loving_draft_runs_and_never_emits_it(zoo):
    target = zoo["target"]
    image_id = int(target.config.image_token_id)
    req = zoo["requests"][2]
    draft = _favour_placeholder(zoo["draft"], image_id)
    gen = torch.Generator().manual_seed(0)
    unmasked = make_drafter("M", draft, tokenizer=zoo["tok"], captioner=zoo["captioner"])
    unmasked.prefill(req)
    q = unmasked.propose(1, temperature=1.0, generator=gen)
    assert int(q.tokens[0]) == image_id  # the bias works: without the mask the draft proposes the placeholder
    with pytest.raises(
        ValueError, match="(?i)image"
    ):  # ... and the target cannot verify it (the bug this fixes)
        speculative_decode(
            target,
            make_drafter("M", draft, tokenizer=zoo["tok"], captioner=zoo["captioner"]),
            req,
            gamma=2,
            max_new_tokens=8,
            temperature=1.0,
            generator=torch.Generator().manual_seed(0),
        )
    assert forbid_placeholders(draft) == (image_id,)
    assert forbid_placeholders(draft) == (image_id,)  # idempotent: one hook only
    forbid_placeholders(target)
    for seed in range(3):
        drafter = make_drafter("M", draft, tokenizer=zoo["tok"], captioner=zoo["captioner"])
        out = speculative_decode(
            target,
            drafter,
            req,
            gamma=3,
            max_new_tokens=12,
            temperature=1.0,
            generator=torch.Generator().manual_seed(seed),
        )
        assert image_id not in out.tokens and len(out.tokens) == 12
        base = target_decode(
            target, req, max_new_tokens=12, temperature=1.0, generator=torch.Generator().manual_seed(seed)
        )
        assert image_id not in base.tokens


def test_loaded_models_are_masked(zoo):
    model = copy.deepcopy(zoo["target"])
    LoadedModel(
        model=model, tokenizer=None, name="t", kind="vlm", weights="random", device="cpu", dtype="float32"
    )
    req = zoo["requests"][1]
    with torch.no_grad():
        logits = model(**{"input_ids": req.input_ids, **req.target_kwargs}).logits
    assert torch.isneginf(logits[..., int(model.config.image_token_id)]).all()
    assert torch.isfinite(logits[..., 0]).all()
