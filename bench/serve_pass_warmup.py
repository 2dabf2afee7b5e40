"""Benchmark: how much slower the server loop's target passes run than the profile's batched grid, by steps
since the last request joined, beside the static batched engine on the same requests.

Diagnostic for the serving check (issue: `specsim serve` checked on a real server loop): the simulation prices
each pass by the profile's ``server_loop.target_pass_scale`` (what `calibrate latency` measured on its own
loop, arrivals spaced to keep its batch nearly full), printed beside. This prints, for the zoo's mixed
workload at one Poisson rate, target-only, the loop's pass ms over the grid's at the same batch and cache
width for the k-th step after an admission, so a longer warm-up (caches refilled, a core waking from idle
between arrivals) shows as ratios above the steady state:

    python bench/serve_pass_warmup.py --profile specsim/profiles/measured/zoo-cpu-batch.json --rate 4
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = ScriptParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--rate", type=number_arg("rate_per_s"), default=4.0, help="requests per second")
    ap.add_argument("--requests", type=number_arg("size", integer=True), default=24)
    ap.add_argument("--new-tokens", type=number_arg("output_tokens", integer=True), default=32)
    ap.add_argument("--rounds", type=number_arg("repeats", integer=True), default=2)
    ap.add_argument("--seed", type=number_arg("seed", integer=True), default=0)
    args = ap.parse_args(argv)  # bad input is refused before torch and the models load

    from calibrate.measure.serve_check_runs import workload_order
    from calibrate.measure.server_loop_costs import loop_passes
    from calibrate.run.batch_engine import batch_target_decode
    from calibrate.run.server_loop import serve_loop
    from calibrate.workload.run_setup import load_setup, read_workload
    from specsim.cli.main import build_parser
    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.costs.pass_cost import TARGET
    from specsim.profiles import load_profile
    from specsim.serve.arrivals import poisson_arrivals

    check = ["check", "--preset", "zoo", "--threads", "1", "--profile", args.profile, "--method", "M"]
    flags = build_parser().parse_args([*check, "--max-new-tokens", str(args.new_tokens)])
    setup = load_setup(flags, read_workload(flags))
    cost = GridPassCost.batch(load_profile(args.profile).latency, "the profile has no batched grids")
    order = workload_order(setup, args.requests)
    reqs = [setup.groups[g][i] for g, i in order]
    arrival = list(poisson_arrivals(len(reqs), args.rate, np.random.default_rng(args.seed)))
    kw = {"max_new_tokens": args.new_tokens, "eos_token_id": setup.eos}
    serve_loop(setup.target, setup.draft, reqs[:2], [0.0, 0.0], gamma=0, **kw)  # warm-up
    by_step: dict[int, list[tuple[float, float]]] = {}
    static: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        for p in loop_passes(serve_loop(setup.target, setup.draft, reqs, arrival, gamma=0, **kw)):
            grid_ms = float(cost.pass_ms(TARGET, 1, float(p.width), p.decoding).ms)
            by_step.setdefault(min(p.since_admission, 10), []).append((p.verify_ms, grid_ms))
        for r in reqs[:6]:  # the same requests alone through the static engine, passes back to back
            for blk in batch_target_decode(setup.target, [r], **kw).blocks[1:]:
                grid = cost.pass_ms(TARGET, 1, float(blk.target_columns), 1).ms
                static.append((blk.verify_ms, float(grid)))
    print(f"rate {args.rate:g}/s, target-only: loop pass ms over the grid's, by steps since an admission")
    print("steps since  passes  median ms  grid ms  sum ratio")
    for k, v in sorted(by_step.items()):
        a = np.asarray(v)
        label = f"{k}" if k < 10 else ">= 10"
        print(
            f"{label:>11}  {len(a):6d}  {np.median(a[:, 0]):9.3f}  {np.median(a[:, 1]):7.3f}  "
            f"{a[:, 0].sum() / a[:, 1].sum():9.2f}"
        )
    a = np.asarray(static)
    print(f"static engine, same requests alone: sum ratio {a[:, 0].sum() / a[:, 1].sum():.2f}")
    loop = cost.batched.server_loop
    if loop is not None and loop.target_pass_scale:
        print("the profile's target_pass_scale: " + " ".join(f"{x:.2f}" for x in loop.target_pass_scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
