"""Benchmark: calibrate a pair's latency cost model on this machine and print how long it took.

Goal (issue: predictions that hold beyond the point they were measured): the reference pair measures in
≤ 3 minutes on a 2-core CPU, model loading apart. Runs ``specsim calibrate latency`` as a user would,
with the grid sized to the pair's prompt set (contexts from its shortest prompt to its longest + N new
tokens), and prints model loading, measuring, the host check and the worst half-width:

    python bench/calibrate_latency.py --out /tmp/ref-latency.json -- \\
        --max-seconds-per-point 40  # reference pair
    python bench/calibrate_latency.py --preset zoo --gammas 1,2,3,4,6 --out /tmp/zoo-latency.json
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from specsim.cli.main import main as specsim

    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen2.5-coder-0.5b-1.5b")
    ap.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    ap.add_argument("--gammas", default="1,2,3,4,6,8")
    ap.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=64)
    ap.add_argument("--out", required=True)
    ap.add_argument("extra", nargs="*", help="more calibrate-latency arguments (after --)")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    if load > 0.5 + args.threads:
        print(
            f"warning: 1-min load average {load:.1f} on {os.cpu_count()} CPUs before measuring: other "
            "processes compete and will inflate the numbers",
            file=sys.stderr,
        )
    return specsim(
        [
            "calibrate",
            "latency",
            "--preset",
            args.preset,
            "--threads",
            str(args.threads),
            "--gammas",
            args.gammas,
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--no-resume",
            "--out",
            args.out,
            *args.extra,
        ]
    )


if __name__ == "__main__":
    sys.exit(run_main(main))
