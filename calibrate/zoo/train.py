"""Train the zoo (target, draft, captioner) on CPU: ``python -m calibrate.zoo.train --out DIR``.

Order: tokenizer; the target's vision tower (:mod:`calibrate.zoo.vision`); target; draft (optionally
distilled, loss = (1−w)·CE + w·KL(target‖draft), Hinton et al. 2015); captioner. Step counts from
``--steps`` or planned from ``--minutes``, written to the model card. AdamW, linear warm-up then cosine
decay, gradient clipping at 1. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.zoo.data import Encoded, batch_indices, collate, encode_captions, encode_examples, model_inputs
from calibrate.zoo.vision import optimizer_step

# Fractions of the --minutes budget; the rest goes to data, evaluation and I/O.
# The target gets the most: its difference tasks (spot, IEdit, story) are the last skills it learns.
SHARES: dict[str, float] = {"vision": 0.09, "target": 0.6, "draft": 0.18, "captioner": 0.04}
PROBE_STEPS = 3


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; ``steps`` (role -> steps) overrides the ``minutes`` plan for that role."""

    out: Path
    minutes: float = 45.0
    threads: int = 2
    seed: int = 0
    size: str = "full"
    n_train: int = 20000
    n_validation: int = 100
    n_test: int = 200
    n_eval: int = 100
    tokens_per_batch: int = 2048
    lr: float = 2e-3
    target_lr: float = 7e-4
    distill: float = 0.5
    fact_weight: float = 4.0
    caption_warmup: float = 0.1
    steps: dict[str, int] = field(default_factory=dict)
    progress: bool = True


@dataclass
class RoleLog:
    """What training one role did: steps, wall time (s), per-step losses, final validation loss."""

    role: str
    steps: int = 0
    seconds: float = 0.0
    probe_seconds_per_step: float = 0.0
    losses: list[float] = field(default_factory=list)
    validation_loss: float = float("nan")

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(1, self.steps)


def lr_at(step: int, total_steps: int, peak: float) -> float:
    """Linear warm-up over min(30, total/10) steps, then cosine decay to 10% of ``peak``."""
    warm = max(1, min(30, total_steps // 10))
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total_steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def _loss(model: Any, batch: dict, teacher: Any, distill: float):
    """Weighted cross-entropy on answer tokens (weights from ``loss_weights``), mixed with the weighted
    KL(teacher‖model) when a teacher is given."""
    import torch
    import torch.nn.functional as F

    inputs = model_inputs(batch)
    logits = model(**inputs).logits[:, :-1]  # [B, S-1, V] predicting tokens 1..S-1
    labels, w = batch["labels"][:, 1:], batch["loss_weights"][:, 1:]
    ce = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")  # [B, S-1]
    loss = (ce * w).sum() / w.sum()
    if teacher is None or distill <= 0.0:
        return loss
    with torch.no_grad():
        t_logp = F.log_softmax(teacher(**inputs).logits[:, :-1], dim=-1)
    kl = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="none").sum(
        -1
    )  # [B, S-1]
    return (1.0 - distill) * loss + distill * (kl * w).sum() / w.sum()


def _probe(model: Any, data: list[Encoded], processor: Any, cfg: TrainConfig, teacher: Any) -> float:
    """Seconds per training step (forward + backward, no update), median of a few steps on own batches."""
    it = batch_indices(
        [len(e.input_ids) for e in data], cfg.tokens_per_batch, np.random.default_rng(cfg.seed + 99)
    )
    times = []
    for _ in range(PROBE_STEPS):
        t0 = time.perf_counter()
        batch = collate([data[i] for i in next(it)], processor.image_processor, cfg.fact_weight)
        _loss(model, batch, teacher, cfg.distill).backward()
        times.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return float(np.median(times))


def validation_loss(model: Any, data: list[Encoded], processor: Any, tokens_per_batch: int) -> float:
    """Mean answer-token cross-entropy over ``data`` (nats)."""
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(data), 8):
            batch = collate(data[i : i + 8], processor.image_processor)
            n = int((batch["labels"][:, 1:] != -100).sum())
            total += float(model(**model_inputs(batch), labels=batch["labels"]).loss) * n
            count += n
    model.train()
    return total / max(1, count)


