"""Benchmark: calibrate the offline reference pair (Qwen2.5-Coder-1.5B target, -0.5B draft, GGUF from PyPI)
on this CPU and write the shipped profile ``specsim/profiles/measured/qwen2.5-coder-0.5b-1.5b-cpu.json``.

Prints the model-loading time, the measuring time (goal: ≤ 3 minutes), the worst 95% CI half-width
(goal: ≤ 2% of the median), Tq/Tp and Tv(γ)/Tp for γ = 1..8. Run:

    python bench/calibrate_latency.py [--threads 2] [--out PATH] [--no-resume]

Nearly the same measurement as ``specsim calibrate latency --preset qwen2.5-coder-0.5b-1.5b --threads 2
--contexts 64,256,512 --verify-context 256 --prefill-tokens 16,32,64,128 --min-repeats 6 --max-repeats 20
--max-seconds-per-point 10 --out PATH`` (the bench caps prefill repeats at 6 instead of 10).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from calibrate.cli_latency import summary_lines
from calibrate.latency import LatencyPlan, calibrate_latency, worst_rel_halfwidth
from calibrate.models import load_pair
from calibrate.presets.reference_pair import REFERENCE_PAIR
from specsim.profile import PROFILES_DIR, load_profile

OUT = PROFILES_DIR / "measured" / f"{REFERENCE_PAIR}-cpu.json"
# Sized for ≈ 2-3 minutes of measuring on 2 CPU threads (Tp ≈ 0.25 s, Tv(8) ≈ 0.7 s per call).
PLAN = LatencyPlan(contexts_tokens=(64, 256, 512), verify_context_tokens=256, prefill_tokens=(16, 32, 64, 128),
                   warmup=2, min_repeats=6, max_repeats=20, prefill_warmup=1, prefill_min_repeats=3,
                   prefill_max_repeats=6, target_rel_halfwidth=0.02, max_seconds_per_point=10.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    target, draft = load_pair(REFERENCE_PAIR, threads=args.threads, dtype="float32")
    load_s = time.perf_counter() - t0
    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        print(f"warning: 1-min load average is {load_before:.1f} on {os.cpu_count()} CPUs; other processes compete "
              "and will inflate the numbers (run on a quiet machine for a reference profile)", file=sys.stderr)
    notes = (f"bench/calibrate_latency.py: GGUF weights dequantised to float32; {args.threads} threads; "
             f"KV caches hold random values of the real shapes; 1-min load average before measuring "
             f"{load_before:.1f} on {os.cpu_count()} CPUs")
    t1 = time.perf_counter()
    path, timings = calibrate_latency({"target": target, "draft": draft}, PLAN, args.out, resume=not args.no_resume,
                                      name=f"{REFERENCE_PAIR}-cpu", notes=notes,
                                      description="Measured latency of the offline reference pair "
                                                  "(Qwen2.5-Coder-1.5B-Instruct target, -0.5B-Instruct draft) on CPU.")
    measure_s = time.perf_counter() - t1
    section = load_profile(str(path)).latency
    print(f"model loading: {load_s:.1f} s; measuring: {measure_s:.1f} s (goal <= 180 s); 1-min load average "
          f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after measuring")
    print("\n".join(summary_lines(section, timings, measure_s, path)))
    key, rel = worst_rel_halfwidth(timings)
    over = sorted(k for k, t in timings.items() if t.rel_halfwidth > PLAN.target_rel_halfwidth)
    print(f"points over the {100 * PLAN.target_rel_halfwidth:.0f}% goal: {len(over)} of {len(timings)}"
          + (f" ({', '.join(over)})" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
