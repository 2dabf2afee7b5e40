"""Benchmark: a target-only decode step timed as the latency grid times it vs as decoding runs it.

Why (issue: predictions that hold beyond the point they were measured): on the zoo, ``specsim check``'s
target-only step term comes out a few per cent above the measured one at every scenario. This times one
target step at a fixed context in three styles, interleaved round by round in one process:

- grid: as ``calibrate latency`` does (engine blocks at γ = 1..4, one target step run and dropped, then
  the kept steps; the KV cache is cropped back to the context after each);
- back-to-back: the same cropped step repeated, none of the drafting in between;
- growing: steps that append to the cache as decoding does (no crop; context + 2 .. context + 9),
  context slope removed as the grid does for ``draft_next``.

and prints median forward ms, median step ms (forward + picking the token) and the ratios:

    python bench/target_step_styles.py --preset zoo --contexts 13,120,230 --rounds 40
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="zoo")
    ap.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    ap.add_argument("--contexts", default="13,120,230")
    ap.add_argument("--gammas", default="1,2,3,4")
    ap.add_argument("--rounds", type=number_arg("repeats", integer=True), default=40)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from calibrate.measure.request_grid_sweep import Sweep
    from calibrate.models.loading import load_pair
    from calibrate.run import engine as E

    target, draft = load_pair(args.preset, threads=args.threads, progress=False)
    gammas = [int(g) for g in args.gammas.split(",")]
    print(
        f"{args.preset}: target step at each context, {args.rounds} interleaved rounds, "
        f"{args.threads} thread(s)"
    )
    print(f"{'context':>7}  {'style':<13} {'forward ms':>10} {'step ms':>8}  {'fwd / growing':>13}")
    for context in (int(c) for c in args.contexts.split(",")):
        sweep = Sweep(
            {"target": target, "draft": draft}, context, (1,), False, torch.Generator().manual_seed(0)
        )
        fwd: dict[str, list[float]] = {"grid": [], "back-to-back": [], "growing": []}
        step: dict[str, list[float]] = {k: [] for k in fwd}
        growing_ctx: list[int] = []

        def timed_step(pending, sweep=sweep):
            t0 = time.perf_counter()
            nxt, ms = E.target_step(
                sweep.model, sweep.cache, pending, temperature=0.0, generator=None, device=sweep.device
            )
            return nxt, ms, (time.perf_counter() - t0) * 1e3

        with torch.inference_mode():
            for r in range(args.rounds + 2):  # two warm-up rounds
                keep = r >= 2
                for g in gammas:  # grid style: blocks, a dropped step, then kept steps
                    sweep.sd_cycle(g, 1, 1 + (r % 2))
                pending = torch.tensor([[sweep.ids[context]]], dtype=torch.long)
                for i in range(1 + max(1, len(gammas) // 2)):
                    _, ms, total = timed_step(pending)
                    E.crop_cache(sweep.cache, context)
                    if keep and i > 0:
                        fwd["grid"].append(ms)
                        step["grid"].append(total)
                for i in range(8):  # back-to-back, cropped
                    _, ms, total = timed_step(pending)
                    E.crop_cache(sweep.cache, context)
                    if keep and i > 1:
                        fwd["back-to-back"].append(ms)
                        step["back-to-back"].append(total)
                tok = pending
                for i in range(10):  # growing, as decoding appends
                    at = sweep.cache.get_seq_length()
                    nxt, ms, total = timed_step(tok)
                    tok = torch.tensor([[nxt]], dtype=torch.long)
                    if keep and i > 1:
                        fwd["growing"].append(ms)
                        step["growing"].append(total)
                        growing_ctx.append(at)
                E.crop_cache(sweep.cache, context)
        sweep.samples.clear()
        ctx = np.asarray(growing_ctx, dtype=float)
        slope = float(np.polyfit(ctx, np.asarray(fwd["growing"]), 1)[0])
        # to the grid's context, as next_step_timings does for draft_next
        fwd["growing"] = list(np.asarray(fwd["growing"]) - slope * (ctx - context))
        step["growing"] = list(np.asarray(step["growing"]) - slope * (ctx - context))
        base = float(np.median(fwd["growing"]))
        for style in fwd:
            f, s = float(np.median(fwd[style])), float(np.median(step[style]))
            print(f"{context:>7}  {style:<13} {f:>10.4f} {s:>8.4f}  {f / base:>13.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