def train_role(
    role: str,
    model: Any,
    data: list[Encoded],
    val: list[Encoded],
    processor: Any,
    cfg: TrainConfig,
    teacher: Any = None,
    warmup_data: list[Encoded] | None = None,
) -> RoleLog:
    """Train ``model`` in place on ``data``; steps from ``cfg.steps[role]`` or the time budget.

    ``warmup_data`` (captions, nearly all fact tokens) replaces ``data`` for the first ``cfg.caption_warmup``
    of the steps: the new projector first learns to put the frozen tower's attributes into words.
    Peak learning rate ``cfg.target_lr`` for the target, ``cfg.lr`` otherwise: the 3× wider target decoder
    needs a lower one (measured after 1500 steps: validation loss 0.038 at 7e-4 vs 0.050 at 2e-3, and
    "how many" answers 18/18 vs 12/18 correct).
    """
    import torch
    from tqdm.auto import tqdm

    log = RoleLog(role)
    model.train()
    log.probe_seconds_per_step = _probe(model, data, processor, cfg, teacher)
    total = cfg.steps.get(role) or max(
        PROBE_STEPS, int(cfg.minutes * 60 * SHARES[role] / log.probe_seconds_per_step)
    )
    peak = cfg.target_lr if role == "target" else cfg.lr
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=peak, betas=(0.9, 0.98), weight_decay=0.01)
    it = batch_indices(
        [len(e.input_ids) for e in data], cfg.tokens_per_batch, np.random.default_rng(cfg.seed)
    )
    n_warm = int(cfg.caption_warmup * total) if warmup_data else 0
    warm_it = batch_indices(
        [len(e.input_ids) for e in warmup_data or data],
        cfg.tokens_per_batch,
        np.random.default_rng(cfg.seed + 1),
    )
    bar = tqdm(range(total), desc=f"train {role}", disable=not cfg.progress, mininterval=1.0)
    t0 = time.perf_counter()
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, peak)
        items = [warmup_data[i] for i in next(warm_it)] if step < n_warm else [data[i] for i in next(it)]
        loss = _loss(model, collate(items, processor.image_processor, cfg.fact_weight), teacher, cfg.distill)
        log.losses.append(optimizer_step(opt, loss, params))
        bar.set_postfix(loss=f"{np.mean(log.losses[-20:]):.3f}", refresh=False)
    log.seconds, log.steps = time.perf_counter() - t0, total
    log.validation_loss = validation_loss(model, val, processor, cfg.tokens_per_batch)
    return log


def _pretrain_vision(model: Any, processor: Any, cfg: TrainConfig) -> RoleLog:
    """Supervised attribute pre-training of the target's vision tower (see :mod:`calibrate.zoo.vision`)."""
    from calibrate.zoo.vision import pretrain_vision, probe_seconds_per_step

    log = RoleLog("vision")
    tower = model.model.vision_tower
    log.probe_seconds_per_step = probe_seconds_per_step(tower, processor.image_processor)
    steps = cfg.steps.get("vision") or max(
        PROBE_STEPS, int(cfg.minutes * 60 * SHARES["vision"] / log.probe_seconds_per_step)
    )
    t0 = time.perf_counter()
    log.losses = pretrain_vision(
        tower, processor.image_processor, steps, np.random.default_rng([cfg.seed, 7]), progress=cfg.progress
    )
    log.seconds, log.steps = time.perf_counter() - t0, steps
    return log


def copy_vision_tower(src: Any, dst: Any, freeze: bool = True) -> None:
    """Load ``src``'s trained vision tower into ``dst`` (same config), frozen by default."""
    dst.model.vision_tower.load_state_dict(src.model.vision_tower.state_dict())
    for p in dst.model.vision_tower.parameters():
        p.requires_grad_(not freeze)


