"""The units of a latency calibration (:class:`Task`, planned by
:func:`calibrate.measure.latency_plan.plan_tasks`) and the timed call of a prefill, vision or caption unit
(:func:`task_call`) on random inputs of the model's real shapes (:mod:`calibrate.models.loaded_model`).
Sweeps, sentinels and sampling units are timed by their own modules;
:func:`calibrate.measure.latency_plan.run_tasks` dispatches every unit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from calibrate.models.loaded_model import (
    LoadedModel,
    image_token_count,
    random_input_ids,
    random_pixel_values,
)
from calibrate.models.placeholders import placeholder_ids
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class Task:
    """One unit of measurement; ``key`` names it in the partial file, ``weight`` is its rough relative cost.

    ``what``: "sweep" (engine-shaped cycles at ``context_tokens``, many grid points), "tree-sweep"
    (tree-engine blocks there, :mod:`calibrate.measure.tree_grid_sweep`), "sentinel" (target-only steps at the
    first context, at the start and at the end), "prefill" (``new_tokens`` prompt rows at ``batch``),
    "vision", "caption" or "sampling" (:mod:`calibrate.measure.sampling_sweep`)."""

    key: str
    role: str  # "pair" | "target" | "draft" | "captioner"
    what: str
    batch: int = 1
    context_tokens: int = 0
    new_tokens: int = 1
    weight: float = 1.0


def task_call(task: Task, m: LoadedModel, caption_tokens: int, generator) -> Callable:
    """The timed call of a prefill, vision or caption task (a caption of ``caption_tokens`` tokens)."""
    model = m.model
    if task.what == "prefill":
        ids = random_input_ids(m, task.batch, task.new_tokens, generator)
        kw = _padded_mask_kwargs(task.batch, task.new_tokens, model.device) if task.batch > 1 else {}
        return lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw)
    if task.what == "vision":
        pixels = random_pixel_values(m, task.batch, generator)  # batch: images in the one call
        return lambda: model.get_image_features(pixel_values=pixels)
    if task.what == "caption":
        return _caption_fn(m, caption_tokens, generator)
    raise SpecsimError(f"unknown task kind {task.what!r}")


def _padded_mask_kwargs(batch: int, tokens: int, device) -> dict:
    """Attention mask and position ids of an in-batch ensemble's first pass: rows after the first start
    with a pad column (left padding), so the timed call takes the ensemble drafter's padded-mask path."""
    import torch

    mask = torch.ones(batch, tokens, dtype=torch.long, device=device)
    mask[1:, 0] = 0
    return {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}


def _caption_fn(m: LoadedModel, tokens: int, generator) -> Callable:
    """Greedy generation of exactly ``tokens`` caption tokens for one image (prompt: image + 16 text
    tokens)."""
    import torch

    if m.kind != "vlm":
        raise SpecsimError(f"captioner {m.name!r} is a text-only model (expected a vision-language model)")
    img_id = (placeholder_ids(m.model.config) or (0,))[0]
    text = random_input_ids(m, 1, 16, generator)
    image = torch.full((1, image_token_count(m.model.config)), img_id, dtype=text.dtype, device=text.device)
    ids = torch.cat([image, text], dim=1)
    pixels = random_pixel_values(m, 1, generator)
    mask = torch.ones_like(ids)
    return lambda: m.model.generate(
        input_ids=ids,
        attention_mask=mask,
        pixel_values=pixels,
        do_sample=False,
        max_new_tokens=tokens,
        min_new_tokens=tokens,
        pad_token_id=0,
    )
