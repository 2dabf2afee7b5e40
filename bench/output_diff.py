"""Capture what the pricing commands print, to hold a refactor to byte-identical output.

Runs ``predict``, ``sweep``, ``hardware``, ``recommend``, ``serve`` and ``validate`` (text and ``--json``) on
every shipped profile and a dozen plans, in process, and writes each command's exit code, stdout and stderr
to one file per command under ``--out``. ``--compare A B`` diffs two such folders and exits 1 on a change.

Run: python bench/output_diff.py --out /tmp/before ; (change the code) ;
     python bench/output_diff.py --out /tmp/after ;
     python bench/output_diff.py --compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402

PROFILES = (
    "ibed-llava1.5-7b-68m",
    "qwen2.5-coder-0.5b-1.5b-cpu",
    "qwen2.5-coder-0.5b-1.5b-cpu-check",
    "qwen2.5-coder-0.5b-1.5b-cpu-trees",
    "qwen2.5-coder-0.5b-1.5b-cpu-xeon",
    "qwen2.5-coder-0.5b-1.5b-cpu-batch",
    "zoo-cpu",
    "zoo-cpu-batch",
)

# The fits on a CPU profile read a device: a fixed one, since `cpu` is measured afresh at every load.
CPU_DEVICE = {
    "schema_version": 1, "name": "bench-cpu", "display_name": "a fixed 2-core CPU for output diffs",
    "vendor": "generic", "kind": "cpu",
    "memory_bandwidth_bytes_per_s": {"value": 1.2e10, "source": "fixed for bench/output_diff.py"},
    "peak_flops_per_s": {"value": 1.0e11, "source": "fixed for bench/output_diff.py", "dtype": "fp32"},
    "memory_bytes": {"value": 2.4e10, "source": "fixed for bench/output_diff.py"},
}
CPU_FILE = str(Path(tempfile.gettempdir()) / "specsim-output-diff-cpu.json")

# (name, argv); every one also runs with --json
PLANS = (
    ("hw-default", ["hardware"]),
    ("hw-qwen", ["hardware", "--pair", "qwen2.5-coder-0.5b-1.5b", "--profile",
                 "qwen2.5-coder-0.5b-1.5b-cpu-check", "--batch", "1,8,64"]),
    ("hw-hf-eager", ["hardware", "--method", "M", "--scenario", "ChartQA", "--batch", "1-64",
                     "--runtime", "hf-eager"]),
    ("hw-70b-tp8", ["hardware", "--target", "llama-2-70b", "--draft", "llama-2-7b", "--alpha", "0.7",
                    "--gamma", "4", "--tp", "8", "--device", "h100-sxm"]),
    ("hw-llamacpp", ["hardware", "--target", "llama-2-70b", "--draft", "llama-2-7b", "--dtype", "q4_k_m",
                     "--alpha", "0.7", "--runtime", "llama.cpp", "--tp", "3", "--device", "rtx-3090"]),
    ("hw-tau", ["hardware", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--gamma", "3",
                "--tau", "2.6", "--batch", "1,16,128", "--context", "512", "--device", "h100-sxm"]),
    ("hw-sharded", ["hardware", "--target", "llama-2-70b", "--draft", "llama-2-7b", "--alpha", "0.8",
                    "--tp", "4", "--draft-sharded", "--device", "a100-80gb-sxm", "--batch", "1,32"]),
    ("hw-layer", ["hardware", "--target", "llama-2-70b", "--draft", "llama-2-7b", "--alpha", "0.8",
                  "--tp", "2", "--split-mode", "layer", "--device", "h100-sxm", "--batch", "1,4"]),
    ("hw-validate", ["hardware", "--pair", "qwen2.5-coder-0.5b-1.5b", "--profile",
                     "qwen2.5-coder-0.5b-1.5b-cpu-check", "--fit-profile", "qwen2.5-coder-0.5b-1.5b-cpu-xeon",
                     "--fit-device", CPU_FILE, "--validate", "--batch", "1"]),
    ("hw-trees", ["hardware", "--pair", "qwen2.5-coder-0.5b-1.5b", "--profile",
                  "qwen2.5-coder-0.5b-1.5b-cpu-trees", "--trees", "--batch", "1,8"]),
    ("hw-cpu-fit", ["hardware", "--pair", "qwen2.5-coder-0.5b-1.5b", "--profile",
                    "qwen2.5-coder-0.5b-1.5b-cpu-check", "--fit-profile", "qwen2.5-coder-0.5b-1.5b-cpu",
                    "--fit-device", CPU_FILE, "--batch", "1"]),
    ("hw-h200-ctx", ["hardware", "--device", "h200", "--device", "a100-80gb-sxm", "--context", "600,4000",
                     "--gamma-max", "6"]),
    ("rec-vllm", ["recommend", "--engine", "vllm", "--profile", "ibed-llava1.5-7b-68m", "--method", "M",
                  "--scenario", "ChartQA", "--pair", "llava-1.5-7b-68m", "--device", "a100-80gb-sxm",
                  "--context", "600"]),
    ("rec-sglang", ["recommend", "--engine", "sglang", "--profile", "ibed-llava1.5-7b-68m", "--method", "T",
                    "--scenario", "ChartQA", "--pair", "llava-1.5-7b-68m", "--device", "h100-sxm",
                    "--batch", "1-32"]),
    ("rec-qwen", ["recommend", "--engine", "vllm", "--profile", "qwen2.5-coder-0.5b-1.5b-cpu-check",
                  "--pair", "qwen2.5-coder-0.5b-1.5b", "--device", "l4", "--runtime", "hf-eager"]),
    ("serve-rate", ["serve", "--rate", "8", "--gamma", "3", "--alpha", "0.7", "--slo", "ttft=500,tpot=50",
                    "--requests", "200", "--no-progress"]),
    ("serve-rates", ["serve", "--rates", "1,4,16,64", "--gamma", "3", "--alpha", "0.7", "--requests", "150",
                     "--no-progress"]),
    ("serve-maxrate", ["serve", "--gamma", "3", "--alpha", "0.7", "--slo", "ttft=500,tpot=30", "--max-rate",
                       "--requests", "150", "--no-progress"]),
    ("serve-policy", ["serve", "--rate", "16", "--gamma-by-batch", "1-8:5,9-64:2", "--sd-off-from-batch",
                      "64", "--alpha", "0.8", "--requests", "150", "--tp", "2", "--no-progress"]),
    ("serve-zoo", ["serve", "--cost-profile", "zoo-cpu-batch", "--acceptance-profile", "zoo-cpu-batch",
                   "--method", "M", "--scenario", "zoo-1img", "--rate", "20", "--requests", "60",
                   "--no-progress"]),
    ("serve-qwen", ["serve", "--cost-profile", "qwen2.5-coder-0.5b-1.5b-cpu-batch", "--pair",
                    "qwen2.5-coder-0.5b-1.5b", "--rates", "0.5,2", "--gamma", "3", "--alpha", "0.6",
                    "--requests", "40", "--prompt-tokens", "64", "--output-tokens", "32", "--images", "0",
                    "--no-progress"]),
    ("validate", ["validate"]),
)


def commands() -> list[tuple[str, list[str]]]:
    """Every (name, argv) this script runs: each profile's predict and sweep, then the plans."""
    out = []
    for p in PROFILES:
        out.append((f"predict-{p}", ["predict", "--profile", p, "--gamma", "3"]))
        out.append((f"predict-new-{p}", ["predict", "--profile", p, "--gamma", "5", "--new-tokens", "64"]))
        out.append((f"predict-alpha-{p}", ["predict", "--profile", p, "--gamma", "4", "--alpha", "0.7"]))
        out.append((f"sweep-{p}", ["sweep", "--profile", p, "--gamma", "1-6"]))
    out.append(("predict-textbook", ["predict", "--gamma", "5", "--textbook"]))
    trees = "qwen2.5-coder-0.5b-1.5b-cpu-trees"
    out.append(("predict-trees", ["predict", "--profile", trees, "--gamma", "4", "--tree", "2,2,1",
                                  "--tree", "chain:3", "--best-tree"]))
    out.append(("predict-policy", ["predict", "--profile", "zoo-cpu", "--gamma", "4", "--policy",
                                   "heuristic:4,max=8", "--policy", "fixed:3", "--method", "M"]))
    out.append(("sweep-ctx", ["sweep", "--profile", "zoo-cpu-batch", "--context-tokens", "300", "--method",
                              "MT"]))
    out += list(PLANS)
    return [(n, a) for n, argv in out for n, a in ((n, argv), (f"{n}.json", argv + ["--json"]))]


