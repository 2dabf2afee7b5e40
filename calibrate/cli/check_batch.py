"""``specsim check --batch B``: the batched engine against batched target-only decoding, B requests per
batch, compared with the batched walk (handler called by :mod:`calibrate.cli.cmd_check` once
:mod:`calibrate.cli.check_request` has checked the flags)."""

from __future__ import annotations

import sys

from specsim.jsonio import dumps_json
from specsim.profiles import save_profile


def cmd_check_batch(args, request, setup) -> int:
    """Per batch size: run in rounds, price, write the rows, print the table and summary (``request``: the
    checked flags and profile, :mod:`calibrate.cli.check_request`; its ``synthetic``: the
    --synthetic-acceptance schedule's spec; ``setup``: the loaded models and requests)."""
    from calibrate.measure.batch_check_runs import batch_check_rows, preflight, run_batch_check
    from calibrate.measure.synthetic_schedules import check_acceptance, marked, synthetic_note
    from calibrate.workload.run_setup import progress
    from specsim.check.check_tables import batch_table, summary, summary_line, terms_table

    gammas, profile, synthetic = request.gammas, request.profile, request.synthetic
    sizes = list(request.sizes)
    setup, schedule, entries = check_acceptance(
        setup, profile, synthetic, scenario=args.scenario, max_new_tokens=args.max_new_tokens, gammas=gammas,
        seed=args.seed,
    )  # fmt: skip
    preflight(setup, entries, sizes, gammas, args.max_new_tokens)
    grid = None
    if args.remeasure_batched:
        from calibrate.measure.interleaved_grid import InterleavedGrid

        grid = InterleavedGrid(profile, setup, seed=args.seed)
    measured, seconds = [], 0.0
    for b in sizes:
        bar = (
            None
            if args.no_progress
            else (lambda xs, rnd, b=b: progress(xs, True, f"batch {b}, round {rnd + 1}/{args.max_rounds}"))
        )
        runs = run_batch_check(
            setup,
            gammas,
            b,
            max_new_tokens=args.max_new_tokens,
            halfwidth=args.halfwidth,
            min_rounds=args.min_rounds,
            max_rounds=args.max_rounds,
            max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
            progress=bar,
            before_round=None if grid is None else (lambda rnd, b=b: grid.round((b,))),
            acceptance=schedule,
        )
        seconds += runs.seconds
        measured.append((b, runs))
    if grid is not None:
        grid.complete(args.min_rounds)
        profile = grid.measured_profile()
        print(f"batched cost re-measured between the check's rounds: {grid.seconds:.0f} s", file=sys.stderr)
    rows = [
        row
        for b, runs in measured
        for row in batch_check_rows(runs, profile, entries, setup.methods, gammas, b, args.max_new_tokens)
    ]
    rows = rows if synthetic is None else marked(rows, synthetic)
    if not args.no_write:
        save_profile(profile.with_checks(rows), request.profile_path)
    if args.json:
        print(dumps_json({"rows": [r.to_json() for r in rows], "summary": summary(rows), "seconds": seconds}))
        return 0
    print(batch_table(rows))
    print("\n" + terms_table(rows))
    print(summary_line(rows))
    if synthetic is not None:
        print(synthetic_note(synthetic))
    print(f"measured in {seconds:.0f} s", file=sys.stderr)
    return 0
