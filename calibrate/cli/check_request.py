"""What ``specsim check`` (this project's engines) refuses before a model loads, read once off the flags and
the profile into one :class:`CheckRequest`: its mode (greedy, sampled, batched, serving), γs, the profile,
methods, the --synthetic-acceptance schedule, --tree/--policy drafts, --batch sizes and the batched cost.

Minutes saved on a bad flag: γ outside the batched grid, a method or scenario without an acceptance entry,
prompts without a greedy trace, prompts plus ``--max-new-tokens`` beyond the target's positions where its
config is at hand. Each mode's checks run in one fixed order, so a bad flag is always the same one line;
:mod:`calibrate.cli.cmd_check` then runs the mode (``--runtime llama.cpp`` checks its own flags).
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from specsim.draft_shapes.draft_plans import parse_drafts
from specsim.errors import SpecsimError, SpecsimWarning
from specsim.jsonio import check_writable
from specsim.profiles import load_profile, resolve_profile_path

GREEDY, SAMPLED, SERVE, BATCH = "greedy", "sampled", "serve", "batch"
SERVE_DEFAULTS = {"serve_requests": 24, "max_num_seqs": 8}  # apply with --serve-rates only
ROUND_DEFAULTS = {"halfwidth": 0.015, "min_rounds": 2, "max_rounds": 6}  # greedy, batch and serving rounds


@dataclass(frozen=True)
class CheckRequest:
    """One check's inputs once every refusal before loading has passed (module docstring). ``gammas``:
    sorted γs; ``methods``: --method, or a single-method profile's one, or None; ``synthetic``: the
    schedule's spec or None; ``drafts``: token trees and policies (greedy); ``sizes``: --batch sizes;
    ``batched``: the profile's batched cost (batch and serving modes); ``workload``: the prompts and methods
    (:class:`calibrate.workload.run_setup.Workload`)."""

    mode: str
    gammas: list[int]
    profile_path: Path
    profile: object
    methods: list[str] | None
    synthetic: object | None = None
    drafts: tuple = ()
    sizes: tuple[int, ...] = ()
    batched: object | None = None
    workload: object | None = None


def check_mode(args) -> str:
    """Which check the flags ask for: serving (--serve-rates), batched (--batch), sampled (T > 0), greedy."""
    if args.serve_rates is not None:
        return SERVE
    if args.batch is not None:
        return BATCH
    return SAMPLED if args.temperature > 0 else GREEDY


def check_request(args) -> CheckRequest:
    """The :class:`CheckRequest` of ``args``; SpecsimError (one line) for the first thing a run refuses."""
    from calibrate.workload.run_setup import check_model_flags, read_workload

    mode = check_mode(args)
    # greedy checks repeat in rounds, not seeds (--temperature with --batch/--serve-rates: refused below)
    if args.seeds is not None and mode != SAMPLED and not args.temperature > 0:
        raise SpecsimError("--seeds: applies with --temperature > 0 only (greedy checks: --min-rounds)")
    args.seeds = 4 if args.seeds is None else args.seeds
    if mode == SAMPLED and args.seeds < 2:
        raise SpecsimError(
            f"--seeds: expected at least 2 runs per prompt with --temperature (one run gives no "
            f"spread to judge), got {args.seeds}"
        )
    request = prepare(args, mode)
    if mode == SERVE:
        request = _serving(args, request)
    elif mode == BATCH:
        request = _batched(args, request)
    elif mode == SAMPLED:
        _sampled(args, request)
    else:
        request = _greedy(args, request)
    workload = read_workload(args, request.methods)
    refuse_before_loading(args, request, workload, traces=mode in (SERVE, BATCH))  # else after loading
    check_model_flags(args)
    return replace(request, workload=workload)


def prepare(args, mode: str) -> CheckRequest:
    """The checks every mode shares, before anything that needs a model: arguments, --profile writable, a
    latency section, --synthetic-acceptance; methods default to a single-method profile's one."""
    from calibrate.measure.synthetic_schedules import parse_schedule

    gammas = _check_args(args)
    synthetic = None if args.synthetic_acceptance is None else parse_schedule(args.synthetic_acceptance)
    profile_path = resolve_profile_path(args.profile)
    if not args.no_write:
        check_writable(profile_path, "--profile")
    profile = load_profile(str(profile_path))
    model = profile.latency.forward_costs()  # a profile without timings is refused before anything runs
    if mode not in (BATCH, SERVE):  # those price γ on the batched grid, and check it there
        model.check_gamma(gammas[-1])
    methods = args.method
    if methods is None and len({a.method for a in profile.acceptance}) == 1 and profile.acceptance:
        methods = [profile.acceptance[0].method]  # a single-method profile needs no --method
    return CheckRequest(mode, gammas, profile_path, profile, methods, synthetic)