def run_one(argv: list[str]) -> str:
    """Exit code, stdout and stderr of one in-process run."""
    from specsim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # a crash is an output too: it must not leave an older capture standing
            code = f"crashed: {type(exc).__name__}: {exc}"
    head = f"$ specsim {' '.join(argv)}\nexit {code}\n"
    return f"{head}--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}"


def capture(folder: Path, only: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    Path(CPU_FILE).write_text(json.dumps(CPU_DEVICE))
    for name, argv in commands():
        if only and only not in name:
            continue
        (folder / f"{name}.txt").unlink(missing_ok=True)
        t0 = time.perf_counter()
        (folder / f"{name}.txt").write_text(run_one(argv))
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in b.glob("*.txt")})  # what AFTER ran (a capture may be partial: --only)
    changed = 0
    for n in names:
        x = (a / n).read_text().splitlines() if (a / n).exists() else ["<missing>"]
        y = (b / n).read_text().splitlines()
        if x != y:
            changed += 1
            print(f"=== {n}")
            print("\n".join(list(difflib.unified_diff(x, y, lineterm="", n=1))[:40]))
    print(f"{len(names) - changed} of {len(names)} outputs identical, {changed} changed")
    return 1 if changed else 0


def main() -> int:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="folder to write the outputs to")
    ap.add_argument("--only", help="run only the commands whose name contains this")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out or --compare is required")
    capture(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
