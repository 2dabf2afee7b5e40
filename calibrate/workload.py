"""A workload as the models see it: the token lengths of a prompt set's requests (to size latency grids)."""

from __future__ import annotations

from dataclasses import replace

from calibrate import models as M
from calibrate.drafting import IMAGE_PLACEHOLDER
from calibrate.prompts import encode, load_prompts


def prompt_lengths(prompt_set: str, target: M.LoadedModel) -> tuple[list[int], list[int]]:
    """(target prompt tokens, shortest draft prompt tokens) per prompt of ``prompt_set``.

    The target sees each image as its run of visual tokens; the shortest draft context drops the images
    (text-only drafting). Without a tokenizer (random weights) a prompt costs one token per UTF-8 byte,
    as ``calibrate`` encodes it then.
    """
    tok = target.tokenizer or getattr(target.processor, "tokenizer", None)
    per_image = M.image_token_count(target.model.config) if target.kind == "vlm" else 0
    targets, drafts = [], []
    for p in load_prompts(prompt_set):
        text = p.text.replace(IMAGE_PLACEHOLDER, "\n")
        n = encode(tok, replace(p, text=text)).shape[1] if tok is not None else len(text.encode("utf-8"))
        images = p.text.count(IMAGE_PLACEHOLDER)
        targets.append(int(n + images * per_image))
        drafts.append(int(n))
    return targets, drafts