def fill_serve_defaults(args) -> None:
    """--serve-requests and --max-num-seqs at :data:`SERVE_DEFAULTS` where not given (either runtime)."""
    for name, default in SERVE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def check_rounds(args) -> None:
    """SpecsimError for --max-new-tokens, --halfwidth, --min-rounds/--max-rounds or --max-minutes out of range
    (either runtime: what a round decodes and how the rounds repeat)."""
    if args.max_new_tokens < 2:  # the first pass carries the prompt; the decode phase starts at token 2
        raise SpecsimError(
            f"--max-new-tokens: expected an integer >= 2 (a decode phase to time), got {args.max_new_tokens}"
        )
    if not 0 < args.halfwidth < 1:
        raise SpecsimError(f"--halfwidth: expected a fraction in (0, 1), got {args.halfwidth}")
    if args.min_rounds < 1 or args.max_rounds < args.min_rounds:
        raise SpecsimError(
            f"--min-rounds/--max-rounds: expected 1 <= min <= max, got {args.min_rounds} and "
            f"{args.max_rounds}"
        )
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise SpecsimError(f"--max-minutes: expected a positive number, got {args.max_minutes}")


def _check_args(args) -> list[int]:
    """Sorted --gamma; SpecsimError for a flag out of range or given where it does not apply (a serving flag
    without --serve-rates would be ignored); the serving flags' defaults filled in."""
    gammas = sorted(args.gamma)
    for name in SERVE_DEFAULTS:
        if getattr(args, name) is not None and args.serve_rates is None:
            raise SpecsimError(f"--{name.replace('_', '-')}: applies with --serve-rates only")
    fill_serve_defaults(args)
    if args.remeasure_batched and args.batch is None and args.serve_rates is None:
        raise SpecsimError("--remeasure-batched: applies with --batch or --serve-rates only")
    if args.remeasure:
        raise SpecsimError(
            "--remeasure: applies with --runtime llama.cpp (--remeasure-batched: this engine's)"
        )
    check_rounds(args)
    if args.synthetic_acceptance is not None and (args.tree or args.policy or args.temperature > 0):
        raise SpecsimError(
            "--synthetic-acceptance: runs fixed gamma, greedy (no --tree, --policy or --temperature)"
        )
    mode = check_mode(args)
    if mode == SAMPLED:  # sampled runs repeat in --seeds, not in rounds
        for dest, default in ROUND_DEFAULTS.items():
            if getattr(args, dest) != default:
                raise SpecsimError(
                    f"--{dest.replace('_', '-')}: greedy checks repeat in rounds; with --temperature "
                    "give --seeds"
                )
    reads_seed = mode in (SAMPLED, SERVE) or args.synthetic_acceptance is not None or args.remeasure_batched
    if args.seed != 0 and not reads_seed:  # it seeds sampling, arrivals, a schedule or a re-measured grid
        raise SpecsimError(
            "--seed: seeds sampled runs, serving arrivals, a --synthetic-acceptance schedule or "
            "--remeasure-batched; this greedy check draws nothing"
        )
    return gammas


def _greedy(args, request: CheckRequest) -> CheckRequest:
    """--tree / --policy parsed, and the profile's grids for them."""
    from calibrate.measure.check_runs import preflight

    drafts = tuple(parse_drafts(args.tree, args.policy))
    preflight(request.profile, [], list(drafts), args.max_new_tokens)  # the grids first, then the entries
    return replace(request, drafts=drafts)


def _sampled(args, request: CheckRequest) -> None:
    """Every entry the run may use measured at --temperature (no schedule: _check_args refuses one)."""
    from specsim.check.sampled_runs import check_sampling_entry

    if args.tree or args.policy:  # the sampled runs draft fixed-γ chains
        raise SpecsimError("--tree/--policy: greedy checks only (no --temperature)")
    methods = request.methods
    with warnings.catch_warnings():  # its warnings come after loading, for the entries the prompts use
        warnings.simplefilter("ignore", SpecsimWarning)
        for entry in request.profile.acceptance:  # a wrong temperature costs no loading
            if (methods is None or entry.method in methods) and args.scenario in (None, entry.scenario):
                check_sampling_entry(entry, args.temperature)


def _serving(args, request: CheckRequest) -> CheckRequest:
    """Fixed γ, greedy; the profile's batched cost with --max-num-seqs inside it."""
    if args.tree or args.policy or args.temperature > 0 or args.batch is not None:
        raise SpecsimError(
            "--serve-rates: runs fixed gamma, greedy (no --tree, --policy, --temperature or --batch)"
        )
    batched = _batched_cost(request)
    batched.check_batch(args.max_num_seqs, "--max-num-seqs")
    for g in request.gammas:
        batched.check_gamma(g)
    return replace(request, batched=batched)


def _batched(args, request: CheckRequest) -> CheckRequest:
    """--batch sizes inside the profile's batched cost."""
    sizes = batch_sizes(args)
    batched = _batched_cost(request)
    for b in sizes:
        batched.check_batch(b)
    for g in request.gammas:
        batched.check_gamma(g)
    return replace(request, sizes=tuple(sizes), batched=batched)


