"""Benchmark: read a JSONL trace of 10^6 requests (``serve --trace``), and refuse one whose last line is bad.

Writes both files to a temporary folder, then times ``specsim.serve.arrivals.read_trace`` on each in a fresh
process per checkout (``--root``: a checkout's folder put first on the path, so two trees compare on one
host; default: this one). Prints the seconds each took (issue 51: on main, 120 s and more, and 61 s to
refuse the bad one, on a busy 2-core host; the goal: a few seconds, and a bad line refused no later than a
good file is read).

Run: python bench/trace_read_speed.py [--lines 1000000] [--root /work/main --root .]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402

_TIMED = """
import sys, time
from specsim.errors import SpecsimError
from specsim.serve.arrivals import read_trace
t = time.perf_counter()
try:
    n = len(read_trace(sys.argv[1]))
except SpecsimError as err:
    n = str(err)[:60]
print(f"{time.perf_counter() - t:.2f} s ({n})")
"""


def write_traces(folder: Path, lines: int) -> tuple[Path, Path]:
    """A good trace of ``lines`` requests (0.01 s apart) and the same with its last line cut mid-way."""
    good, bad = folder / "good.jsonl", folder / "bad.jsonl"
    rows = (
        json.dumps(
            {"arrival_s": 0.01 * i, "prompt_tokens": 100 + i % 400, "images": i % 3, "output_tokens": 64}
        )
        for i in range(lines)
    )
    text = "\n".join(rows) + "\n"
    good.write_text(text)
    bad.write_text(text[: len(text) - 20] + "\n")
    return good, bad


def main() -> int:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=number_arg("size", integer=True), default=1_000_000)
    ap.add_argument("--root", action="append", default=None, help="a checkout to time (repeatable)")
    args = ap.parse_args()
    roots = args.root or [str(Path(__file__).resolve().parents[1])]
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = write_traces(Path(tmp), args.lines)
        for root in roots:
            for path in (good, bad):
                env = os.environ | {"PYTHONPATH": str(Path(root).resolve())}
                out = subprocess.run(
                    [sys.executable, "-c", _TIMED, str(path)], capture_output=True, text=True, env=env
                )
                print(f"{root} {path.name}: {out.stdout.strip() or out.stderr.strip()[-200:]}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
