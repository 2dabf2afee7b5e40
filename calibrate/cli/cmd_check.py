"""``specsim check``: run real speculative decoding and compare it with the profile's prediction.

Found by :mod:`specsim.cli.main` through the ``specsim.commands`` entry point; torch is imported only when
the command runs. Greedy (T = 0): the runs are :func:`calibrate.measure.check_runs.run_check` (rounds until
each row's measured speedup is precise enough); the predictions and tables are
:mod:`specsim.check.comparison` and :mod:`specsim.check.check_tables`. Sampled (--temperature T > 0): seeded
runs (:func:`calibrate.measure.sampled_check_runs.run_sampled_check`) against Monte Carlo intervals from the
profile's β traces (:mod:`specsim.check.sampled`).
"""

from __future__ import annotations

import sys

from calibrate.cli.check_request import ROUND_DEFAULTS
from calibrate.cli.check_serve import serve_args
from calibrate.cli.llama_cpp_handlers import cmd_check_llama
from calibrate.cli.llama_cpp_options import llama_cpp_args, refuse_llama_cpp_flags
from calibrate.cli.shared_options import IntList, method_args, model_args
from specsim.bounds import interval_arg, name_arg, number_arg
from specsim.jsonio import dumps_json
from specsim.profiles import save_profile

_DESC = (
    "Per gamma and method: tau and speedup over target-only decoding, predicted from the profile (tau from "
    "trace replay; with a cost model, every forward priced at its own rows, context and batch along each "
    "prompt's blocks, plus the engine's overhead) vs measured (wall clock, interleaved, repeated in rounds "
    "until the measured speedup's 95% confidence half-width is within --halfwidth), with the textbook "
    "prediction (v = 1, i.i.d. alpha) beside it. Writes the rows into the profile's checks."
)


def register(subparsers) -> None:
    """Add ``specsim check``."""
    chk = subparsers.add_parser(
        "check", help="run real speculative decoding and compare with the prediction", description=_DESC
    )
    chk.add_argument("--profile", required=True, help="profile with latency and acceptance sections")
    chk.add_argument(
        "--gamma",
        action=IntList,
        default=[1, 2, 3, 4, 6, 8],
        help="gammas, e.g. 1,2,3,4,6,8 or 1-4 (default 1,2,3,4,6,8)",
    )
    model_args(chk)
    method_args(chk)
    chk.add_argument(
        "--scenario",
        type=name_arg,
        default=None,
        help="scenario name as in 'calibrate acceptance' (default: the prompt set's name)",
    )
    chk.add_argument(
        "--tree",
        action="append",
        default=None,
        metavar="SPEC",
        help="also run token-tree decoding "
        "with this tree (repeatable; e.g. 4,2,1, chain:5, parents:0,0,1); needs top-k traces "
        "('calibrate acceptance --top-k K') and tree grids ('calibrate latency --tree-sizes/--tree')",
    )
    chk.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="SPEC",
        help="also run a draft-length "
        "policy (repeatable; e.g. heuristic:4,max=8, confidence:0.4,gamma=8, batch:1=4@1); every gamma "
        "it reaches must be in the profile's latency grid",
    )
    rep = chk.add_argument_group("repeats (rounds of every prompt x method x gamma, interleaved)")
    rep.add_argument(
        "--halfwidth",
        type=interval_arg(0.0, 1.0, "a fraction in (0, 1)", lo_open=True, hi_open=True),
        default=ROUND_DEFAULTS["halfwidth"],
        help="stop repeating a row once its "
        "measured decode-phase speedup has a 95%% half-width within this fraction (default 0.015; "
        "--serve-rates: a rate and side once its p50 TPOT, p90 TTFT and output tokens/s have)",
    )
    rep.add_argument(
        "--min-rounds",
        type=number_arg("repeats", integer=True),
        default=ROUND_DEFAULTS["min_rounds"],
        help="at least this many rounds (default 2; one round gives no half-width)",
    )
    rep.add_argument(
        "--max-rounds",
        type=number_arg("repeats", integer=True),
        default=ROUND_DEFAULTS["max_rounds"],
        help="at most this many rounds (default 6)",
    )
    rep.add_argument(
        "--max-minutes",
        type=number_arg("minutes"),
        default=None,
        help="stop starting rounds after this long, once --min-rounds have run",
    )
    chk.add_argument(
        "--batch",
        action=IntList,
        unit="batch",
        default=None,
        help="run B requests together (batched engine against batched target-only decoding), e.g. 1,2,4,8; "
        "fixed gamma, greedy; needs the profile's batched cost (calibrate latency --request-batches)",
    )
    chk.add_argument(
        "--remeasure-batched",
        action="store_true",
        help="with --batch or --serve-rates: measure the profile's batched cost again in this process, one "
        "sweep round before each of the check's rounds (at its batch sizes and gammas, prompts sized to the "
        "check's own), so prediction and runs share the host's minutes; predict from it and write it with "
        "the rows",
    )
    chk.add_argument(
        "--remeasure",
        action="store_true",
        help="with --runtime llama.cpp, one request at a time: before each round, one of the prompt set's "
        "last two (held out, as the calibration's real blocks) runs target-only and at each gamma; the "
        "target-only step and each gamma's block are priced from those runs, so prediction and runs share "
        "the host's minutes; written with the rows",
    )
    serve_args(chk)
    chk.add_argument(
        "--synthetic-acceptance",
        metavar="SPEC",
        default=None,
        help="time SD with scripted accept decisions (as vLLM's synthetic rejection sampling): every block "
        "accepts what a schedule says, over real passes, so random weights at any size work; SPEC: tau:T@G, "
        "tau:PROFILE:METHOD/SCENARIO, rates:R0,R1,... (per output position) or "
        "traces:PROFILE[:METHOD[/SCENARIO]], drawn with --seed; greedy, no EOS; the prediction prices the "
        "same schedule and the rows say so",
    )
    _sampling_args(chk)
    chk.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    chk.add_argument("--no-write", action="store_true", help="do not write the rows into the profile")
    llama_cpp_args(chk, "--runtime")
    chk.set_defaults(func=cmd_check)