def _batched_cost(request: CheckRequest):
    """The profile's batched cost; SpecsimError when the profile did not measure one."""
    batched = request.profile.latency.forward_costs().batched
    if batched is None:
        raise SpecsimError(
            f"--profile {request.profile_path}: has no batched cost "
            "(calibrate latency --request-batches 1,2,4,8)"
        )
    return batched


def batch_sizes(args) -> list[int]:
    """--batch (parsed by argparse) as a sorted list of batch sizes; SpecsimError where a batch cannot run."""
    sizes = sorted(set(args.batch))
    if args.tree or args.policy or args.temperature > 0:
        raise SpecsimError("--batch: runs fixed gamma, greedy (no --tree, --policy or --temperature)")
    return sizes


def refuse_before_loading(args, request: CheckRequest, workload, *, traces: bool = True) -> None:
    """SpecsimError for what the runs could not price, read off the flags, the ``workload`` and the profile
    (:func:`calibrate.measure.check_runs.entries_of` and the preflights repeat it after loading): an entry per
    method and scenario group, a greedy trace per prompt (``traces``), prompts that fit the target."""
    from calibrate.measure.batch_check_runs import check_group_sizes
    from calibrate.measure.check_runs import entry_of, greedy_trace, preflight
    from calibrate.workload.run_setup import scenario_name
    from specsim.draft_shapes.block_plans import refuse_short_budget

    name, prompts, codes = workload.name, workload.prompts, workload.methods
    if request.sizes:  # each scenario group (images per prompt) fills one batch of the largest size
        groups = sorted(Counter(len(p.images) for p in prompts).items())
        check_group_sizes({scenario_name(name, n): k for n, k in groups}, max(request.sizes), args.limit)
    if request.synthetic is not None:  # a schedule, not the profile's traces, decides the accepts
        return
    base, longest, entries, traced = args.scenario or name, 0, {}, []
    for prompt in prompts:
        n = len(prompt.images)
        for m in codes:
            entry = entry_of(request.profile, m, scenario_name(base, n))
            entries[id(entry)] = entry
            found = [t for t in entry.traces if t.prompt_id == prompt.id and t.match is not None]
            if traces and not found:
                greedy_trace(entry, prompt.id)  # names the method, scenario and prompt
            longest = max([longest] + [t.prompt_tokens or 0 for t in found])
            traced += found
            if request.mode == SAMPLED:  # its requests are priced with their set-up (vision, captions)
                refuse_unpriced_setup(request.profile, entry, n)
    if request.mode in (GREEDY, BATCH):  # these replay each trace under the cap (serving and sampled runs
        refuse_short_budget(traced, args.max_new_tokens)  # follow the run's own length)
    if request.drafts:  # a tree or policy the grids cannot price on these entries' traces
        preflight(request.profile, list(entries.values()), list(request.drafts), args.max_new_tokens)
    known = pair_positions(args, workload.preset)
    if known is not None and longest + args.max_new_tokens > known[1]:
        raise SpecsimError(
            f"--max-new-tokens: {longest} prompt tokens (the longest prompt's, in the profile's traces) "
            f"+ {args.max_new_tokens} = {longest + args.max_new_tokens} positions, but the {known[0]} has at "
            f"most {known[1]} (max_position_embeddings)"
        )


def refuse_unpriced_setup(profile, entry, images: int) -> None:
    """SpecsimError, before loading, where a sampled check could not price a request's set-up (a profile
    measured with --no-vision has no vision encoder): it failed once every seed had run."""
    from specsim.costs.grid_pass_cost import GridPassCost
    from specsim.predict.pricing import setup_ms

    try:
        setup_ms(GridPassCost.request(profile.latency), profile, entry, images)
    except SpecsimError as err:
        why = f"{err} (calibrate latency without --no-vision measures it)"
        raise SpecsimError(f"--temperature: a sampled check prices each request's set-up; {why}") from None


def pair_positions(args, preset: dict) -> tuple[str, int] | None:
    """The fewer max_position_embeddings of the target's and the draft's configs that are at hand without
    loading weights (the zoo, a config JSON, a local folder), with its role ("target" or "draft"); None when
    neither is. ``preset``: the --preset pair's entry; a side given by its own flag wins over it."""
    known = []
    for role in ("target", "draft"):
        spec = getattr(args, f"{role}_config", None) or getattr(args, role, None)
        limit = _config_positions(spec or (preset.get(role) if args.preset else None))
        if limit is not None:
            known.append((limit, role))
    # a tie names the target
    return min(known, key=lambda k: (k[0], k[1] != "target"))[::-1] if known else None


def _config_positions(spec: str | None) -> int | None:
    """``spec``'s max_position_embeddings when it is the zoo's, a config JSON or a folder with one."""
    import json

    if not spec:
        return None
    if spec.startswith("zoo:"):
        from calibrate.zoo import weights_dir

        spec = str(weights_dir(spec.split(":", 1)[1]))
    path = Path(spec) / "config.json" if Path(spec).is_dir() else Path(spec)
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the loader names what is wrong with it
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    limit = (text if isinstance(text, dict) else config).get("max_position_embeddings")
    return limit if isinstance(limit, int) and limit > 0 else None
