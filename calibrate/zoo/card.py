"""Model card, loss-curve plot and training log for a zoo run (``MODEL_CARD.md``, ``loss_curves.png``)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import numpy as np

from specsim.jsonio import write_json_atomic, write_text_atomic


def summarise(cfg: Any, splits: dict, models: dict, logs: dict, processor: Any) -> dict[str, Any]:
    """Parameters, FLOPs, steps, times and held-out accuracy per model (evaluation runs here)."""
    import torch
    from tqdm.auto import tqdm

    from calibrate.zoo.evaluate import caption_accuracy, fact_accuracy
    from calibrate.zoo.zoo_models import decoder_flops_per_token, parameter_counts

    test = splits["test"][: cfg.n_eval]
    scenes = list(dict.fromkeys(s for e in test for s in e.scenes))[: cfg.n_eval]
    bar = tqdm(total=3 * len(test) + len(scenes), desc="evaluate", disable=not cfg.progress, mininterval=1.0)
    t_flops = decoder_flops_per_token(models["target"].config.text_config)
    out: dict[str, Any] = {
        "out": str(cfg.out),
        "seed": cfg.seed,
        "size": cfg.size,
        "threads": cfg.threads,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "vocab_size": len(processor.tokenizer),
        "tokens_per_batch": cfg.tokens_per_batch,
        "distill": cfg.distill,
        "lr": cfg.lr,
        "target_lr": cfg.target_lr,
        "fact_weight": cfg.fact_weight,
        "caption_warmup": cfg.caption_warmup,
        "examples": {k: len(v) for k, v in splits.items()},
        "models": {},
    }
    vis = logs.get("vision")
    if vis is not None:
        out["vision_pretraining"] = {
            "steps": vis.steps,
            "train_seconds": vis.seconds,
            "seconds_per_step": vis.seconds_per_step,
            "final_loss": float(np.mean(vis.losses[-20:])),
        }
    for role, model in models.items():
        acc = (
            caption_accuracy(model, processor, scenes, bar)
            if role == "captioner"
            else fact_accuracy(model, processor, test, bar)
        )
        flops = decoder_flops_per_token(model.config.text_config)
        log = logs[role]
        out["models"][role] = {
            "parameters": parameter_counts(model),
            "decoder_flops_per_token": flops,
            "target_over_model_flops": t_flops / flops,
            "steps": log.steps,
            "train_seconds": log.seconds,
            "seconds_per_step": log.seconds_per_step,
            "final_train_loss": float(np.mean(log.losses[-20:])),
            "validation_loss": log.validation_loss,
            "accuracy": acc,
            "evaluated_on": len(scenes) if role == "captioner" else len(test),
        }
        if role == "draft":  # the same model without images: what text-only drafting can know
            out["models"][role]["text_only_accuracy"] = fact_accuracy(
                model, processor, test, bar, text_only=True
            )
    bar.close()
    return out


_PANEL_TITLES = {
    "vision": "vision tower (4 attribute heads, summed)",
    "target": "target (captions first, then the tasks)",
}


def plot_losses(logs: dict, path: Path) -> None:
    """Per-step training loss (light) and its 25-step moving average, one panel per role."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(logs), figsize=(4 * len(logs), 3), squeeze=False)
    for ax, (role, log) in zip(axes[0], logs.items()):
        y = np.asarray(log.losses)
        ax.plot(y, color="C0", alpha=0.3, lw=0.8)
        if len(y) >= 25:
            ax.plot(np.arange(24, len(y)), np.convolve(y, np.ones(25) / 25, mode="valid"), color="C0")
        ax.set(
            title=_PANEL_TITLES.get(role, role),
            xlabel="step",
            yscale="log",
            ylabel="loss (nats)" if role == "vision" else "loss (nats/token)",
        )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render_card(s: dict[str, Any]) -> str:
    """MODEL_CARD.md text from a summary."""
    rows = []
    for role, m in s["models"].items():
        p = m["parameters"]
        acc = ", ".join(f"{k} {v:.0%}" for k, v in m["accuracy"].items() if k != "all")
        rows.append(
            f"| {role} | {p['total']:,} | {p['decoder']:,} | {m['decoder_flops_per_token'] / 1e6:.2f} "
            f"({m['target_over_model_flops']:.1f}×) | {m['steps']} | {m['train_seconds'] / 60:.1f} "
            f"| {m['validation_loss']:.3f} | **{m['accuracy']['all']:.0%}** ({acc}; n={m['evaluated_on']}) |"
        )
    t_only = s["models"].get("draft", {}).get("text_only_accuracy")
    text_only = (
        ""
        if t_only is None
        else "Draft without images (placeholders → newlines, IbED's text-only "
        "drafting): " + ", ".join(f"{k} {v:.0%}" for k, v in t_only.items()) + "."
    )
    stages = {"vision": s["vision_pretraining"], **s["models"]} if "vision_pretraining" in s else s["models"]
    steps = " ".join(f"--steps {r}={m['steps']}" for r, m in stages.items())
    vis = s.get("vision_pretraining")
    vision = (
        ""
        if vis is None
        else f"Vision tower pre-trained on scene attributes: {vis['steps']} steps, "
        f"{vis['train_seconds'] / 60:.1f} min, final loss {vis['final_loss']:.3f} (sum of 4 heads)."
    )
    return f"""# specsim zoo: tiny LLaVA target, draft and captioner

Trained by `python -m calibrate.zoo.train` on a synthetic task (coloured shapes; 1-image describe/VQA,
2-image spot-the-difference/IEdit, 5-image story; IbED Appendix C prompt templates). Architectures:
HF `LlavaForConditionalGeneration` (CLIP vision tower 64 px / patch 16 → 16 image tokens, Llama decoder).
The draft and captioner reuse the trained target's vision tower (frozen).

| model | parameters | decoder params | decoder MFLOPs/token (target ÷ model) | steps | train min | \
val loss | held-out image-fact accuracy |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

{vision}
{text_only}

Accuracy: greedy answers on the first test examples; an answer counts when it states exactly the reference's
image facts (colour, shape, count, side, same/new verdicts, changed attribute) in order. \
Captioner: exact caption match.

- Data: seed {s["seed"]}; examples {s["examples"]}; vocabulary {s["vocab_size"]} tokens (byte-level BPE).
- Training: AdamW, peak lr {s["target_lr"]} (target), {s["lr"]} (draft, captioner), \
image-fact tokens weighted {s["fact_weight"]}×, target's first
  {s["caption_warmup"]:.0%} of steps on captions, {s["tokens_per_batch"]} padded tokens per batch, \
draft distillation
  weight {s["distill"]}; {s["threads"]} torch threads on {s["machine"]}, torch {s["torch"]}.
- Total wall time {s["total_seconds"] / 60:.1f} min. Repeat exactly: `python -m calibrate.zoo.train --out DIR
  --seed {s["seed"]} --size {s["size"]} --threads {s["threads"]} --n-train {s["examples"]["train"]}
  --tokens-per-batch {s["tokens_per_batch"]} --lr {s["lr"]} --target-lr {s["target_lr"]} \
--distill {s["distill"]}
  --fact-weight {s["fact_weight"]} --caption-warmup {s["caption_warmup"]} {steps}`.
"""


def write_outputs(cfg: Any, summary: dict[str, Any], logs: dict) -> None:
    """``MODEL_CARD.md``, ``loss_curves.png`` and ``train_log.json`` (losses per step) into ``cfg.out``."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_losses(logs, out / "loss_curves.png")
    write_json_atomic(
        out / "train_log.json",
        {"schema_version": 1, "summary": summary, "losses": {r: log.losses for r, log in logs.items()}},
    )
    write_text_atomic(out / "MODEL_CARD.md", render_card(summary))
