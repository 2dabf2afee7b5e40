"""``specsim check --temperature T`` (T > 0): sampled speculative decoding over several seeds per prompt vs the
Monte Carlo prediction from the profile's β traces, with 95% intervals (:mod:`specsim.check_sampled`).

The sampled mode of :mod:`calibrate.cli_check` (which registers the flags below and hands over); torch is
imported only when the command runs. The runs are :func:`calibrate.check_sampled.run_sampled_check`.
"""

from __future__ import annotations

import sys

from specsim.bounds import number_arg
from specsim.errors import SpecsimError
from specsim.jsonio import dumps_json
from specsim.profile import save_profile


def add_sampling_args(parser) -> None:
    """--temperature, --seeds and --seed of ``specsim check``."""
    smp = parser.add_argument_group("sampling (T > 0: seeded runs vs Monte Carlo intervals from beta)")
    smp.add_argument("--temperature", type=number_arg("temperature", zero_ok=True), default=0.0,
                     help="sampling temperature T (default 0: greedy, checked against trace replay). T > 0 runs "
                          "every prompt x method x gamma once per seed and checks tau and speedup against 95%% "
                          "prediction intervals from a Monte Carlo over the profile's beta traces, measured at the "
                          "same T ('specsim calibrate acceptance --temperature T')")
    smp.add_argument("--seeds", type=number_arg("repeats", integer=True), default=4,
                     help="with T > 0: runs per prompt, one seed each, in rounds (default 4, at least 2); "
                          "--halfwidth, --min-rounds and --max-rounds are for greedy checks")
    smp.add_argument("--seed", type=number_arg("seed", integer=True), default=0,
                     help="base seed of the runs' generators and of the Monte Carlo (default 0)")


def cmd_check_sampled(args) -> int:
    """Check arguments and the profile, load models, run, predict, write the rows, print."""
    import numpy as np

    from calibrate.check_sampled import run_sampled_check
    from calibrate.cli_acceptance import _progress, load_setup
    from calibrate.cli_check import entries_of, prepare
    from specsim.check_report import summary
    from specsim.check_sampled import check_sampling_entry, coverage, sampled_row, sampled_table

    if args.seeds < 2:
        raise SpecsimError(f"--seeds: expected at least 2 runs per prompt with --temperature (one run gives no "
                           f"spread to judge), got {args.seeds}")
    gammas, profile_path, profile, methods = prepare(args)
    for entry in profile.acceptance:  # before models load: a wrong temperature costs no loading
        if (methods is None or entry.method in methods) and args.scenario in (None, entry.scenario):
            check_sampling_entry(entry, args.temperature)
    setup = load_setup(args, methods=methods, cache_captions=False)
    entries = entries_of(setup, profile, args.scenario)
    for entry in entries.values():
        check_sampling_entry(entry, args.temperature)
    progress = None if args.no_progress else (
        lambda xs, rnd: _progress(xs, args, f"sampled check, seed {rnd + 1}/{args.seeds}"))
    runs = run_sampled_check(setup, gammas, temperature=args.temperature, seeds=args.seeds,
                             max_new_tokens=args.max_new_tokens, device=args.device, seed=args.seed,
                             max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
                             progress=progress)
    rng = np.random.default_rng(args.seed)
    rows = []
    for n, reqs in setup.groups.items():
        ids = [r.prompt_id for r in reqs]
        for m in setup.methods:
            specs = [runs.specs[(m, p)] for p in ids]
            rows += [sampled_row(profile, entries[(n, m)], g, specs, runs.measured(m, g, ids),
                                 temperature=args.temperature, rng=rng) for g in gammas]
    if not args.no_write:
        save_profile(profile.with_checks(rows), profile_path)
    if args.json:
        print(dumps_json({"rows": [r.to_json() for r in rows], "coverage": coverage(rows), "summary": summary(rows),
                          "temperature": args.temperature, "rounds": runs.rounds, "seconds": runs.seconds}))
        return 0
    print(sampled_table(rows))
    print(f"T={args.temperature:g}: {runs.rounds} seed(s) per prompt in {runs.seconds:.0f} s", file=sys.stderr)
    return 0