def _warn_other_host(profile, device: str) -> None:
    """Say on screen when the profile's latency comes from another device model or thread count."""
    import torch

    from calibrate.measure.check_runs import other_host
    from calibrate.measure.latency_assembly import device_name

    measured = profile.latency.provenance or profile.provenance  # the latency's own, when it has one
    why = other_host(measured, device_name(str(device)), torch.get_num_threads())
    if why:
        print(f"warning: {why}", file=sys.stderr)


def cmd_check(args) -> int:
    """Check arguments and the profile (:func:`calibrate.cli.check_request.check_request`), load the models
    once, then run the mode: run in rounds, write the rows, print the tables."""
    from calibrate.cli.check_request import BATCH, SAMPLED, SERVE, check_request
    from calibrate.cli.latency_checks import refuse_other_pair
    from calibrate.workload.run_setup import load_setup, setup_labels

    if args.runtime == "llama.cpp":
        return cmd_check_llama(args)
    refuse_llama_cpp_flags(args, "--runtime")
    request = check_request(args)
    refuse_other_pair(request.profile_path, "--profile", *setup_labels(args))
    setup = load_setup(args, request.workload, cache_captions=False)
    if request.mode == SAMPLED:
        return cmd_check_sampled(args, request, setup)
    if request.mode == SERVE:
        from calibrate.cli.check_serve import cmd_check_serve

        return cmd_check_serve(args, request, setup)
    if request.mode == BATCH:
        from calibrate.cli.check_batch import cmd_check_batch

        return cmd_check_batch(args, request, setup)
    return cmd_check_greedy(args, request, setup)


def cmd_check_greedy(args, request, setup) -> int:
    """Greedy (T = 0): run in rounds, price, write the rows, print the tables (``setup``: the loaded
    models and requests, :class:`calibrate.workload.run_setup.Setup`)."""
    from calibrate.measure.check_runs import block_spread, check_rows, preflight, run_check
    from calibrate.measure.synthetic_schedules import check_acceptance, marked, synthetic_note
    from calibrate.workload.run_setup import progress
    from specsim.check.check_tables import check_table, rounds_note, summary, terms_table
    from specsim.draft_shapes.draft_plans import draft_label

    gammas, profile, synthetic = request.gammas, request.profile, request.synthetic
    drafts = list(request.drafts)
    if drafts:
        preflight(
            profile, [a for a in profile.acceptance if a.method in setup.methods], drafts, args.max_new_tokens
        )
    setup, schedule, entries = check_acceptance(  # before any run: a missing entry costs no measuring
        setup, profile, synthetic, scenario=args.scenario, max_new_tokens=args.max_new_tokens, gammas=gammas,
        seed=args.seed,
    )  # fmt: skip
    _warn_other_host(profile, args.device)  # after the checks above: an error stays one line
    bar = (
        None
        if args.no_progress
        else (lambda xs, rnd: progress(xs, True, f"check round {rnd + 1}/{args.max_rounds}"))
    )
    runs = run_check(
        setup,
        gammas + drafts,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        halfwidth=args.halfwidth,
        min_rounds=args.min_rounds,
        max_rounds=args.max_rounds,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        progress=bar,
        acceptance=schedule,
    )
    rows, agreement, stages = check_rows(profile, setup, entries, runs, gammas, drafts)
    rows = rows if synthetic is None else marked(rows, synthetic)
    if not args.no_write:
        save_profile(profile.with_checks(rows), request.profile_path)
    if args.json:
        print(
            dumps_json(
                {
                    "rows": [r.to_json() for r in rows],
                    "summary": summary(rows),
                    "rounds": runs.rounds,
                    "seconds": runs.seconds,
                    "replay_equals_engine": {
                        f"{m}/{s}": list(v) for (m, s, k), v in agreement.items() if k == "gamma"
                    },
                    "tree_replay_equals_engine": {
                        f"{m}/{s}": list(v) for (m, s, k), v in agreement.items() if k == "tree"
                    },
                    "policy_replay_equals_engine": {
                        f"{m}/{s}": list(v) for (m, s, k), v in agreement.items() if k == "policy"
                    },
                    "stages": {f"{m}/{s}": v for (m, s), v in stages.items()},
                    "block_ms_spread": {
                        f"{m}/{draft_label(g)}": block_spread(res) for (m, g), res in runs.first.items()
                    },
                }
            )
        )
        return 0
    print(check_table(rows))
    terms = terms_table(rows)
    more = rounds_note(rows, runs.rounds, runs.seconds, args.halfwidth)
    if terms:
        print("\n" + terms)
    for (m, s, kind), (same, total) in agreement.items():
        what = {"gamma": "greedy tau", "tree": "greedy trees", "policy": "greedy policies"}[kind]
        print(f"{s}/{m}: {what}, trace replay == engine for {same}/{total} (prompt, {kind})")
    if synthetic is not None:
        print(synthetic_note(synthetic))
    print(f"{runs.rounds} round(s) in {runs.seconds:.0f} s", file=sys.stderr)
    if more:
        print(more, file=sys.stderr)
    return 0


