"""What a hardware plan is computed from besides τ: the model pair, the runtimes, fitted efficiencies,
token trees (τ per method: :mod:`specsim.predict.acceptance_source`).

Each function turns some of a command's options into the inputs of
:func:`~specsim.hardware.plan.plan_hardware` or :func:`~specsim.hardware.tree_plan.plan_trees`; errors name
the option they are about (``--fit-dtype: ...``).
"""

from __future__ import annotations

from dataclasses import replace

from specsim.draft_kinds.registry import draft_kind as kind_named
from specsim.errors import SpecsimError
from specsim.hardware.device import Device, load_device
from specsim.hardware.draft_heads import draft_side
from specsim.hardware.efficiency_fit import (
    FitResult,
    HoldoutResult,
    fit_efficiency,
    holdout,
    points_from_latency,
    short_context_split,
)
from specsim.hardware.image_tokens import ImageSize
from specsim.hardware.measured_pair import models_for_costs
from specsim.hardware.model import ModelSpec
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.runtime import DEFAULT_RUNTIMES, Runtime, load_runtime
from specsim.hardware.weight_formats import dtype_bytes, kv_dtype_bytes
from specsim.predict.acceptance_source import method_entries
from specsim.presets import pair_models
from specsim.profile_format import Profile
from specsim.profiles import load_profile

DEFAULT_PAIR = "llava-1.5-7b-68m"

# What a latency profile constrains of a GPU runtime: its efficiencies and per-forward overhead (less those
# the runtime ties to another, which move with it).
PROFILE_FIT_GPU = (
    "compute_efficiency",
    "memory_efficiency_gemv",
    "memory_efficiency_gemm",
    "overhead_ms_per_forward",
)


def check_options(
    *,
    dtype: str | None,
    kv_dtype: str | None,
    fit_profile: str | None,
    validate: bool,
    fit_device: str | None,
    fit_dtype: str | None,
) -> None:
    """Refuse what nothing later would notice: a dtype option given empty or unknown (named by its
    flag, not read as "the config's"), and the fit's options without --fit-profile (they would be ignored)."""
    if fit_profile is None:
        for flag, given in (
            ("--validate", validate),
            ("--fit-device", fit_device is not None),
            ("--fit-dtype", fit_dtype is not None),
        ):
            if given:
                raise SpecsimError(
                    f"{flag}: needs --fit-profile (it is an option of the efficiency fit on a profile), "
                    f"got {flag} without --fit-profile"
                )
    for flag, value, size in (
        ("--dtype", dtype, dtype_bytes),
        ("--kv-dtype", kv_dtype, kv_dtype_bytes),
        ("--fit-dtype", fit_dtype, dtype_bytes),
    ):
        if value is not None:
            size(value, flag)
    if fit_device is not None and not fit_device.strip():
        raise SpecsimError(f"--fit-device: expected a catalog name or device JSON, got {fit_device!r}")


def resolve_models(**options) -> tuple[str | None, ModelSpec, ModelSpec | None]:
    """:func:`_resolve_models`, and --image-size refused for a target without a vision tower (it sizes
    image tokens, of which a text-only model has none)."""
    pair, target, draft = _resolve_models(**options)
    refuse_image_size_without_vision(target, options.get("image_size"))
    return pair, target, draft


def refuse_image_size_without_vision(target: ModelSpec, image_size) -> None:
    """--image-size sizes a vision tower's image tokens: a text-only target has none to size, and a tower that
    resizes every image to one size (LLaVA-1.5, Gemma 3) has as many tokens whatever the size."""
    if image_size is None:
        return
    if target.vision is None:
        raise SpecsimError(f"--image-size: sizes a vision tower's image tokens, and {target.name} has none")
    if target.vision.image_size is None:  # the tower recorded no size: its count does not depend on one
        raise SpecsimError(
            f"--image-size: {target.name}'s vision tower resizes every image to one size "
            f"({target.vision.image_tokens} tokens per image), so a size changes nothing"
        )


