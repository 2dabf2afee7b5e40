"""Benchmark: predicted vs measured speculative decoding on a pair, the way a user runs it, stage by stage.

Runs the three commands a user runs and prints the wall time of each:
1. ``specsim calibrate latency`` (the cost grid sized to the prompt set's workload),
2. ``specsim calibrate acceptance`` (teacher-forced traces, one per prompt and method),
3. ``specsim check`` (real runs in rounds until each row's measured speedup is precise; its tables).

    python bench/check_reference_pair.py --out /tmp/ref.json                      # reference pair, ~1.5 h
    python bench/check_reference_pair.py --preset zoo --gamma 1,2,3,4 --out /tmp/zoo.json \\
        --method M --method T --method C --method F --method P4 --method P1 --method MT --method MC \\
        --method MTC --method MTCP4 --method adaptive:MTC

Latency and acceptance are skipped when ``--out`` already has them (``--redo`` measures again).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen2.5-coder-0.5b-1.5b")
    p.add_argument("--out", required=True, help="profile to write (latency, acceptance and checks)")
    p.add_argument("--gamma", default="1,2,3,4,6,8")
    p.add_argument("--method", action="append", default=None)
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=64)
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    p.add_argument(
        "--limit", type=number_arg("size", integer=True), default=None, help="use only the first N prompts"
    )
    p.add_argument("--max-rounds", type=number_arg("repeats", integer=True), default=6)
    p.add_argument("--redo", action="store_true", help="measure latency and acceptance again")
    p.add_argument("--latency-args", default="", help="extra arguments for calibrate latency")
    p.add_argument("--check-args", default="", help="extra arguments for check, e.g. '--max-minutes 40'")
    return p.parse_args(argv)


def _run(argv: list[str]) -> float:
    from specsim.cli.main import main

    print("$ specsim " + " ".join(argv), file=sys.stderr)
    t0 = time.perf_counter()
    if main(argv) != 0:
        raise SystemExit(f"failed: specsim {' '.join(argv)}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    from specsim.profiles import load_profile

    args = parse_args(argv)
    out = Path(args.out)
    common = ["--preset", args.preset, "--threads", str(args.threads)]
    limit = ["--limit", str(args.limit)] if args.limit else []
    methods = [x for m in (args.method or []) for x in ("--method", m)]
    prof = load_profile(str(out)) if out.is_file() else None
    times = {}
    if args.redo or prof is None or "cost_model" not in prof.latency.to_json():
        times["latency"] = _run(
            [
                "calibrate",
                "latency",
                *common,
                "--max-new-tokens",
                str(args.max_new_tokens),
                "--gammas",
                args.gamma,
                "--out",
                str(out),
                *args.latency_args.split(),
            ]
        )
    if args.redo or prof is None or not prof.acceptance:
        times["acceptance"] = _run(
            [
                "calibrate",
                "acceptance",
                *common,
                *limit,
                *methods,
                "--max-new-tokens",
                str(args.max_new_tokens),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    times["check"] = _run(
        [
            "check",
            "--profile",
            str(out),
            *common,
            *limit,
            *methods,
            "--gamma",
            args.gamma,
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--max-rounds",
            str(args.max_rounds),
            "--no-progress",
            *args.check_args.split(),
        ]
    )
    print("wall time (model loading included): " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
