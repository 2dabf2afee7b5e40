"""Supervised pre-training of the target's vision tower on scene attributes (before LLaVA training).

A random vision tower gives the decoder nothing to read, and learning vision only through next-token loss
is slow (the decoder first learns the text prior and ignores the image). Four linear heads on the image
tokens the projector sees (``hidden_states[-1][:, 1:]``, concatenated) classify colour, shape, count and side;
the heads are thrown away afterwards. Like LLaVA's use of a pre-trained CLIP tower, but trained here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calibrate.zoo.scenes import COLOURS, SHAPES, SIDES, Scene, random_scene

_CLASSES = {"colour": list(COLOURS), "shape": list(SHAPES), "count": [1, 2, 3, 4], "side": list(SIDES)}


def _targets(scenes: list[Scene]):
    import torch

    return {k: torch.tensor([v.index(getattr(s, k)) for s in scenes]) for k, v in _CLASSES.items()}


def _features(tower: Any, pixels: Any):
    """The patch tokens of the last layer, concatenated in grid order, [B, tokens·hidden] (CLS dropped, as
    LLaVA's "default"). Concatenated, not averaged: a mean is blind to where the shapes are (side)."""
    return tower(pixel_values=pixels, output_hidden_states=True).hidden_states[-1][:, 1:].flatten(1)


def pretrain_vision(tower: Any, image_processor: Any, steps: int, rng: np.random.Generator, *,
                    batch_images: int = 64, lr: float = 2e-3, progress: bool = True) -> list[float]:
    """Train ``tower`` (a CLIPVisionModel) in place on freshly drawn scenes; returns per-step losses."""
    import torch
    from tqdm.auto import tqdm

    from calibrate.zoo.data import pixel_values

    tokens = (tower.config.image_size // tower.config.patch_size) ** 2
    hidden = tower.config.hidden_size * tokens
    heads = torch.nn.ModuleDict({k: torch.nn.Linear(hidden, len(v)) for k, v in _CLASSES.items()})
    params = list(tower.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    losses = []
    tower.train()
    for step in tqdm(range(steps), desc="pretrain vision", disable=not progress, mininterval=1.0):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / steps))
        scenes = [random_scene(rng) for _ in range(batch_images)]
        feats = _features(tower, pixel_values(scenes, image_processor))
        loss = sum(torch.nn.functional.cross_entropy(heads[k](feats), y) for k, y in _targets(scenes).items())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    tower.eval()
    return losses


def probe_seconds_per_step(tower: Any, image_processor: Any, batch_images: int = 64, repeats: int = 3) -> float:
    """Median seconds of one forward + backward pre-training step (no update; for planning step counts)."""
    import time

    from calibrate.zoo.data import pixel_values

    rng = np.random.default_rng(12345)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _features(tower, pixel_values([random_scene(rng) for _ in range(batch_images)], image_processor)).sum().backward()
        times.append(time.perf_counter() - t0)
    tower.zero_grad(set_to_none=True)
    return float(np.median(times))
