"""Benchmark: our speculative-decoding engine vs HF transformers' assisted generation, same models and
prompts.

Per repetition and prompt, interleaved in alternating order: ``calibrate.run.engine.speculative_decode`` with
the text drafter, and ``target.generate(assistant_model=draft)`` with a constant number of assistant tokens
(schedule "constant", confidence threshold 0, so both draft exactly γ), greedy, exactly ``--max-new-tokens``
new tokens (no EOS). Wall time of the whole call, prefill included. Prints per γ the summed wall times, their
ratio (ours / HF; ≤ 1 means ours is at least as fast) with a 95% half-width over repetitions, and whether the
outputs were identical. Also target-only decoding both ways, as a reference.

    python bench/engine_vs_hf.py --gamma 1,3,5 --repeats 3 --max-new-tokens 48 --threads 1
    python bench/engine_vs_hf.py --preset zoo --device cuda --dtype bfloat16   # a GPU (bench/gpu_session.py)

Both calls end with the device synchronised (:func:`calibrate.run.timing.device_sync`) before the clock stops.

The four prompts are coding tasks outside the ``reference`` prompt set (a new user's workload).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402

PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python class for a stack with push, pop and peek, and a short usage example.",
    "Write a Python function that counts the vowels in a string, with a docstring.",
    "Write a Python function that returns the indices of all occurrences of a value in a list.",
)


def parse_args(argv=None):
    p = ScriptParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--preset", default="qwen2.5-coder-0.5b-1.5b")
    p.add_argument("--gamma", default="1,3,5")
    p.add_argument("--repeats", type=number_arg("repeats", integer=True), default=3)
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=48)
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out-json", default=None)
    return p.parse_args(argv)


def _ours(target, draft, ids, gamma, n):
    from calibrate.drafting import TextDrafter
    from calibrate.run.engine import Request, speculative_decode, target_decode
    from calibrate.run.timing import device_sync

    t0 = time.perf_counter()
    kw = {"max_new_tokens": n, "device": ids.device}
    if gamma:
        drafter = TextDrafter(draft, device=ids.device)
        out = speculative_decode(target, drafter, Request(ids), gamma=gamma, **kw)
    else:
        out = target_decode(target, Request(ids), **kw)
    device_sync(ids.device)
    return (time.perf_counter() - t0) * 1e3, list(out.tokens)


def _hf(target, draft, ids, gamma, n):
    import torch

    common = {
        "do_sample": False,
        "max_new_tokens": n,
        "min_new_tokens": n,
        "eos_token_id": None,
        "pad_token_id": 0,
        "attention_mask": torch.ones_like(ids),
    }
    if gamma:
        draft.generation_config.num_assistant_tokens = gamma
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        common["assistant_model"] = draft
    from calibrate.run.timing import device_sync

    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(ids, **common)
    device_sync(ids.device)
    return (time.perf_counter() - t0) * 1e3, out[0, ids.shape[1] :].tolist()


def main(argv=None) -> int:
    args = parse_args(argv)  # bad input is refused before torch and the models load

    import torch

    from calibrate.models.loading import load_pair
    from calibrate.workload.prompt_sets import Prompt, encode
    from specsim.check.comparison import ratio_halfwidth
    from specsim.report import parse_int_list

    torch.set_num_threads(args.threads)
    gammas = [0] + parse_int_list(args.gamma, name="--gamma")
    t0 = time.perf_counter()
    target, draft = load_pair(args.preset, threads=args.threads, device=args.device, dtype=args.dtype)
    print(f"models loaded in {time.perf_counter() - t0:.0f} s; {args.threads} thread(s)", file=sys.stderr)
    prompts = [
        encode(target.tokenizer, Prompt(id=f"p{i}", text=t)).to(target.device) for i, t in enumerate(PROMPTS)
    ]
    _ours(target, draft, prompts[0], 2, 4)  # warm-up, both engines
    _hf(target.model, draft.model, prompts[0], 2, 4)
    ms = {(g, who): np.zeros((len(prompts), args.repeats)) for g in gammas for who in ("ours", "hf")}
    same = {g: 0 for g in gammas}
    for r in range(args.repeats):
        for i, ids in enumerate(prompts):
            for g in gammas[r % len(gammas) :] + gammas[: r % len(gammas)]:
                runs = [("ours", _ours, target, draft), ("hf", _hf, target.model, draft.model)]
                if (r + i) % 2:
                    runs.reverse()
                toks = {}
                for who, fn, t, d in runs:
                    ms[(g, who)][i, r], toks[who] = fn(t, d, ids, g, args.max_new_tokens)
                same[g] += toks["ours"] == toks["hf"]
        print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr)
    results = {}
    print(f"{'gamma':>5} {'ours ms':>10} {'HF ms':>10} {'ours/HF':>8} {'95% hw':>7} {'same output':>12}")
    for g in gammas:
        ours, hf = ms[(g, "ours")], ms[(g, "hf")]
        ratio = ours.mean(1).sum() / hf.mean(1).sum()
        hw = ratio_halfwidth(ours, hf)
        label = "target" if g == 0 else str(g)
        print(
            f"{label:>5} {ours.mean(1).sum():10.0f} {hf.mean(1).sum():10.0f} {ratio:8.3f} {hw:7.1%} "
            f"{same[g]:>6}/{len(prompts) * args.repeats}"
        )
        results[label] = {
            "ours_ms": float(ours.mean(1).sum()),
            "hf_ms": float(hf.mean(1).sum()),
            "ratio": ratio,
            "halfwidth": hw,
            "same_output": same[g],
            "runs": len(prompts) * args.repeats,
        }
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
