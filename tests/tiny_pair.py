"""Tiny seeded target/draft pairs for the engine, acceptance and replay tests (no downloads).

The draft is the target with seeded Gaussian noise on every weight, so it agrees with the target
often but not always; a large ``initializer_range`` makes logits peaky, so argmax near-ties (where
batched and incremental fp32 forwards could disagree in the last bits) do not occur in practice.
"""

from __future__ import annotations

import copy

import torch


def tiny_config(vocab: int = 96, hidden: int = 48, layers: int = 2, init: float = 0.3):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=init,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def tiny_pair(seed: int = 0, noise: float = 0.1, vocab: int = 96, init: float = 0.3):
    """(target, draft) fp32 eval-mode LlamaForCausalLM; draft = target + noise·N(0, 1)·|w|-scale."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    target = LlamaForCausalLM(tiny_config(vocab=vocab, init=init)).eval()
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=gen))
    return target, draft


def tiny_prompts(n: int = 6, vocab: int = 96, seed: int = 0, min_len: int = 3, max_len: int = 12):
    """``n`` random prompts of token ids [1, S] with S in [min_len, max_len]."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=gen).tolist()
    return [torch.randint(0, vocab, (1, s), generator=gen) for s in lengths]


def tiny_zoo():
    """Tokenizer/processor on a small zoo-task corpus, a random tiny LLaVA target, a noisy-copy draft, a
    captioner, and one request with 1, 2 and 5 images (story frames = a multi-image request)."""
    from calibrate.drafting import HFCaptioner, make_request
    from calibrate.zoo import task as zt
    from calibrate.zoo.tokenizer import train_tokenizer, wrap
    from calibrate.zoo.zoo_models import build_model, make_processor, zoo_config

    examples = zt.make_split("test", 12, seed=0)
    tok = wrap(train_tokenizer(zt.corpus(examples), vocab_size=400))
    proc = make_processor(tok)
    cfg = zoo_config("draft", len(tok), "tiny")
    cfg.initializer_range = cfg.text_config.initializer_range = 0.3  # peaky logits: no argmax near-ties
    target = build_model(cfg, seed=0).eval()
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=gen))
    captioner = HFCaptioner(
        build_model(zoo_config("captioner", len(tok), "tiny"), seed=2).eval(),
        proc,
        prompt=zt.CAPTION_PROMPT,
        max_new_tokens=5,
    )
    by_images = {}
    for ex in examples:
        by_images.setdefault(
            ex.images_per_prompt, make_request(proc, ex.prompt, ex.images(), prompt_id=ex.uid)
        )
    assert sorted(by_images) == [1, 2, 5]
    return dict(tok=tok, proc=proc, target=target, draft=draft, captioner=captioner, requests=by_images)