def _sampling_args(parser) -> None:
    """--temperature, --seeds and --seed of ``specsim check``."""
    smp = parser.add_argument_group("sampling (T > 0: seeded runs vs Monte Carlo intervals from beta)")
    smp.add_argument(
        "--temperature",
        type=number_arg("temperature", zero_ok=True),
        default=0.0,
        help="sampling temperature T (default 0: greedy, checked against trace replay). T > 0 runs "
        "every prompt x method x gamma once per seed and checks tau and speedup against 95%% "
        "prediction intervals from a Monte Carlo over the profile's acceptance traces, measured at "
        "the same T along the target's sampled paths ('specsim calibrate acceptance --temperature T "
        "--sample-paths 8'; without paths, beta on the greedy output, with a warning)",
    )
    smp.add_argument(
        "--seeds",
        type=number_arg("repeats", integer=True),
        default=None,
        help="with T > 0 only: runs per prompt, one seed each, in rounds (default 4, at least 2); "
        "--halfwidth, --min-rounds and --max-rounds are for greedy checks",
    )
    smp.add_argument(
        "--seed",
        type=number_arg("seed", integer=True),
        default=0,
        help="base seed of the runs' generators and of the Monte Carlo (default 0)",
    )


def cmd_check_sampled(args, request, setup) -> int:
    """Sampled (T > 0): run, predict, write the rows, print."""
    import numpy as np

    from calibrate.measure.check_runs import entries_of
    from calibrate.measure.sampled_check_runs import run_sampled_check, sampled_rows
    from calibrate.workload.run_setup import progress
    from specsim.check.check_tables import coverage, sampled_table, summary
    from specsim.check.sampled_runs import check_sampling_entry

    gammas, profile = request.gammas, request.profile
    entries = entries_of(setup, profile, args.scenario)
    for entry in entries.values():
        check_sampling_entry(entry, args.temperature)
    _warn_other_host(profile, args.device)
    bar = (
        None
        if args.no_progress
        else (lambda xs, rnd: progress(xs, True, f"sampled check, seed {rnd + 1}/{args.seeds}"))
    )
    runs = run_sampled_check(
        setup,
        gammas,
        temperature=args.temperature,
        seeds=args.seeds,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        seed=args.seed,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        progress=bar,
    )
    rows = sampled_rows(
        profile,
        setup,
        entries,
        runs,
        gammas,
        temperature=args.temperature,
        rng=np.random.default_rng(args.seed),
    )
    if not args.no_write:
        save_profile(profile.with_checks(rows), request.profile_path)
    if args.json:
        print(
            dumps_json(
                {
                    "rows": [r.to_json() for r in rows],
                    "coverage": coverage(rows),
                    "summary": summary(rows),
                    "temperature": args.temperature,
                    "rounds": runs.rounds,
                    "seconds": runs.seconds,
                }
            )
        )
        return 0
    print(sampled_table(rows))
    print(
        f"T={args.temperature:g}: {runs.rounds} seed(s) per prompt in {runs.seconds:.0f} s", file=sys.stderr
    )
    return 0
