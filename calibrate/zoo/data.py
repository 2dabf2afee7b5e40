"""Encoding zoo examples into LLaVA training batches: token ids with image placeholders, labels, pixels.

A training sequence is ``<s> prompt(<image>×16 per image) answer </s>``; the loss covers the answer and
``</s>`` only. Batches are length-bucketed and capped by a token budget, so a 5-image story (~440 tokens)
and a 1-image question (~110 tokens) cost similar time per step. Fact tokens (answer tokens overlapping
an image-fact word) get a larger loss weight, so the image signal is not drowned by generic wording.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibrate.zoo.scenes import Scene, render
from calibrate.zoo.task import CAPTION_PROMPT, FACT_RE, IMAGE_TOKEN, Example, caption
from calibrate.zoo.tokenizer import EOS_ID, PAD_ID
from calibrate.zoo.zoo_models import IMAGE_TOKENS_PER_IMAGE

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Encoded:
    """One sequence: ``input_ids`` (answer and eos included), where the answer starts, its scenes, fact
    tokens."""

    input_ids: tuple[int, ...]
    answer_start: int
    scenes: tuple[Scene, ...]
    fact_positions: tuple[int, ...] = ()  # indices into input_ids of tokens that state an image fact


def encode_prompt(prompt: str, tokenizer: Any) -> list[int]:
    """Prompt ids with ``<s>`` and each ``<image>`` expanded to 16 image tokens (as ``LlavaProcessor``
    does)."""
    return tokenizer(prompt.replace(IMAGE_TOKEN, IMAGE_TOKEN * IMAGE_TOKENS_PER_IMAGE)).input_ids


def encode(prompt: str, answer: str, scenes: tuple[Scene, ...], tokenizer: Any) -> Encoded:
    """Prompt + answer + ``</s>`` as one training sequence."""
    p = encode_prompt(prompt, tokenizer)
    enc = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
    spans = [m.span() for m in FACT_RE.finditer(answer)]
    facts = tuple(
        len(p) + k
        for k, (a, b) in enumerate(enc["offset_mapping"])
        if any(a < end and b > start for start, end in spans)
    )
    return Encoded(tuple(p + enc["input_ids"] + [EOS_ID]), len(p), scenes, facts)


def encode_examples(examples: list[Example], tokenizer: Any) -> list[Encoded]:
    """Task examples → sequences (the target's and draft's training data)."""
    return [encode(e.prompt, e.answer, e.scenes, tokenizer) for e in examples]


def encode_captions(examples: list[Example], tokenizer: Any) -> list[Encoded]:
    """One caption request per distinct scene of ``examples`` (the captioner's training data)."""
    seen: dict[Scene, None] = {}
    for e in examples:
        seen.update(dict.fromkeys(e.scenes))
    return [encode(CAPTION_PROMPT, " " + caption(s), (s,), tokenizer) for s in seen]


def pixel_values(scenes: tuple[Scene, ...] | list[Scene], image_processor: Any):
    """Rendered and normalised images, ``[n_images, 3, 64, 64]`` float32 (the processor's own transform)."""
    return image_processor(images=[render(s) for s in scenes], return_tensors="pt")["pixel_values"]


def collate(items: list[Encoded], image_processor: Any, fact_weight: float = 1.0) -> dict[str, Any]:
    """Right-padded batch: input_ids, attention_mask, labels (−100 outside answers) [B, S], pixel_values,
    loss_weights [B, S] (1 on answer tokens, ``fact_weight`` on fact tokens, 0 elsewhere)."""
    import torch

    width = max(len(e.input_ids) for e in items)
    ids = torch.full((len(items), width), PAD_ID, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE_INDEX)
    mask = torch.zeros_like(ids)
    weights = torch.zeros(ids.shape, dtype=torch.float32)
    for b, e in enumerate(items):
        n = len(e.input_ids)
        ids[b, :n] = torch.tensor(e.input_ids)
        labels[b, e.answer_start : n] = ids[b, e.answer_start : n]
        mask[b, :n] = 1
        weights[b, e.answer_start : n] = 1.0
        weights[b, list(e.fact_positions)] = fact_weight
    scenes = [s for e in items for s in e.scenes]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": labels,
        "pixel_values": pixel_values(scenes, image_processor),
        "loss_weights": weights,
    }


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch without ``labels`` and ``loss_weights`` (what the model's forward takes)."""
    return {k: v for k, v in batch.items() if k not in ("labels", "loss_weights")}


def batch_indices(
    lengths: list[int], tokens_per_batch: int, rng: np.random.Generator, pool_batches: int = 50
) -> Iterator[list[int]]:
    """Endless length-bucketed batches of indices, each with at most ``tokens_per_batch`` padded tokens.

    Shuffle, sort pools of ~``pool_batches`` batches by length, cut by the budget, shuffle the batches.
    """
    n = len(lengths)
    mean_len = max(1.0, float(np.mean(lengths)))
    pool = max(1, int(pool_batches * tokens_per_batch / mean_len))
    while True:
        order = rng.permutation(n)
        for start in range(0, n, pool):
            chunk = sorted(order[start : start + pool].tolist(), key=lambda i: lengths[i])
            batches, cur = [], []
            for i in chunk:
                if cur and (len(cur) + 1) * max(lengths[j] for j in cur + [i]) > tokens_per_batch:
                    batches.append(cur)
                    cur = []
                cur.append(i)
            batches.append(cur)
            for k in rng.permutation(len(batches)):
                yield batches[k]
