"""Drafting kinds a tuning study may choose, as ``specsim serve`` prices them today.

A kind says how the serving simulation prices the drafter and how an engine names it. Today every kind is
a separate draft model (:class:`specsim.serve.roofline_cost.RooflineStepCost`): ``M`` keeps each image's
positions in the draft's prompt (multimodal drafting), ``T`` drops them (text-only drafting, serve's
``--draft-image-tokens 0``); the codes are the drafting methods of ARCHITECTURE.md.

Hook: :func:`drafting_kinds` is where the drafting-kind registry (issue 52: EAGLE heads, MTP, n-gram) adds
its kinds once ``serve`` can price them; ``hardware --list`` shows that registry through
``specsim.hardware.catalog_listing.draft_kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.errors import SpecsimError


@dataclass(frozen=True)
class DraftingKind:
    """One drafting kind: its code, what the draft sees, the draft's positions per image (None: the
    target's) and the engines' names for it (vLLM method, SGLang algorithm, TensorRT-LLM decoding type)."""

    code: str
    description: str
    draft_image_tokens_per_image: int | None
    vllm_method: str = "draft_model"
    sglang_algorithm: str = "STANDALONE"
    trtllm_decoding_type: str = "Draft_Target"


def drafting_kinds() -> dict[str, DraftingKind]:
    """The kinds ``serve`` prices today, by code (the hook for the drafting-kind registry: module
    docstring)."""
    return {
        "M": DraftingKind("M", "a draft model that sees the images (multimodal drafting)", None),
        "T": DraftingKind("T", "a draft model whose prompt drops the images (text-only drafting)", 0),
    }


def drafting_kind(code: str, where: str = "drafting kind") -> DraftingKind:
    """The kind ``code`` names; SpecsimError listing the known codes otherwise."""
    kinds = drafting_kinds()
    if code not in kinds:
        raise SpecsimError(f"{where}: expected a drafting kind in {sorted(kinds)}, got {code!r}")
    return kinds[code]
