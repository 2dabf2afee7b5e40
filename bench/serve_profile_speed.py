"""Benchmark: ``specsim serve`` on a measured profile (its batched grids and server-loop costs), as a user
runs it: one process, the command's own entry point, SD and target-only over the same requests.

The zoo's batched profile (zoo-cpu-batch), its M/zoo-2img greedy traces replayed, 51-position text prompts
(no images, so that any checkout prices the same requests), 32 output tokens, at most 8 running requests,
whole-prompt prefills, at 100 req/s (past the knee: the server stays busy). ``--root`` picks the checkout
whose ``specsim`` is imported, so one script times two checkouts against each other, e.g. interleaved:

    python bench/serve_profile_speed.py --root /path/to/main  (A), then --root . (B), in turn.

Prints the wall time per request (imports and profile loading included); ``--out FILE`` writes the
comparison (SD and target-only summaries) as JSON, to hold two checkouts to the same figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402


def _in(lo: float, hi: float, kind: type):
    """An argparse ``type=``: a finite ``kind`` (int or float) in [lo, hi]. specsim.bounds' ranges written
    out: checking them with it would import specsim before ``--root`` is on the path and the clock starts."""
    expected = f"an integer in {lo}..{hi}" if kind is int else f"a finite number in {lo:g}..{hi:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def main() -> None:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="checkout whose specsim is imported (default: .)")
    ap.add_argument("--requests", type=_in(1, 2**24, int), default=3000)  # specsim.bounds' "size"
    ap.add_argument("--rate", type=_in(1e-6, 1e6, float), default=100.0)  # its "rate_per_s"
    ap.add_argument("--out", default=None, help="write the comparison's JSON here")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    t0 = time.perf_counter()
    from specsim.cli.main import main as specsim

    argv = ["serve", "--cost-profile", "zoo-cpu-batch", "--acceptance-profile", "zoo-cpu-batch"]
    argv += ["--method", "M", "--scenario", "zoo-2img", "--images", "0", "--prompt-tokens", "51"]
    argv += ["--output-tokens", "32", "--max-num-seqs", "8", "--no-chunked-prefill", "--gamma", "3"]
    argv += ["--rate", f"{args.rate:g}", "--requests", str(args.requests), "--no-progress", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = specsim(argv)
    wall = time.perf_counter() - t0
    if args.out:
        with open(args.out, "w") as f:
            json.dump(json.loads(out.getvalue())["comparison"], f, indent=1, sort_keys=True)
    print(
        f"{args.root}: exit {code}, {wall:.2f} s for {args.requests} requests, SD and target-only "
        f"({wall / args.requests * 1e3:.3f} ms per request)"
    )


if __name__ == "__main__":
    sys.exit(run_main(main))
