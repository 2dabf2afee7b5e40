"""The checks ``calibrate latency`` runs on its arguments before any model loads (minutes of work saved on
a bad flag), and the defaults of the batched sweep's ``--request-*`` flags, which apply with
``--request-batches`` only."""

from __future__ import annotations

from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import check_writable

# --request-* flags: what each is when not given (None: --max-new-tokens)
REQUEST_DEFAULTS = {
    "request_gammas": [1, 3, 5],
    "request_new_tokens": 24,
    "request_target_tokens": None,
    "request_prompt_lengths": 3,
    "request_rounds": 2,
    "no_unpadded_step": False,
    "no_server_loop": False,
}


# calibrate latency's options that shape only the batch-1 grid (--contexts also sizes the batched sweep)
BATCH_ONE_ONLY = (
    "gammas tree_sizes tree batch_sizes prefill_tokens verify_context no_vision caption_tokens min_repeats "
    "max_repeats rel_halfwidth max_seconds_per_point warmup"
).split()


def _given(value) -> bool:
    """A flag given on the command line: not its unset None or False (a 0 is given, and checked)."""
    return value is not None and value is not False


def request_flag(args, name: str):
    """The batched sweep's ``--request-*`` flag ``name`` as given, or its default."""
    value = getattr(args, name)
    return value if _given(value) else REQUEST_DEFAULTS[name]


def check_existing_profile(path, flag: str) -> None:
    """SpecsimError when ``path`` exists but is no profile: a run merges into it at its end, after the
    measuring (minutes, or hours on large models)."""
    from specsim.profiles import load_profile

    if Path(path).is_file():
        try:
            load_profile(str(path))
        except SpecsimError as err:
            raise SpecsimError(f"{flag}: the existing file cannot be added to: {err}") from None


def refuse_other_pair(path, flag: str, target: str, draft: str) -> None:
    """SpecsimError when the profile at ``path`` was measured on another pair than the loaded ``target`` /
    ``draft`` (checked as the models load, before anything is measured): a profile is one pair's, and a run
    of another would be priced against it, or written into it beside the pair's own numbers."""
    from specsim.profiles import load_profile

    if path is None or not Path(path).is_file():
        return
    p = load_profile(str(path)).provenance
    if (p.target, p.draft) != (target, draft):
        raise SpecsimError(
            f"{flag} {path}: measured on target {p.target!r} / draft {p.draft!r}, and this run loads "
            f"{target!r} / {draft!r}; give this pair's profile{', or a new file' if flag == '--out' else ''}"
        )


MAX_NEW_TOKENS_DEFAULT = 64  # calibrate latency's --max-new-tokens