def _resolve_models(
    *,
    pair: str | None,
    target: str | None,
    draft: str | None,
    model_config: str | None = None,
    fit_profile: str | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    image_size: ImageSize | None = None,
    draft_kind: str | None = None,
    expert_parallel_tp: int | None = None,
) -> tuple[str | None, ModelSpec, ModelSpec | None]:
    """(pair or None, target, the draft side) from --pair, --target/--draft (or --model-config) or
    --fit-profile and --draft-kind (:func:`specsim.hardware.draft_heads.draft_side`: a head kind's draft
    defaults to its preset for the target; a lookup kind has none); ``image_size``: --image-size, for towers
    whose image tokens depend on it; ``expert_parallel_tp``: --expert-parallel's GPUs, for a --target's
    experts."""
    kind = kind_named(draft_kind)
    for flag, value, size in (("--dtype", dtype, dtype_bytes), ("--kv-dtype", kv_dtype, kv_dtype_bytes)):
        if value is not None:  # named by its flag, not by the model config it would have been read into
            size(value, flag)
    if expert_parallel_tp is not None and not (target or model_config):
        raise SpecsimError("--expert-parallel: needs --target, a mixture-of-experts model")
    if model_config:
        if target:
            raise SpecsimError("--model-config: give either --model-config or --target, not both")
        target = model_config
    if pair and (target or draft):
        raise SpecsimError("--pair: give either --pair or --target/--draft, not both")
    if kind.name != "model" and pair:
        raise SpecsimError(
            f"--pair: a preset pair names a draft model; with --draft-kind {kind.name} give --target"
        )
    if draft and not target:
        raise SpecsimError("--target/--draft: give both (or --pair)")
    if target and not draft and kind.name == "model":
        raise SpecsimError("--target/--draft: give both (or --pair, or a --draft-kind that needs no --draft)")
    kw = {"dtype": dtype, "kv_dtype": kv_dtype, "image_size": image_size}
    if target:
        spec = load_model_spec(target, **kw)
        if expert_parallel_tp is not None:
            spec = expert_parallel(spec, expert_parallel_tp)
        return pair, spec, draft_side(kind, spec, draft, **kw)
    if pair is None and fit_profile is not None:
        return fit_profile_models(fit_profile, **kw)
    if kind.name != "model":  # the default pair names a draft model, which this kind would not run
        raise SpecsimError(f"--draft-kind {kind.name}: needs --target (the default pair names a draft model)")
    pair = pair or DEFAULT_PAIR
    target_name, draft_name = pair_models(pair)
    return pair, load_model_spec(target_name, **kw), load_model_spec(draft_name, **kw)


def expert_parallel(target: ModelSpec, tp: int) -> ModelSpec:
    """``target`` with its routed experts spread whole over ``tp`` GPUs (vLLM --enable-expert-parallel,
    SGLang --ep-size); SpecsimError where there is nothing to spread or it does not split evenly."""
    moe = target.moe
    if moe is None:
        raise SpecsimError(f"--expert-parallel: target {target.name!r} has no routed experts")
    if tp < 2 or moe.experts % tp:
        raise SpecsimError(
            f"--expert-parallel: expected --tp of 2 or more GPUs dividing the {moe.experts} experts, got {tp}"
        )
    return replace(target, moe=replace(moe, expert_parallel=True))


def fit_profile_models(fit_profile: str, **kw) -> tuple[str | None, ModelSpec, ModelSpec]:
    """The models a --fit-profile was measured with (:class:`specsim.hardware.measured_pair.MeasuredPair`).
    ``kw``: ``dtype``/``kv_dtype``/``image_size`` for :func:`load_model_spec`."""
    return models_for_costs(load_profile(fit_profile), "--fit-profile", None, **kw)


def device_runtimes(runtime: str | None, devices: list[Device]) -> dict[str, Runtime]:
    """The runtime per device: --runtime for all, else the kind's default; kinds must match."""
    out = {}
    for dev in devices:
        rt = load_runtime(DEFAULT_RUNTIMES[dev.kind] if runtime is None else runtime)
        if rt.kind != dev.kind:
            raise SpecsimError(
                f"--runtime: {rt.name!r} runs on {rt.kind} devices, but {dev.name!r} is a {dev.kind}"
            )
        out[dev.name] = rt
    return out


def split_mode(given: str | None, tp: int, efficiency: dict) -> str:
    """--split-mode, else the runtimes' own (tensor for fitted efficiencies); runtimes that disagree
    need it."""
    if given is not None:
        return given
    modes = {getattr(e, "split_mode", "tensor") for e in efficiency.values()}
    if len(modes) > 1 and tp > 1:
        raise SpecsimError(
            f"--split-mode: the devices' runtimes split a model differently ({sorted(modes)}); "
            "expected --split-mode tensor or layer"
        )
    return modes.pop() if len(modes) == 1 else "tensor"