def run(cfg: TrainConfig) -> dict[str, Any]:
    """The whole pipeline; returns the summary written to the model card."""
    import torch

    from calibrate.zoo import card
    from calibrate.zoo.task import corpus, make_splits
    from calibrate.zoo.tokenizer import train_tokenizer, wrap
    from calibrate.zoo.zoo_models import ROLES, build_model, make_processor, save_zoo_model, zoo_config

    torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    splits = make_splits(cfg.seed, cfg.n_train, cfg.n_validation, cfg.n_test)
    processor = make_processor(wrap(train_tokenizer(corpus(splits["train"]))))
    tok = processor.tokenizer
    train, val = encode_examples(splits["train"], tok), encode_examples(splits["validation"], tok)
    captions = encode_captions(splits["train"], tok), encode_captions(splits["validation"], tok)
    models, logs = {}, {}
    for k, role in enumerate(ROLES):
        models[role] = build_model(zoo_config(role, len(tok), cfg.size), seed=cfg.seed * 10 + k)
        if role == "target":
            logs["vision"] = _pretrain_vision(models[role], processor, cfg)
            # Frozen afterwards, as LLaVA keeps its CLIP tower frozen: training it at the decoder's learning
            # rate wipes out the attribute features before the decoder has learnt to read them.
            for p in models[role].model.vision_tower.parameters():
                p.requires_grad_(False)
        else:
            copy_vision_tower(models["target"], models[role])
        data, held = captions if role == "captioner" else (train, val)
        teacher = models["target"].eval() if role == "draft" and cfg.distill > 0 else None
        warm = captions[0] if role == "target" else None
        logs[role] = train_role(role, models[role], data, held, processor, cfg, teacher, warm)
        models[role].eval()
        save_zoo_model(models[role], processor, cfg.out / role)
    summary = card.summarise(cfg, splits, models, logs, processor)
    summary["total_seconds"] = time.perf_counter() - t_start
    card.write_outputs(cfg, summary, logs)
    return summary


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(prog="python -m calibrate.zoo.train", description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", type=Path, required=True, help="output directory (target/, draft/, captioner/, card)"
    )
    p.add_argument(
        "--minutes", type=float, default=45.0, help="wall-clock budget for training all three (min)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="seed of data, initialisation and batch order")
    p.add_argument("--size", choices=("full", "tiny"), default="full", help="model sizes (tiny: tests)")
    p.add_argument("--n-train", type=int, default=20000, help="training examples")
    p.add_argument("--n-validation", type=int, default=100, help="validation examples (validation loss)")
    p.add_argument(
        "--n-eval", type=int, default=100, help="held-out test examples used for the card's accuracy"
    )
    p.add_argument("--tokens-per-batch", type=int, default=2048, help="padded tokens per batch")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of the draft and captioner")
    p.add_argument("--target-lr", type=float, default=7e-4, help="peak learning rate of the target")
    p.add_argument(
        "--distill", type=float, default=0.5, help="weight w of KL(target‖draft) in the draft's loss"
    )
    p.add_argument(
        "--fact-weight", type=float, default=4.0, help="loss weight of image-fact tokens (others 1)"
    )
    p.add_argument(
        "--caption-warmup",
        type=float,
        default=0.1,
        help="fraction of the target's steps trained on captions first",
    )
    p.add_argument(
        "--steps",
        action="append",
        default=[],
        metavar="ROLE=N",
        help="fixed step count for a stage (vision, target, draft, captioner); overrides --minutes",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    for name in (
        "minutes",
        "threads",
        "n_train",
        "n_validation",
        "n_eval",
        "tokens_per_batch",
        "lr",
        "target_lr",
    ):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')}: expected a positive number, got {getattr(a, name)}")
    if not 0.0 <= a.distill <= 1.0:
        p.error(f"--distill: expected a weight in [0, 1], got {a.distill}")
    if not 0.0 <= a.caption_warmup < 1.0:
        p.error(f"--caption-warmup: expected a fraction in [0, 1), got {a.caption_warmup}")
    steps = {}
    for s in a.steps:
        role, _, n = s.partition("=")
        if role not in SHARES or not n.isdigit() or int(n) < 1:
            p.error(f"--steps: expected ROLE=N with ROLE in {sorted(SHARES)} and N ≥ 1, got {s!r}")
        steps[role] = int(n)
    return TrainConfig(
        out=a.out,
        minutes=a.minutes,
        threads=a.threads,
        seed=a.seed,
        size=a.size,
        n_train=a.n_train,
        n_validation=a.n_validation,
        n_eval=a.n_eval,
        tokens_per_batch=a.tokens_per_batch,
        lr=a.lr,
        target_lr=a.target_lr,
        distill=a.distill,
        steps=steps,
        fact_weight=a.fact_weight,
        caption_warmup=a.caption_warmup,
        progress=not a.no_progress,
    )


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_args(argv))
    print(
        f"wrote {summary['out']} in {summary['total_seconds'] / 60:.1f} min; "
        + ", ".join(f"{r}: {m['accuracy']['all']:.0%}" for r, m in summary["models"].items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
