"""Round trip engine -> vLLM counters -> `specsim import vllm` -> τ(k), against the engine's own τ(k).

Runs real speculative decoding (calibrate.run.engine) on a preset's prompts at draft length K, writes
two vLLM ``/metrics`` scrapes with calibrate.measure.export_metrics (after the first request and after
all), imports their difference with ``specsim import vllm`` and prints, for every k ≤ K, τ(k) from
the imported profile next to the engine's own τ(k) = mean over its draft blocks of 1 + min(accepted, k).
No timing is measured; the figures are counts.

    python bench/engine_metrics_roundtrip.py --preset qwen2.5-coder-0.5b-1.5b --limit 12 --max-new-tokens 64
    python bench/engine_metrics_roundtrip.py --preset zoo --method M --images 2 \\
        --max-new-tokens 64  # all 2-image
    python bench/engine_metrics_roundtrip.py --preset zoo --method M --images 2 --limit 6 \\
        --max-new-tokens 16  # quick
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen2.5-coder-0.5b-1.5b")
    p.add_argument("--prompts", default=None, help="prompt set (default: the preset's)")
    p.add_argument(
        "--method", default="plain", help="drafting method (plain for text pairs; M, T, ... for VLMs)"
    )
    p.add_argument(
        "--images",
        type=number_arg("images", integer=True),
        default=None,
        help="only prompts with this many images",
    )
    p.add_argument("--limit", type=number_arg("size", integer=True), default=None)
    p.add_argument(
        "--gamma", type=number_arg("gamma", integer=True), default=5, help="draft length K (default 5)"
    )
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=64)
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=2)
    p.add_argument("--out-dir", default=None, help="keep the scrapes and the imported profile here")
    return p.parse_args(argv)


def run(args) -> int:
    from tqdm import tqdm

    from calibrate.measure.export_metrics import counters_from_results, engine_tau, exposition_text
    from calibrate.run.engine import speculative_decode
    from calibrate.workload.run_setup import load_setup, read_workload
    from specsim.cli.main import build_parser, main
    from specsim.predict.prediction import predict
    from specsim.profiles import load_profile
    from specsim.report import format_table

    argv = [
        "calibrate",
        "acceptance",
        "--preset",
        args.preset,
        "--method",
        args.method,
        "--threads",
        str(args.threads),
        "--out",
        "unused.json",
        "--max-new-tokens",
        str(args.max_new_tokens),
    ]
    argv += ["--prompts", args.prompts] if args.prompts else []
    argv += ["--limit", str(args.limit)] if args.limit else []
    flags = build_parser().parse_args(argv)
    setup = load_setup(flags, read_workload(flags))
    reqs = setup.requests if args.images is None else setup.groups.get(args.images, [])
    if len(reqs) < 2:
        print(f"need at least 2 requests, got {len(reqs)}", file=sys.stderr)
        return 2
    drafter = setup.drafter(args.method)
    runs = [
        speculative_decode(
            setup.target,
            drafter,
            r,
            gamma=args.gamma,
            max_new_tokens=args.max_new_tokens,
            eos_token_id=setup.eos,
        )
        for r in tqdm(reqs, desc="speculative decoding", unit="request", file=sys.stderr)
    ]
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="specsim-roundtrip-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    s1, s2, prof = out_dir / "scrape1.prom", out_dir / "scrape2.prom", out_dir / "imported.json"
    s1.write_text(exposition_text(counters_from_results(runs[:1]), setup.target.name))
    s2.write_text(exposition_text(counters_from_results(runs), setup.target.name))
    if (
        main(
            [
                "import",
                "vllm",
                str(s1),
                str(s2),
                "--method",
                args.method,
                "--scenario",
                "roundtrip",
                "--out",
                str(prof),
                "--num-speculative-tokens",
                str(args.gamma),
            ]
        )
        != 0
    ):
        return 1
    profile = load_profile(str(prof))
    rows, equal = [], True
    for k in range(1, args.gamma + 1):
        imported, engine = predict(profile, k)[0].tau, engine_tau(runs[1:], k)
        equal &= imported == engine
        rows.append([str(k), f"{imported:.12f}", f"{engine:.12f}", "yes" if imported == engine else "NO"])
    blocks = sum(1 for r in runs[1:] for b in r.blocks if b.gamma > 0)
    print(
        f"\n{args.preset}, method {args.method}, K = {args.gamma}: {len(runs) - 1} requests in the window, "
        f"{blocks} draft blocks; files in {out_dir}"
    )
    print(format_table(["k", "tau(k) imported", "tau(k) engine", "equal"], rows))
    print("round trip exact for every k <= K" if equal else "ROUND TRIP MISMATCH")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(run_main(lambda: run(parse_args())))