def check_latency_args(args) -> None:
    """Everything that can be checked before models load and measuring starts."""
    from calibrate.models.loading import canonical_dtype, check_device

    check_writable(args.out, "--out")
    check_existing_profile(args.out, "--out")
    if args.no_workload and (args.prompts or not args.preset):  # --prompts won, or there was nothing to drop
        raise SpecsimError("--no-workload: applies with --preset, without --prompts (drops the pair's set)")
    if args.no_workload and not args.request_batches and args.max_new_tokens != MAX_NEW_TOKENS_DEFAULT:
        raise SpecsimError(
            "--max-new-tokens: sizes the workload's contexts, which --no-workload drops (and, with "
            "--request-batches, the batched sweep's runs)"
        )
    if args.batched_only and not args.request_batches:
        raise SpecsimError("--batched-only: needs --request-batches")
    kept = [n for n in BATCH_ONE_ONLY if _given(getattr(args, n))] if args.batched_only else []
    if kept:  # the batch-1 grid stays as --out holds it: the flag would change nothing
        raise SpecsimError(
            f"--{kept[0].replace('_', '-')}: shapes the batch-1 grid, which --batched-only keeps as --out "
            "holds it (it measures the batched grid alone)"
        )
    given = [n for n in REQUEST_DEFAULTS if _given(getattr(args, n))]
    if given and not args.request_batches:
        flag = "--" + given[0].replace("_", "-")
        raise SpecsimError(f"{flag}: applies with --request-batches only (it sizes the batched sweep)")
    check_device(args.device)
    canonical_dtype(args.dtype)
    _refuse_model_flags(args)
    for name in ("warmup", "caption_tokens", "verify_context", "threads"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise SpecsimError(
                f"--{name.replace('_', '-')}: expected an integer >= {0 if name == 'warmup' else 1}, "
                f"got {value}"
            )
    if args.max_new_tokens < 1:
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 1, got {args.max_new_tokens}")
    for name in ("request_new_tokens", "request_target_tokens", "request_rounds"):
        value = getattr(args, name)
        if _given(value) and value < 1:  # 0 read as "not given" once, and became the default silently
            raise SpecsimError(f"--{name.replace('_', '-')}: expected an integer >= 1, got {value}")
    if args.rel_halfwidth is not None and not 0 < args.rel_halfwidth < 1:
        raise SpecsimError(f"--rel-halfwidth: expected a fraction in (0, 1), got {args.rel_halfwidth}")
    if args.gammas is not None and max(args.gammas) < 2:
        raise SpecsimError(
            f"--gammas: expected a gamma >= 2 among them (the draft's steps after a block's first are timed "
            f"in blocks of 2 or more drafts), got {','.join(map(str, args.gammas))}"
        )
    from calibrate.measure.latency_plan import LatencyPlan  # its defaults stand in for the flags not given

    lo = LatencyPlan.min_repeats if args.min_repeats is None else args.min_repeats
    hi = LatencyPlan.max_repeats if args.max_repeats is None else args.max_repeats
    if hi < 2:
        raise SpecsimError(
            f"--max-repeats: expected at least 2 rounds (a point timed once has no spread: its half-width "
            f"would read 0.0 ms), got {hi}"
        )
    if hi < lo:
        raise SpecsimError(f"--min-repeats/--max-repeats: expected min <= max, got {lo} and {hi}")


def _refuse_model_flags(args) -> None:
    """One spec per side, and --random-weights only where it is read: a weights spec and a config for one
    side (the config won), or --random-weights beside per-side specs (they decide), went unread silently."""
    for side in ("target", "draft"):
        if getattr(args, side) and getattr(args, f"{side}_config"):
            raise SpecsimError(
                f"--{side}-config: give either --{side} (weights) or --{side}-config (architecture, random "
                "weights), not both"
            )
    sides = args.target or args.draft or args.target_config or args.draft_config
    if args.random_weights and (sides or not args.preset):
        raise SpecsimError(
            "--random-weights: builds a --preset pair's models from their configs; per-side models take "
            "--target-config/--draft-config for that"
        )
    from specsim.presets import pair

    entry = pair(args.preset) if args.preset else {}
    if args.cache_dir is not None and ("gguf" not in entry or args.random_weights or sides):
        raise SpecsimError(
            "--cache-dir: caches the reference pair's downloads (a --preset with GGUF files, whole); "
            "nothing is downloaded here"
        )
    if args.caption_tokens is not None and not (args.captioner or entry.get("captioner")):
        raise SpecsimError("--caption-tokens: sizes the captioner's timed caption; give --captioner")
    for side in ("target", "draft"):
        check_random_config(getattr(args, f"{side}_config"), f"--{side}-config")


def check_random_config(config: str | None, flag: str) -> None:
    """A --target-config/--draft-config read by specsim's own config reader (the planner's) before any model
    is built: a bad key is one line naming it, not a tensor-shape traceback once torch builds the model."""
    from specsim.hardware.model import spec_from_config
    from specsim.presets import preset_config

    try:
        cfg = preset_config(config) if config else None
    except SpecsimError:
        return  # not readable as a config here: the loader names what is wrong with it
    if cfg is not None:
        try:
            spec_from_config(cfg, Path(str(config)).stem)
        except SpecsimError as err:
            raise SpecsimError(f"{flag} {config}: {err}") from None


def refuse_past_positions(args) -> None:
    """A plan past the target's or draft's max_position_embeddings, read off their configs before the models
    load: a given size, or a γ block at the largest given context (at a 1-token context when none is given);
    :func:`calibrate.workload.run_setup.check_plan_positions` checks the whole plan once they have."""
    from calibrate.cli.check_request import pair_positions
    from calibrate.measure.latency_plan import LatencyPlan
    from specsim.presets import pair

    known = pair_positions(args, pair(args.preset) if args.preset else {})
    if known is None:
        return
    role, limit = known
    verify = [args.verify_context] if args.verify_context else []
    for flag, sizes in zip(("--contexts", "--verify-context", "--prefill-tokens"),
                           (args.contexts, verify, args.prefill_tokens)):  # fmt: skip
        if sizes and max(sizes) > limit:
            raise SpecsimError(f"{flag}: {max(sizes)} tokens, past the {role}'s {limit} max positions")
    context, gamma = max((args.contexts or []) + verify or [1]), max(args.gammas or LatencyPlan.gammas)
    if not (args.contexts or args.no_workload) and 1 + args.max_new_tokens + gamma + 1 > limit:
        raise SpecsimError(  # workload-sized contexts reach a prompt (>= 1 token) + --max-new-tokens
            f"--max-new-tokens: contexts sized from the workload reach at least {1 + args.max_new_tokens} "
            f"tokens (a prompt + {args.max_new_tokens} new tokens), and a block of gamma {gamma} there "
            f"needs {args.max_new_tokens + gamma + 2} positions, past the {role}'s {limit} max positions"
        )
    if context + gamma + 1 > limit:
        raise SpecsimError(
            f"--gammas: a block of gamma {gamma} at a {context}-token context needs {context + gamma + 1} "
            f"positions, past the {role}'s {limit} max positions"
        )


def existing_cost_model(out: str):
    """--out's path when it holds a profile with latency timings (what --batched-only adds to)."""
    from specsim.profiles import load_profile

    try:
        load_profile(out).latency.forward_costs()
    except SpecsimError as err:
        raise SpecsimError(f"--batched-only: --out {out}: {err} (run without --batched-only first)") from None
    return Path(out)
