"""Benchmark: the search time of ``specsim tune``'s executors on this machine — N simulations of R requests
each, on 1 and 2 local processes and on Ray with 2 workers (a local cluster this script starts), and the
scaling over one process.

Each executor runs the same exhaustive study over N deployments of LLaVA-1.5-7B / 68M on an H100 (γ 0..7 in
four decode-batch bands, the first N in product order), R requests at 16 req/s (512 text tokens + 1 image ->
256 output tokens, i.i.d. α = 0.7), in ask/tell rounds of 32 trials, and the trials must come out identical
(checked). Ray's cluster start is timed apart from its search. Needs the tune extra (optuna, ray).

Run: python bench/tune_scaling.py [--sims 2000] [--requests 1000]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import time  # noqa: E402

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402
from specsim.serve.compare import Workload  # noqa: E402
from specsim.tune.executor import LocalExecutor, RayExecutor  # noqa: E402
from specsim.tune.objective import make_objective  # noqa: E402
from specsim.tune.space import parse_space  # noqa: E402
from specsim.tune.study import StudyPlan, run_study  # noqa: E402
from specsim.tune.trial import TuneContext  # noqa: E402


def main() -> None:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulations per executor (at most 4096)")
    requests = number_arg("size", integer=True)
    ap.add_argument("--requests", type=requests, default=1000, help="requests per simulation")
    args = ap.parse_args()
    space = parse_space(
        devices="h100-sxm",
        drafts=["llava-1.5-68m@0.7"],
        gammas="0-7",
        gamma_breaks="8,32,128",
        max_num_seqs="256",
    )
    if not 1 <= args.sims <= space.size:
        ap.error(f"--sims: expected 1..{space.size}, got {args.sims}")
    context = TuneContext("llava-1.5-7b", Workload(args.requests, 512, 1, 256), 16.0)
    objective = make_objective("tokens-per-gpu", has_slo=False, slo_attainment=0.9, devices=space.devices)
    plan = StudyPlan("exhaustive", args.sims, 32)
    print(f"{args.sims} simulations of {args.requests} requests each (exhaustive study, rounds of 32)")
    rows, trials = [], {}
    for name, executor in (
        ("local, 1 process", LocalExecutor(1)),
        ("local, 2 processes", LocalExecutor(2)),
        ("ray, 2 workers", RayExecutor(None, 2)),
    ):
        t0 = time.perf_counter()
        with executor:
            t1 = time.perf_counter()
            outcome = run_study(space, context, objective, plan, executor)
            t2 = time.perf_counter()
        assert outcome.simulations == args.sims
        trials[name] = [(r.number, r.deployment, r.result) for r in outcome.records]
        rows.append((name, t2 - t1, t1 - t0))
    same = all(t == trials["local, 1 process"] for t in trials.values())
    base = rows[0][1]
    print(f"  {'executor':<20} {'search s':>9} {'sims/s':>8} {'scaling':>8} {'start s':>8}")
    for name, search_s, start_s in rows:
        rate, scaling = args.sims / search_s, base / search_s
        print(f"  {name:<20} {search_s:>9.1f} {rate:>8.2f} {scaling:>7.2f}x {start_s:>8.1f}")
    print(f"trials identical across executors: {same}; CPUs here: {os.cpu_count()}")


if __name__ == "__main__":
    sys.exit(run_main(main))
