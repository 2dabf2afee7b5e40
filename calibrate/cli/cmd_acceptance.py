"""``specsim calibrate acceptance``: teacher-forced acceptance traces of every drafting method into a profile.

Found by :mod:`specsim.cli.main` through the ``specsim.commands`` entry point; torch is imported only inside
the command. The run is :func:`calibrate.measure.acceptance_run.run_acceptance`.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

from calibrate.cli.latency_checks import check_existing_profile, refuse_other_pair
from calibrate.cli.llama_cpp_handlers import cmd_acceptance_llama
from calibrate.cli.llama_cpp_options import llama_cpp_args, refuse_llama_cpp_flags
from calibrate.cli.shared_options import method_args, model_args
from specsim.bounds import name_arg, number_arg
from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json

# Paths sampled per prompt (--sample-paths). Each path is one more target generation of --max-new-tokens
# per prompt and K x tokens numbers per trace in the profile, while the error of the acceptance estimated
# from K paths only falls as 1/sqrt(K): 1024 paths (128x the recommended 8) put it at 3 % of one path's
# spread, and a larger K is a typo (1,000,000 ran until killed), as for gamma and list lengths (1024).
MAX_SAMPLE_PATHS = 1024


def register(subparsers) -> None:
    """Add ``calibrate acceptance``."""
    acc = subparsers.add_parser(
        "acceptance",
        help="teacher-forced acceptance traces (match, beta) into a profile",
        description="Target greedy output per prompt, then one forward of each model over it: per position "
        "match = [draft argmax == target token] (greedy) and beta = sum_x min(p, q) (sampling). "
        "Resumable: finished prompts are kept in OUT.partial.json.",
    )
    model_args(acc)
    acc.add_argument("--out", required=True, help="profile JSON to create or update")
    acc.add_argument(
        "--temperature",
        type=number_arg("temperature"),
        default=1.0,
        help="temperature of p and q for beta (default 1)",
    )
    method_args(acc)
    acc.add_argument(
        "--scenario",
        type=name_arg,
        default=None,
        help="scenario name (default: the prompt set's name; image "
        "prompts get '-<n>img' appended per images-per-prompt group)",
    )
    acc.add_argument(
        "--top-k",
        type=number_arg("size", integer=True, zero_ok=True),
        default=0,
        metavar="K",
        help="also store per position the rank of the target's token in the draft's greedy "
        "distribution and the draft's K largest probabilities (token-tree and confidence-policy "
        "replay; default 0 = off)",
    )
    acc.add_argument(
        "--sample-paths",
        type=number_arg("size", integer=True, zero_ok=True),
        default=0,
        metavar="K",
        help="also sample K continuations of the target per prompt at --temperature (each from its own "
        "seeded torch.Generator) and store per position the acceptance probability of a sampled "
        "draft along each, min(1, q/p) at the target's token: 'specsim check --temperature T' "
        "simulates runs along them, since a sampled run follows its own tokens, not the greedy "
        f"output (default 0 = off; 8 or more recommended, at most {MAX_SAMPLE_PATHS})",
    )
    acc.add_argument(
        "--seed",
        type=number_arg("seed", integer=True),
        default=None,
        help="with --sample-paths: base seed of the sampled paths' generators (default 0)",
    )
    acc.add_argument(
        "--reference-gamma",
        type=number_arg("gamma", integer=True),
        default=5,
        help="gamma of the stored single-gamma tau and histogram (default 5)",
    )
    acc.add_argument("--restart", action="store_true", help="ignore a partial file from an interrupted run")
    acc.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object instead of the text summary: out, methods, scenarios, per entry "
        "(method x scenario) its prompts, positions, match rate and tau at --reference-gamma, the prompt "
        "count and the seconds taken (load_seconds of them loading)",
    )
    llama_cpp_args(acc, "--engine")
    acc.set_defaults(func=cmd_acceptance)


def cmd_acceptance(args) -> int:
    """Check the arguments and --out, load the models and prompts, run, write the profile."""
    if args.engine == "llama.cpp":
        return cmd_acceptance_llama(args)
    refuse_llama_cpp_flags(args, "--engine")
    if args.reference_gamma < 1:
        raise SpecsimError(f"--reference-gamma: expected an integer >= 1, got {args.reference_gamma}")
    if not args.temperature > 0:
        raise SpecsimError(f"--temperature: expected > 0 for beta, got {args.temperature}")
    if args.top_k < 0 or (args.top_k and args.temperature != 1.0):
        raise SpecsimError(
            f"--top-k: expected an integer >= 0 with --temperature 1 (ranks are of the greedy draft "
            f"distribution), got --top-k {args.top_k} at --temperature {args.temperature}"
        )
    if args.sample_paths == 1 or args.sample_paths > MAX_SAMPLE_PATHS:
        raise SpecsimError(
            f"--sample-paths: expected 0 (off) or at least 2 and at most {MAX_SAMPLE_PATHS} paths per prompt "
            "(the sampled check resamples the paths to carry the error of estimating acceptance from "
            f"them; each path costs one more target generation), got {args.sample_paths}"
        )
    if args.seed is not None and not args.sample_paths:  # it seeds the sampled paths only
        raise SpecsimError("--seed: applies with --sample-paths only")
    args.seed = 0 if args.seed is None else args.seed
    check_writable(args.out, "--out")
    check_existing_profile(args.out, "--out")
    from calibrate.cli.check_request import pair_positions
    from calibrate.measure.acceptance_run import partial_path, run_acceptance
    from calibrate.models.loading import quiet_loading
    from calibrate.workload.run_setup import check_model_flags, load_setup, read_workload, setup_labels

    check_writable(partial_path(Path(args.out)), "--out's partial file")
    start_s = time.perf_counter()
    check_model_flags(args)
    workload = read_workload(args)
    known = pair_positions(args, workload.preset)
    if known is not None and args.max_new_tokens >= known[1]:  # a prompt takes a position at least
        raise SpecsimError(
            f"--max-new-tokens: {args.max_new_tokens} new tokens after a prompt, but the {known[0]} has at "
            f"most {known[1]} positions (max_position_embeddings)"
        )
    refuse_other_pair(args.out, "--out", *setup_labels(args))
    with quiet_loading(not args.no_progress):  # the captioner too: every model loads quietly
        setup = load_setup(args, workload)
    load_s = time.perf_counter() - start_s
    if not args.json:
        run_acceptance(setup, args)
        return 0
    with contextlib.redirect_stdout(io.StringIO()):  # the run prints the text summary; --json replaces it
        entries = run_acceptance(setup, args)
    print(dumps_json(json_summary(args, setup, entries, time.perf_counter() - start_s, load_s)))
    return 0


def json_summary(args, setup, entries: list, seconds: float, load_seconds: float) -> dict:
    """What ``--json`` prints: the written profile, its entries (method x scenario) with tau and match rate,
    the prompts and the time taken."""
    rows = []
    for e in entries:
        matches = [m for t in e.traces for m in (t.match or ())]
        rows.append(
            {
                "method": e.method,
                "scenario": e.scenario,
                "images_per_prompt": e.images_per_prompt,
                "prompts": len(e.traces),
                "positions": len(matches),
                "match_rate": sum(matches) / len(matches) if matches else None,
                "gamma": e.gamma,
                "tau": e.tau,
            }
        )
    return {
        "out": str(args.out),
        "methods": list(setup.methods),
        "scenarios": list(dict.fromkeys(e.scenario for e in entries)),
        "entries": rows,
        "prompts": len(setup.prompts),
        "max_new_tokens": args.max_new_tokens,
        "seconds": round(seconds, 3),
        "load_seconds": round(load_seconds, 3),
    }
