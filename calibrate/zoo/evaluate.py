"""Held-out evaluation of zoo models: greedy answers, image-fact accuracy, caption accuracy.

An answer is correct when it states exactly the reference's image facts in order
(:func:`calibrate.zoo.task.facts_correct`); generic wording may differ.
"""

from __future__ import annotations

from typing import Any

from calibrate.zoo.scenes import Scene, caption, render
from calibrate.zoo.task import CAPTION_PROMPT, Example, facts_correct, text_only_prompt


def generate(model: Any, processor: Any, prompt: str, images: list, max_new_tokens: int = 80) -> str:
    """Greedy continuation of ``prompt`` (with its images) up to ``</s>``, decoded without special tokens."""
    import torch

    inputs = processor(text=prompt, images=images, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def fact_accuracy(
    model: Any, processor: Any, examples: list[Example], progress: Any = None, text_only: bool = False
) -> dict[str, float]:
    """Fraction of ``examples`` whose greedy answer states the image facts correctly, overall and per task.

    ``text_only``: images dropped, placeholders replaced by newlines (how much the facts need the image).
    """
    hits: dict[str, list[bool]] = {}
    for e in examples:
        prompt, images = (text_only_prompt(e.prompt), None) if text_only else (e.prompt, e.images())
        ok = facts_correct(generate(model, processor, prompt, images), e)
        hits.setdefault(e.task, []).append(ok)
        if progress is not None:
            progress.update(1)
    out = {task: sum(v) / len(v) for task, v in sorted(hits.items())}
    out["all"] = sum(sum(v) for v in hits.values()) / max(1, len(examples))
    return out


def caption_accuracy(
    model: Any, processor: Any, scenes: list[Scene], progress: Any = None
) -> dict[str, float]:
    """Fraction of ``scenes`` whose greedy caption equals the reference caption exactly."""
    hits = 0
    for s in scenes:
        hits += generate(model, processor, CAPTION_PROMPT, [render(s)], max_new_tokens=16).strip() == caption(
            s
        )
        if progress is not None:
            progress.update(1)
    return {"caption": hits / max(1, len(scenes)), "all": hits / max(1, len(scenes))}
