"""Supervised pre-training of the target's vision tower on scene attributes (before LLaVA training).

Four linear heads on the image tokens the projector sees (``hidden_states[-1][:, 1:]``) classify colour,
shape and count from the patch tokens' mean and side from their concatenation; the heads are thrown away
afterwards. Like LLaVA's pre-trained CLIP tower, but trained here. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calibrate.zoo.scenes import COLOURS, SHAPES, SIDES, Scene, random_scene

_CLASSES = {"colour": list(COLOURS), "shape": list(SHAPES), "count": [1, 2, 3, 4], "side": list(SIDES)}


def _targets(scenes: list[Scene]):
    import torch

    return {k: torch.tensor([v.index(getattr(s, k)) for s in scenes]) for k, v in _CLASSES.items()}


_CONCATENATED = ("side",)  # heads that read the concatenated patch tokens; the others read their mean


def _features(tower: Any, pixels: Any):
    """The patch tokens of the last layer in grid order, [B, tokens, hidden] (CLS dropped, as LLaVA's
    "default")."""
    return tower(pixel_values=pixels, output_hidden_states=True).hidden_states[-1][:, 1:]


def _head_input(feats: Any, attribute: str):
    """What ``attribute``'s head reads: the concatenated tokens [B, tokens·hidden] or their mean
    [B, hidden]."""
    return feats.flatten(1) if attribute in _CONCATENATED else feats.mean(1)


def pretrain_vision(
    tower: Any,
    image_processor: Any,
    steps: int,
    rng: np.random.Generator,
    *,
    batch_images: int = 64,
    lr: float = 2e-3,
    progress: bool = True,
) -> list[float]:
    """Train ``tower`` (a CLIPVisionModel) in place on freshly drawn scenes; returns per-step losses."""
    import torch
    from tqdm.auto import tqdm

    from calibrate.zoo.data import pixel_values

    tokens = (tower.config.image_size // tower.config.patch_size) ** 2
    width = lambda k: tower.config.hidden_size * (tokens if k in _CONCATENATED else 1)  # noqa: E731
    heads = torch.nn.ModuleDict({k: torch.nn.Linear(width(k), len(v)) for k, v in _CLASSES.items()})
    params = list(tower.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    losses = []
    tower.train()
    for step in tqdm(range(steps), desc="pretrain vision", disable=not progress, mininterval=1.0):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / steps))
        scenes = [random_scene(rng) for _ in range(batch_images)]
        feats = _features(tower, pixel_values(scenes, image_processor))
        loss = sum(
            torch.nn.functional.cross_entropy(heads[k](_head_input(feats, k)), y)
            for k, y in _targets(scenes).items()
        )
        losses.append(optimizer_step(opt, loss, params))
    tower.eval()
    return losses


def probe_seconds_per_step(
    tower: Any, image_processor: Any, batch_images: int = 64, repeats: int = 3
) -> float:
    """Median seconds of one forward + backward pre-training step (no update; for planning step counts)."""
    import time

    from calibrate.zoo.data import pixel_values

    rng = np.random.default_rng(12345)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _features(
            tower, pixel_values([random_scene(rng) for _ in range(batch_images)], image_processor)
        ).sum().backward()
        times.append(time.perf_counter() - t0)
    tower.zero_grad(set_to_none=True)
    return float(np.median(times))


def optimizer_step(opt, loss, params, max_grad_norm: float = 1.0) -> float:
    """One step of ``opt`` on ``loss`` with gradients clipped to ``max_grad_norm``; returns the loss."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    opt.step()
    return float(loss.detach())
