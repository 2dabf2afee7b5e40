"""One hardware plan from a command's options: ``specsim hardware`` parses its ranges, hands every option
here in one :class:`PlanRequest` (the rest checked by :meth:`PlanRequest.from_options`) and prints the
:class:`PlanAnswer` (models, τ per method, runtimes or fitted efficiencies, the plan, token trees). Every
option is checked before anything is priced; errors name it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from specsim.bounds import MAX_PLAN_ROWS
from specsim.draft_kinds.registry import draft_kind as kind_named
from specsim.errors import SpecsimError
from specsim.hardware.device import load_devices
from specsim.hardware.efficiency_fit import FitResult, HoldoutResult
from specsim.hardware.image_tokens import ImageSize, parse_image_size
from specsim.hardware.measured_pair import other_pair_note
from specsim.hardware.model import ModelSpec, check_block_positions
from specsim.hardware.plan import DEFAULT_CONTEXTS, Parallel, Plan, plan_hardware
from specsim.hardware.plan_inputs import (
    best_trees,
    check_options,
    device_runtimes,
    fit_on_profile,
    resolve_models,
    split_mode,
)
from specsim.hardware.prices import parse_prices, priced
from specsim.predict.acceptance_source import tau_methods
from specsim.presets import pair_profile
from specsim.profile_format import Profile


def request_lengths(prompt: int | None, output: int | None, *, given_context: bool) -> tuple[int, int] | None:
    """(prompt, output) tokens per request from --prompt-tokens/--output-tokens (both or neither; not with
    --context: the decode then runs over the mean cached context, prompt + output / 2)."""
    if prompt is None and output is None:
        return None
    if prompt is None or output is None:
        raise SpecsimError("--prompt-tokens/--output-tokens: give both (or --context)")
    if given_context:
        raise SpecsimError("--context: give either --context or --prompt-tokens/--output-tokens, not both")
    if prompt < 1:  # a request prefills at least one token (its chat template's, if nothing else)
        raise SpecsimError(f"--prompt-tokens: expected an integer >= 1 (text tokens), got {prompt}")
    if output < 1:  # no decode: nothing for SD to speed up (the row would price the prefills alone)
        raise SpecsimError(f"--output-tokens: expected an integer >= 1 (a decode to speed up), got {output}")
    return int(prompt), int(output)


@dataclass(frozen=True)
class PlanRequest:
    """``specsim hardware``'s options, parsed and checked: ranges as ints, ``--image-size`` as an
    :class:`ImageSize`, ``--prompt-tokens``/``--output-tokens`` as ``lengths`` (their mean cached context is
    then the one context); the rest as given, lists as tuples."""

    gamma_max: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    lengths: tuple[int, int] | None = None
    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    model_config: str | None = None
    image_size: ImageSize | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    runtime: str | None = None
    tp: int = 1
    split_mode: str | None = None
    draft_sharded: bool | None = None  # None: as the runtime places the draft
    expert_parallel: bool = False  # a MoE target's experts spread whole over the --tp GPUs
    draft_kind: str | None = None
    gamma: int | None = None
    tau: float | None = None
    alpha: float | None = None
    acceptance: str | None = None
    profile: str | None = None
    method: tuple[str, ...] | None = None
    scenario: str | None = None
    device: tuple[str, ...] | None = None
    price: tuple[str, ...] | None = None
    fit_profile: str | None = None
    fit_device: str | None = None
    fit_dtype: str | None = None
    validate: bool = False
    trees: bool = False
    tree_max_nodes: int = 64

    @classmethod
    def from_options(cls, options: dict) -> PlanRequest:
        """The request from a command's parsed options: ``gamma_max``, ``batches`` and ``contexts`` already
        ints (the command line's ranges); the options they combine with are checked here, before anything
        is priced (others ignored)."""
        check_options(
            dtype=options.get("dtype"),
            kv_dtype=options.get("kv_dtype"),
            fit_profile=options.get("fit_profile"),
            validate=options.get("validate", False),
            fit_device=options.get("fit_device"),
            fit_dtype=options.get("fit_dtype"),
        )
        lengths = request_lengths(
            options.get("prompt_tokens"),
            options.get("output_tokens"),
            given_context=options.get("context") is not None,
        )
        size = options.get("image_size")
        given = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        given |= {"lengths": lengths, "image_size": None if size is None else parse_image_size(size)}
        if lengths is not None:
            given["contexts"] = [lengths[0] + lengths[1] // 2]
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})


@dataclass(frozen=True)
class PlanAnswer:
    """What the plan was computed from and the plan itself."""

    target: ModelSpec
    draft: ModelSpec
    profile: Profile | None
    plan: Plan
    efficiency: dict
    fit: FitResult | HoldoutResult | None = None
    trees: tuple | None = None


def in_window(
    target: ModelSpec, contexts: list[int], lengths, gamma: int, gamma_flag: str = "--gamma-max"
) -> tuple[list[int], list[str]]:
    """(contexts within the target's window, a note on those left out). A context needs room for a block of
    the largest γ priced: context + γ + 1 positions (the verify pass writes γ + 1). The default contexts
    beyond it are left out (all of them: the largest that fits stands in); a context given beyond it, or a
    request (``lengths``) whose last block is, is refused, naming ``gamma_flag`` beside it."""
    if lengths is not None:  # the last block starts after the prompt and all but one output token
        prompt, output = lengths
        flag = "--prompt-tokens/--output-tokens"
        check_block_positions(target, prompt, gamma, flag, gamma_flag=gamma_flag, new_tokens=output - 1)
        return contexts, []
    window = target.max_positions
    beyond = [c for c in contexts if window is not None and c + gamma + 1 > window]
    if not beyond:
        return contexts, []
    last = window - gamma - 1
    if tuple(contexts) != DEFAULT_CONTEXTS or (len(beyond) == len(contexts) and last < 1):
        check_block_positions(target, beyond[0], gamma, "--context", gamma_flag=gamma_flag)
    kept = [c for c in contexts if c not in beyond] or [last]
    why = f"a γ {gamma} block there needs context + {gamma + 1} positions, beyond {target.name}'s {window}"
    instead = "" if kept[0] != last else f"; context {last} instead"
    return kept, [f"context {','.join(map(str, beyond))} left out: {why}{instead}"]


def holding_an_image(
    target: ModelSpec, contexts: list[int], lengths, image_size: ImageSize | None
) -> tuple[list[int], list[str]]:
    """(contexts that hold one image of the --image-size given, a note on those left out): a context or a
    prompt shorter than one image's tokens contradicts the size. Given ones are refused, the defaults
    below it left out (all of them: refused, naming --image-size)."""
    if image_size is None or target.vision is None:
        return contexts, []
    per = target.vision.image_tokens
    size = f"--image-size {image_size}"
    one = f"one image fills {per} of {target.name}'s positions"
    if lengths is not None and lengths[0] < per:
        raise SpecsimError(f"--prompt-tokens: {lengths[0]}, but {one} at {size}; expected at least {per}")
    short = [c for c in contexts if c < per]
    if lengths is not None or not short:
        return contexts, []
    if tuple(contexts) != DEFAULT_CONTEXTS:
        raise SpecsimError(f"--context: {short[0]}, but {one} at {size}; expected at least {per}")
    kept = [c for c in contexts if c >= per]
    if not kept:
        raise SpecsimError(
            f"{size}: {one}, more than every default context holds; give a --context of at least {per} "
            "or a smaller size"
        )
    return kept, [f"context {','.join(map(str, short))} left out: {one} at {size}"]


def answer(req: PlanRequest) -> PlanAnswer:
    """The plan ``req`` asks for (module docstring)."""
    batches, contexts, lengths = list(req.batches), list(req.contexts), req.lengths
    pair, target, draft = resolve_models(
        pair=req.pair,
        target=req.target,
        draft=req.draft,
        model_config=req.model_config,
        fit_profile=req.fit_profile,
        dtype=req.dtype,
        kv_dtype=req.kv_dtype,
        image_size=req.image_size,
        draft_kind=req.draft_kind,
        expert_parallel_tp=req.tp if req.expert_parallel else None,
    )
    measured_on = pair_profile(pair) if pair else None  # the pair's own profile
    profile, methods, notes = tau_methods(
        pair=pair,
        target_name=target.name,
        draft_name=draft.name if draft is not None else str(req.draft_kind),
        profile_name=req.profile,
        methods=None if req.method is None else list(req.method),
        scenario=req.scenario,
        tau=req.tau,
        alpha=req.alpha,
        gamma=req.gamma,
        gamma_max=req.gamma_max,
        spec=req.acceptance,
        pair_profile=measured_on,
    )
    borrowed = None if profile is None else other_pair_note(profile, target, draft)
    contexts, left_out = in_window(
        target,
        contexts,
        lengths,
        max((g for m in methods for g in m.gammas), default=0),
        "--gamma" if req.gamma is not None else "--gamma-max",
    )
    contexts, no_image = holding_an_image(target, contexts, lengths, req.image_size)
    notes = notes + ([borrowed] if borrowed else []) + left_out + no_image
    devices = priced(load_devices(None if req.device is None else list(req.device)), parse_prices(req.price))
    rows = len(batches) * len(contexts) * len(devices) * len(methods)
    if rows > MAX_PLAN_ROWS:
        raise SpecsimError(
            f"--batch/--context: {len(batches)} batch sizes x {len(contexts)} contexts x {len(devices)} "
            f"devices x {len(methods)} methods = {rows} rows; expected at most {MAX_PLAN_ROWS} "
            "(narrow the ranges)"
        )
    fit = None
    efficiency = device_runtimes(req.runtime, devices)
    if req.fit_profile is not None:
        fit, skipped = fit_on_profile(
            req.fit_profile,
            target,
            draft,
            fit_device=req.fit_device,
            fit_dtype=req.fit_dtype,
            runtime=req.runtime,
            validate=req.validate,
        )
        notes += [f"fit: skipped {s}" for s in skipped]
        fitted = fit.fit.efficiency if isinstance(fit, HoldoutResult) else fit.efficiency
        efficiency = {d.name: fitted for d in devices}
    parallel = Parallel(req.tp, req.draft_sharded, split_mode(req.split_mode, req.tp, efficiency))
    if req.expert_parallel and parallel.split != "tensor":
        raise SpecsimError(
            f"--expert-parallel: spreads experts over tensor-parallel GPUs, not --split-mode {parallel.split}"
        )
    plan = plan_hardware(
        target,
        draft,
        devices,
        methods,
        efficiency=efficiency,
        batches=batches,
        contexts=contexts,
        notes=tuple(notes),
        parallel=parallel,
        draft_kind=kind_named(req.draft_kind).name,
        lengths=lengths,
    )
    trees = None
    if req.trees and draft is None:
        raise SpecsimError(f"--trees: drafting kind {req.draft_kind!r} drafts with no model (no token tree)")
    if req.trees:
        trees = best_trees(
            profile,
            target,
            draft,
            devices,
            efficiency=efficiency,
            batches=batches,
            contexts=contexts,
            alpha=req.alpha,
            methods=None if req.method is None else list(req.method),
            scenario=req.scenario,
            tp=req.tp,
            n_max=req.tree_max_nodes,
            gamma_max=req.gamma_max,
            draft_kind=kind_named(req.draft_kind).name,
            chain_gamma=req.gamma,
        )
    return PlanAnswer(target, draft, profile, plan, efficiency, fit, None if trees is None else tuple(trees))
