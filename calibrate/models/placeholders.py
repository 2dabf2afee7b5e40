"""Tokens a model must never emit: a vision-language model's image (and video) placeholder ids.

A LLaVA-style model swaps every placeholder id in its input for image features, so a sampled draft or
target that emits one breaks the next forward (transformers: "Image features and image tokens do not
match"). :func:`forbid_placeholders` sets their logits to −inf at the output head, once per model: every
distribution the engine, the acceptance traces and HF ``generate`` see then excludes them, for target and
draft alike. SD stays lossless against the target (Leviathan et al. 2023, §3): both sides of the
rejection step, and target-only decoding, use the same masked distributions.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER_FIELDS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")
_MARK = "_specsim_forbidden_ids"


def placeholder_ids(config: Any) -> tuple[int, ...]:
    """The placeholder token ids a model config names (``image_token_id``/``image_token_index``, video
    alike)."""
    ids: list[int] = []
    for name in PLACEHOLDER_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0 and value not in ids:
            ids.append(value)
    return tuple(ids)


def forbid_placeholders(model: Any) -> tuple[int, ...]:
    """Mask the placeholder ids out of ``model``'s logits with a forward hook on its output head; idempotent.

    Returns the masked ids (those inside the head's vocabulary; none for a text-only model).
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    config = getattr(model, "config", None)
    if head is None or config is None:
        return ()
    if hasattr(head, _MARK):
        return getattr(head, _MARK)
    vocab = int(head.weight.shape[0])
    ids = tuple(i for i in placeholder_ids(config) if i < vocab)
    setattr(head, _MARK, ids)
    if ids:
        import torch

        index = torch.tensor(ids, dtype=torch.long)

        def mask(_module, _inputs, logits):
            return logits.index_fill(-1, index.to(logits.device), float("-inf"))

        head.register_forward_hook(mask)
    return ids
