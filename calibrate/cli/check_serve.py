"""``specsim check --serve-rates R,…``: a real server loop (continuous batching, SD on and off) at each
request rate against ``specsim serve``'s simulation of the same requests (options registered and handler
called by :mod:`calibrate.cli.cmd_check`)."""

from __future__ import annotations

import sys

from specsim.bounds import number_arg
from specsim.jsonio import dumps_json
from specsim.profiles import save_profile
from specsim.serve.arrivals import rates_arg


def serve_args(parser) -> None:
    """--serve-rates, --serve-requests, --max-num-seqs."""
    grp = parser.add_argument_group("serving (a real server loop at request rates, SD on and off)")
    grp.add_argument(
        "--serve-rates",
        type=rates_arg,
        default=None,
        help="serve a Poisson load at these request rates (requests/s, e.g. 0.5,4,32: light, near the knee, "
        "past it) with continuous batching, target-only and SD per --method x --gamma, and compare p50/p90 "
        "TTFT and TPOT and output tokens/s with the simulation; needs the profile's batched cost",
    )
    grp.add_argument(
        "--serve-requests",
        type=number_arg("size", integer=True),
        default=None,
        help="requests per run, the prompts in turn, image groups interleaved (default 24)",
    )
    grp.add_argument(
        "--max-num-seqs",
        type=number_arg("batch", integer=True),
        default=None,
        help="most requests decoding at once (default 8; at most the batched grid's largest B)",
    )


def cmd_check_serve(args, request, setup) -> int:
    """Run the loop in rounds, simulate each (rate, side), write the rows, print the table and summary
    (``request``: the checked flags and profile, :mod:`calibrate.cli.check_request`; its ``synthetic``: the
    --synthetic-acceptance schedule's spec; ``setup``: the loaded models and requests)."""
    from calibrate.measure.check_runs import greedy_trace
    from calibrate.measure.serve_check_runs import run_serve_check, serve_check_rows, workload_order
    from calibrate.measure.synthetic_schedules import check_acceptance, marked, synthetic_note
    from calibrate.workload.run_setup import progress
    from specsim.check.serve_comparison import serve_summary, serve_table

    gammas, profile, synthetic = request.gammas, request.profile, request.synthetic
    setup, schedule, entries = check_acceptance(
        setup, profile, synthetic, scenario=args.scenario, max_new_tokens=args.max_new_tokens, gammas=gammas,
        seed=args.seed,
    )  # fmt: skip
    groups = list(setup.groups)
    mixed = f"{args.scenario or setup.name}-mixed"
    scenario = setup.scenario(groups[0], args.scenario) if len(groups) == 1 else mixed
    order = workload_order(setup, args.serve_requests)
    traces = {  # each request's trace, before anything runs
        m: [greedy_trace(entries[(g, m)], setup.groups[g][i].prompt_id) for g, i in order]
        for m in setup.methods
    }
    sides = [(m, g) for m in setup.methods for g in gammas]
    grid = None
    if args.remeasure_batched:
        from calibrate.measure.interleaved_grid import InterleavedGrid

        grid = InterleavedGrid(profile, setup, seed=args.seed)
    bar = (
        None
        if args.no_progress
        else (lambda xs, rnd: progress(xs, True, f"serving round {rnd + 1}/{args.max_rounds}"))
    )
    runs = run_serve_check(
        setup,
        args.serve_rates,
        sides,
        requests=args.serve_requests,
        max_new_tokens=args.max_new_tokens,
        max_num_seqs=args.max_num_seqs,
        seed=args.seed,
        halfwidth=args.halfwidth,
        min_rounds=args.min_rounds,
        max_rounds=args.max_rounds,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        progress=bar,
        before_round=None if grid is None else (lambda rnd: grid.serving_round()),
        acceptance=schedule,
    )
    if grid is not None:
        profile = grid.measured_profile()
        print(f"batched cost re-measured between the serving rounds: {grid.seconds:.0f} s", file=sys.stderr)
    rows, drift = serve_check_rows(
        runs,
        profile,
        entries=entries,
        traces=traces,
        groups=groups,
        sides=sides,
        scenario=scenario,
        rates=args.serve_rates,
        new_tokens=args.max_new_tokens,
        max_num_seqs=args.max_num_seqs,
        seed=args.seed,
    )
    rows = rows if synthetic is None else marked(rows, synthetic)
    if not args.no_write:
        save_profile(profile.with_serve_checks(rows), request.profile_path)
    if args.json:
        out = {"rows": [r.to_json() for r in rows], "summary": serve_summary(rows)}
        print(dumps_json(out | {"rounds": runs.rounds, "seconds": runs.seconds, "host_pass_drift": drift}))
        return 0
    print(serve_table(rows))
    summ = serve_summary(rows)
    print(
        "|error| median / max: "
        + "; ".join(
            f"{name} {summ[name]['median_abs_rel_err']:.1%} / {summ[name]['max_abs_rel_err']:.1%}"
            for name in ("tpot_p50_ms", "ttft_p90_ms", "output_tokens_per_s", "all")
        )
    )
    if synthetic is not None:
        print(synthetic_note(synthetic))
    if drift is not None:
        print(
            f"host: the loop's target passes took {drift:.3f} x the profile's batched grid ms "
            "(> 1: slower than when the profile was measured)"
        )
    print(f"{runs.rounds} round(s) in {runs.seconds:.0f} s", file=sys.stderr)
    return 0
