"""Benchmark: draft-step time of an in-batch ensemble of k = 1..4 members vs one member (seed 003 §6,
Fig. 9 claims the batch costs almost nothing), on tiny random zoo LLaVA models.

Per k: ``model`` = one batched draft forward over 1 new position per row (Tq at batch k); ``step`` =
``propose(1)`` (forward + softmax per member + weighted mix + argmax: the method's overhead outside the
model is step − model). All k are timed round-robin (interleaved) so machine drift hits them alike.
Run:

    python bench/drafting_methods.py [--threads 1] [--size tiny|full] [--device cpu|cuda]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from calibrate.drafting import make_drafter, make_request  # noqa: E402
from calibrate.run.engine import crop_cache  # noqa: E402
from calibrate.run.timing import measure_interleaved  # noqa: E402
from calibrate.zoo import task as zt  # noqa: E402
from calibrate.zoo.tokenizer import train_tokenizer, wrap  # noqa: E402
from calibrate.zoo.zoo_models import build_model, make_processor, zoo_config  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402

MEMBERS = ("M", "T", "P4", "P1")


def _restorer(d):
    """Setup that rolls a drafter back to the state after its first block (same context every call)."""
    cols, mask, tail = d.mask.shape[1], d.mask.clone(), d.tail.clone()

    def restore():
        crop_cache(d.cache, cols)
        d.start_from_cache(d.cache, mask.clone(), tail.clone())

    return restore


def main() -> None:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    ap.add_argument("--size", default="tiny", choices=("tiny", "full"))
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    examples = zt.make_split("test", 12, seed=0)
    tok = wrap(train_tokenizer(zt.corpus(examples), vocab_size=400))
    proc = make_processor(tok)
    draft = build_model(zoo_config("draft", len(tok), args.size), seed=1).eval().to(args.device)
    ex = next(e for e in examples if e.images_per_prompt == 2)
    req = make_request(proc, ex.prompt, ex.images(), prompt_id=ex.uid)
    req = type(req)(
        req.input_ids.to(args.device),
        {k: v.to(args.device) for k, v in req.target_kwargs.items()},
        req.text,
        req.images,
        req.prompt_id,
        req.image_token_id,
    )
    calls = {}
    with torch.inference_mode():
        for k in range(1, len(MEMBERS) + 1):
            d = make_drafter("".join(MEMBERS[:k]), draft, tokenizer=tok, device=args.device)
            d.prefill(req)
            d.propose(1)  # the first step feeds the prompt (fused prefill); time the steps after it
            d.accept(0, 1)
            restore = _restorer(d)
            calls[f"model k={k}"] = (lambda d=d: d.step(d.tail), restore)
            calls[f"step k={k}"] = (lambda d=d: d.propose(1), restore)
        res = measure_interleaved(
            calls,
            device=args.device,
            warmup=5,
            min_repeats=30,
            max_repeats=200,
            target_rel_halfwidth=0.02,
            max_seconds=10,
        )
    base_model, base_step = res["model k=1"].median_ms, res["step k=1"].median_ms
    print(
        f"draft {args.size} zoo LLaVA, device {args.device}, threads {args.threads}, 2-image request, "
        f"members {'+'.join(MEMBERS)}"
    )
    print(
        f"{'k':>2} {'method':>10} {'model ms':>9} {'±95%':>6} {'ratio':>6} {'step ms':>8} {'ratio':>6} "
        f"{'overhead ms':>11}"
    )
    for k in range(1, len(MEMBERS) + 1):
        m, s = res[f"model k={k}"], res[f"step k={k}"]
        print(
            f"{k:>2} {''.join(MEMBERS[:k]):>10} {m.median_ms:9.3f} {m.halfwidth_ms:6.3f} "
            f"{m.median_ms / base_model:6.2f} {s.median_ms:8.3f} {s.median_ms / base_step:6.2f} "
            f"{s.median_ms - m.median_ms:11.3f}"
        )


if __name__ == "__main__":
    sys.exit(run_main(main))