def fit_device_name(profile: Profile, given: str | None) -> str:
    """--fit-device, else the profile's provenance device when it is 'cpu…' or a catalog name."""
    if given is not None:
        return given
    device = profile.provenance.device.strip().lower()
    if device.startswith("cpu"):
        return "cpu"
    from specsim.hardware.device import resolve_device_name

    name = resolve_device_name(device)  # a GPU profile records torch's name ("NVIDIA H100 80GB HBM3")
    if name is not None:
        return name
    raise SpecsimError(
        f"--fit-device: profile {profile.name!r} was measured on {profile.provenance.device!r}, "
        "which is not a catalog name; pass --fit-device NAME_OR_JSON"
    )


def fit_on_profile(
    fit_profile: str,
    target: ModelSpec,
    draft: ModelSpec,
    *,
    fit_device: str | None = None,
    fit_dtype: str | None = None,
    runtime: str | None = None,
    validate: bool = False,
) -> tuple[FitResult | HoldoutResult, list[str]]:
    """Efficiencies fitted on a profile's measured latencies (a hold-out on long contexts when
    ``validate``), and the latency entries skipped."""
    profile = load_profile(fit_profile)
    dev = load_device(fit_device_name(profile, fit_device))
    dtype = fit_dtype if fit_dtype is not None else profile.provenance.dtype
    try:
        dtype_bytes(dtype)
    except SpecsimError:
        raise SpecsimError(
            f"--fit-dtype: profile {profile.name!r} has dtype {dtype!r}, which the roofline cannot "
            "size; pass --fit-dtype float32|bfloat16|float16|int8"
        ) from None
    models = {"target": target.with_dtype(dtype), "draft": draft.with_dtype(dtype)}
    points, skipped = points_from_latency(profile.latency)
    source = f"fitted on profile {profile.name} ({len(points)} points, {dtype}) measured on {dev.name}"
    rt = load_runtime(DEFAULT_RUNTIMES[dev.kind] if runtime is None else runtime)
    # A GPU runtime's ``fit`` list is for the published set (SD blocks, all-reduces, quantized kernels); a
    # latency profile constrains its efficiencies and per-forward overhead. The CPU runtime was made for
    # profiles.
    free = rt.fit if rt.kind == "cpu" else tuple(k for k in PROFILE_FIT_GPU if k not in rt.ties)
    kw = {"source": source, "start": rt, "free": free}
    if validate:
        return holdout(points, models, dev, short_context_split(points), **kw), skipped
    return fit_efficiency(points, models, dev, **kw), skipped


def best_trees(
    profile: Profile | None,
    target: ModelSpec,
    draft: ModelSpec,
    devices: list[Device],
    *,
    efficiency: dict,
    batches: list[int],
    contexts: list[int],
    alpha: float | None,
    methods: list[str] | None,
    scenario: str | None,
    tp: int,
    n_max: int,
    gamma_max: int,
    draft_kind: str = "model",
    chain_gamma: int | None = None,
) -> list:
    """The best tree per device × batch × context (--trees), per-rank acceptance from --alpha or the
    profile's top-k traces; ``draft_kind`` as the plan's; beside it the chain at ``chain_gamma`` (--gamma)
    or the best chain."""
    if tp > 1:
        raise SpecsimError("--trees: several GPUs per replica are not modelled for token trees (use --tp 1)")
    if alpha is None and profile is None:
        raise SpecsimError(
            "--trees: needs per-rank acceptance, from a profile's top-k traces or --alpha (not --tau)"
        )
    from specsim.draft_shapes.tree_replay import tree_methods
    from specsim.hardware.tree_plan import plan_trees

    entries = [] if alpha is not None else method_entries(profile, methods, scenario)
    tree = tree_methods(entries, alpha=alpha)
    return plan_trees(
        target,
        draft,
        devices,
        tree,
        efficiency=efficiency,
        batches=batches,
        contexts=contexts,
        n_max=n_max,
        gamma_max=gamma_max,
        draft_kind=draft_kind,
        chain_gamma=chain_gamma,
    )
