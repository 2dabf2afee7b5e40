"""One serving simulation's set-up from a command's options as given: ``specsim serve`` hands them here in
one :class:`ServeRequest` and prints what :func:`serve_setup` returns (a ServeSetup and what it was built
from). Models: the pair named, or a cost profile's own (``measured_pair.models_for_costs``); acceptance: the
one source of :mod:`specsim.predict.acceptance_source`; image tokens: the target's. Errors name options."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np

from specsim.draft_kinds.registry import draft_kind
from specsim.draft_shapes.policies import GammaPolicy, parse_batch_ranges
from specsim.errors import SpecsimError
from specsim.hardware.device import DEVICE_DEFAULT, load_device
from specsim.hardware.host import contended_note
from specsim.hardware.image_tokens import parse_image_size
from specsim.hardware.measured_pair import models_for_costs, other_pair_note
from specsim.hardware.model import check_positions
from specsim.hardware.plan import Parallel, plan_hardware
from specsim.hardware.plan_inputs import device_runtimes, resolve_models, split_mode
from specsim.hardware.prices import parse_prices, priced
from specsim.predict import acceptance_source
from specsim.predict.tau_at_gamma import EXTRAPOLATED
from specsim.profiles import load_profile
from specsim.serve.arrivals import read_trace
from specsim.serve.compare import ServeSetup, Workload
from specsim.serve.metrics import parse_slo
from specsim.serve.roofline_cost import RooflineStepCost
from specsim.serve.scheduler import DEFAULT_MAX_NUM_SEQS, SchedulerConfig
from specsim.serve.speculation import serving_source
from specsim.serve.vllm_bench import VllmBenchResult, read_vllm_bench_result

GAMMA_DEFAULT = 3  # draft tokens per step where no --gamma-by-batch range applies
# the load options' defaults (serve and tune), which a trace replaces
LOAD_DEFAULTS = {
    "burstiness": 1.0,
    "requests": 1000,
    "prompt_tokens": 512,
    "output_tokens": 256,
    "images": None,
}


@dataclass(frozen=True)
class ServeRequest:
    """``specsim serve``'s options as given (None: not given)."""

    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    draft_kind: str | None = None
    image_size: str | None = None
    device: str | None = None
    price: list[str] | None = None
    runtime: str | None = None
    cost_profile: str | None = None
    tp: int = 1
    draft_image_tokens: int | None = None
    trace: str | None = None
    requests: int | None = None
    burstiness: float | None = None
    prompt_tokens: int | None = None
    images: int | None = None
    output_tokens: int | None = None
    gamma: int = GAMMA_DEFAULT
    gamma_given: bool = False  # --gamma named (a 3 given is not the default: no step may leave it unread)
    gamma_by_batch: str | None = None
    sd_off_from_batch: int | None = None
    alpha: float | None = None
    tau: float | None = None
    acceptance: str | None = None
    acceptance_profile: str | None = None
    method: str | None = None
    scenario: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int = 8192
    encoder_budget: int | None = None
    no_chunked_prefill: bool = False
    kv_cache_tokens: int | None = None
    slo: str | None = None
    seed: int = 0

    @classmethod
    def from_options(cls, options: dict) -> ServeRequest:
        """The request from a command's parsed options (others ignored; a --gamma of None: not given)."""
        given = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        gamma = given.pop("gamma", None)
        return cls(**given, **({} if gamma is None else {"gamma": gamma, "gamma_given": True}))

    @property
    def device_name(self) -> str:
        return DEVICE_DEFAULT if self.device is None else self.device

    def load(self, name: str):
        return load_value(name, getattr(self, name))  # as given, else its default


def load_value(name: str, given):
    """A load option as given, else its :data:`LOAD_DEFAULTS` value (None: not given; a trace refuses it)."""
    return LOAD_DEFAULTS[name] if given is None else given


def _policy(req: ServeRequest) -> GammaPolicy:
    by_batch = parse_batch_ranges(req.gamma_by_batch) if req.gamma_by_batch is not None else ()
    return GammaPolicy(req.gamma, by_batch, req.sd_off_from_batch)


def refuse_with_trace(**options) -> None:
    """SpecsimError naming the first load option given (not None) beside a trace: the trace gives every
    request's arrival, lengths and images, so the option would be silently ignored."""
    for name, value in options.items():
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise SpecsimError(f"{flag}: does not apply with --trace (the trace gives every request)")


def _workload(req: ServeRequest, images: int) -> tuple[Workload, VllmBenchResult | None]:
    """The workload, and the vLLM result when --trace is one."""
    if req.trace is None:
        shape = (req.load("requests"), req.load("prompt_tokens"), images, req.load("output_tokens"))
        return Workload(*shape, req.load("burstiness")), None
    refuse_with_trace(**{k: getattr(req, k) for k in LOAD_DEFAULTS})
    return trace_workload(req.trace, req.seed)


def trace_workload(path: str, seed: int) -> tuple[Workload, VllmBenchResult | None]:
    """The requests of a JSONL trace, or of a vLLM bench result (``*.json``, its lengths drawn with
    ``seed``) and the result."""
    if str(path).endswith(".json"):
        result = read_vllm_bench_result(path)
        return Workload(trace=result.requests(np.random.default_rng([seed, 2]))), result
    return Workload(trace=read_trace(path)), None


def _acceptance(req: ServeRequest, load):
    """The one acceptance source of --alpha, --tau, --acceptance or --acceptance-profile."""
    found = acceptance_source.from_options(
        load=load,
        alpha=req.alpha,
        tau=req.tau,
        gamma=req.gamma,
        spec=req.acceptance,
        profile=req.acceptance_profile,
        method=req.method,
        scenario=req.scenario,
    )
    if found is None:
        raise SpecsimError(
            "--alpha: needed (i.i.d. acceptance per draft token, 0 <= alpha < 1), or --tau, --acceptance or "
            "--acceptance-profile"
        )
    return found


def _models(req: ServeRequest, cost_profile):
    """(target, draft): those named, or the cost profile's own (named others refused)."""
    kw = {"image_size": None if req.image_size is None else parse_image_size(req.image_size)}
    named = None
    if req.pair or req.target or req.draft or cost_profile is None:
        named = resolve_models(
            pair=req.pair, target=req.target, draft=req.draft, draft_kind=req.draft_kind, **kw
        )
    if cost_profile is None:
        return named[1:]
    return models_for_costs(cost_profile, "--cost-profile", named, **kw)[1:]


def _images(req: ServeRequest, target) -> int:
    """--images, default 1 for a VLM and 0 for a text-only target (:func:`refuse_images_without_vision`
    refuses images on a text-only target, given here or by a trace)."""
    if req.images is None:
        return 1 if target.vision is not None else 0
    return req.images


def check_longest_request(target, workload) -> None:
    """SpecsimError, naming the load options or --trace, when the workload's longest request (prompt, images,
    output) is beyond the target's window (:func:`specsim.hardware.model.check_positions`)."""
    image_tokens = target.vision.image_tokens if target.vision else 0
    flag = "--trace" if workload.trace is not None else "--prompt-tokens/--images/--output-tokens"
    what = "positions in the longest request (prompt, images, output)"
    check_positions(target, workload.longest_positions(image_tokens), flag, what)


def refuse_images_without_vision(workload, target, flag: str) -> None:
    """A workload whose requests carry images, on a text-only target: refused naming ``flag`` (a text-only
    model prices no image tokens, so the images would vanish without a word)."""
    most = workload.max_images()
    if most and target.vision is None:
        raise SpecsimError(
            f"{flag}: requests carry up to {most} image(s), but {target.name} has no vision tower (a "
            "text-only model); expected requests without images"
        )


def _profile_cost(req: ServeRequest, profile, image_tokens: int, entries):
    """The measured profile's step cost and the batch it may run at most (--max-num-seqs within its grid);
    the roofline's options refused."""
    from specsim.serve.profile_cost import ProfileStepCost

    for flag, value, why in (
        ("--tp", req.tp if req.tp != 1 else None, "the profile's costs are its machine's, on its own GPUs"),
        ("--runtime", req.runtime, "the profile's costs are its own engine's"),
        ("--draft-image-tokens", req.draft_image_tokens, "the drafting method's prompt comes from the "
         "acceptance entry's traces"),
        ("--price", req.price, "a --cost-profile run has no device"),
        ("--device", req.device, "its machine's costs"),
        ("--image-size", req.image_size, "its image tokens are those it measured"),
        ("--draft-kind", req.draft_kind if draft_kind(req.draft_kind).name != "model" else None,
         "it prices the draft model it measured"),
    ):  # fmt: skip
        if value is not None:
            raise SpecsimError(
                f"{flag}: applies to roofline pricing, not with --cost-profile ({why}); got {value}"
            )
    cost = ProfileStepCost.from_profile(profile, image_tokens, entries)
    largest = cost.batched.batch_sizes[-1]
    if req.max_num_seqs is not None and req.max_num_seqs > largest:
        raise SpecsimError(
            f"--max-num-seqs: {req.max_num_seqs} is beyond the profile's batched grid (measured up to batch "
            f"{largest}; calibrate latency --request-batches)"
        )
    return cost, largest if req.max_num_seqs is None else req.max_num_seqs


def _roofline_cost(req: ServeRequest, target, draft):
    device = priced([load_device(req.device_name)], parse_prices(req.price))[0]
    runtime = device_runtimes(req.runtime, [device])[device.name]
    split = split_mode(None, req.tp, {device.name: runtime})
    per_image = req.draft_image_tokens
    kind = draft_kind(req.draft_kind).name
    cost = RooflineStepCost(
        target,
        draft,
        device,
        runtime,
        tp=req.tp,
        split=split,
        draft_image_tokens_per_image=per_image,
        draft_kind=kind,
    )
    kv = cost.kv_cache_tokens(req.kv_cache_tokens)
    max_seqs = DEFAULT_MAX_NUM_SEQS if req.max_num_seqs is None else req.max_num_seqs
    price = device.price_per_hour_usd  # per GPU; the run rents --tp of them
    usd_per_hour = None if price is None else price * req.tp
    return cost, max_seqs, kv, device.name, getattr(runtime, "name", "efficiency"), usd_per_hour


def roofline_step_cost(req: ServeRequest) -> RooflineStepCost:
    """The roofline step cost ``serve`` prices ``req``'s models, drafting kind, device, runtime and TP with
    (``specsim tune``'s trials are priced here, so a trial is what ``serve`` prints)."""
    return _roofline_cost(req, *_models(req, None))[0]


def serve_setup(req: ServeRequest) -> tuple[ServeSetup, dict]:
    """The set-up ``req`` asks for, and what it was built from (``about``: the header's fields, notes)."""
    slo = parse_slo(req.slo) if req.slo is not None else None
    policy = _policy(req)
    load = functools.lru_cache(load_profile)  # a profile named twice (costs and acceptance) is read once
    acceptance = _acceptance(req, load)
    cost_profile = None if req.cost_profile is None else load(req.cost_profile)
    target, draft = _models(req, cost_profile)
    images = _images(req, target)
    workload, bench = _workload(req, images)
    refuse_images_without_vision(workload, target, "--trace" if req.trace else "--images")
    notes = [note] if bench is not None and (note := bench.model_note(target)) else []
    if acceptance.entry is not None and req.acceptance_profile is not None:
        note = other_pair_note(load(req.acceptance_profile), target, draft)
        notes += [note] if note else []
    tau, source = acceptance.tau_with_source(g := policy.max_gamma)
    if source.startswith(EXTRAPOLATED):  # as hardware and predict mark it
        notes.append(f"acceptance at gamma {g} is an extrapolation ({source}: tau {tau:.2f} there)")
    image_tokens = target.vision.image_tokens if target.vision else 0
    check_longest_request(target, workload)
    if cost_profile is not None and (note := contended_note(cost_profile)):
        notes.append(note)
    if cost_profile is None:
        cost, max_seqs, kv, device, runtime, usd_per_hour = _roofline_cost(req, target, draft)
    else:
        entries = (acceptance.entry,) if acceptance.entry is not None else ()
        cost, max_seqs = _profile_cost(req, cost_profile, image_tokens, entries)
        kv = req.kv_cache_tokens  # None: unbounded (no memory figure caps a measured profile's)
        device, runtime = f"measured profile {req.cost_profile}", "its batched engine"
        usd_per_hour = None
    for flag, given, what in (
        ("--draft-image-tokens", req.draft_image_tokens, "sizes the draft prompt's images"),
        ("--encoder-budget", req.encoder_budget, "caps the image tokens encoded per step"),
        ("--image-size", req.image_size, "sizes the requests' images"),
    ):
        if given is not None and not workload.max_images():
            raise SpecsimError(f"{flag}: {what}, and no request has one")
    if req.draft_image_tokens is not None and not draft_kind(req.draft_kind).has_model:  # no draft prompt
        raise SpecsimError(
            "--draft-image-tokens: sizes the draft prompt's images, and kind "
            f"{req.draft_kind} drafts with no model"
        )
    unused = [f"{lo}-{hi}:{g}" for lo, hi, g in policy.by_batch if lo > max_seqs]
    if unused:  # a range no step reaches would set nothing
        raise SpecsimError(
            f"--gamma-by-batch: range {unused[0]} starts above --max-num-seqs {max_seqs} (no step decodes "
            "more)"
        )
    if req.sd_off_from_batch == 1:  # every decode batch is 1 or more: the draft options would set nothing
        raise SpecsimError("--sd-off-from-batch: 1 turns SD off at every batch (none drafts); expected >= 2")
    if req.sd_off_from_batch is not None and req.sd_off_from_batch > max_seqs:  # it would never turn SD off
        raise SpecsimError(
            f"--sd-off-from-batch: expected at most --max-num-seqs {max_seqs} (no step decodes more), got "
            f"{req.sd_off_from_batch}"
        )
    if req.gamma_given and req.tau is None and not policy.falls_back(max_seqs):  # --tau reads it
        raise SpecsimError(
            f"--gamma: {req.gamma} sets no step: --gamma-by-batch (with --sd-off-from-batch) covers every "
            f"decode batch 1..{max_seqs} (--max-num-seqs)"
        )
    kv_source = "--kv-cache-tokens" if req.kv_cache_tokens is not None else (
        f"the KV cache {device}'s memory holds beside the weights (--tp, or --kv-cache-tokens)"
    )  # fmt: skip
    scheduler = SchedulerConfig(
        max_seqs, req.max_num_batched_tokens, req.encoder_budget, not req.no_chunked_prefill, kv, kv_source
    )
    setup = ServeSetup(cost, workload, policy, serving_source(acceptance), scheduler, slo, req.seed)
    about = {
        "target": target.name,
        "draft": None if draft is None else draft.name,
        "draft_kind": draft_kind(req.draft_kind).name,
        "device": device,
        "runtime": runtime,
        "tp": req.tp,
        "sd_policy": policy.describe(max_seqs),
        "acceptance": acceptance.label,
        "scheduler": {
            "max_num_seqs": scheduler.max_num_seqs,
            "max_num_batched_tokens": scheduler.max_num_batched_tokens,
            "encoder_budget_tokens": scheduler.encoder_budget,
            "chunked_prefill": scheduler.chunked_prefill,
            "kv_cache_tokens": kv,
        },
        "image_tokens_per_image": cost.image_tokens_per_image,
        "workload": "trace " + req.trace
        if req.trace
        else (
            f"{req.load('requests')} requests x ({req.load('prompt_tokens')} text tokens + {images} images"
            f" -> {req.load('output_tokens')} output tokens), burstiness {req.load('burstiness'):g}"
        ),
        "seed": req.seed,
        "usd_per_hour": usd_per_hour,
    } | ({"vllm_bench_measured": bench.measured} if bench is not None else {})
    return setup, about | ({"notes": notes} if notes else {})


def context_note(setup: ServeSetup, metrics=()) -> str | None:
    """Where the run read a measured profile's grids past what it measured (None: nowhere, or a roofline):
    the widest KV cache the ``metrics``' runs priced (none given: at least the longest prompt + output)."""
    note = getattr(setup.cost, "extrapolation_note", None)
    if note is None:
        return None
    w, per_image = setup.workload, setup.cost.image_tokens_per_image
    if w.trace is not None:
        prompts, outputs = w.trace.prompt_tokens + w.trace.images * per_image, w.trace.output_tokens
        longest, output = int(prompts.max()), int(outputs.max())
    else:
        images = max([w.images, *(k for k, _ in w.image_mix)])
        longest, output = w.prompt_tokens + images * per_image, w.output_tokens
    widest = max((m.max_context_tokens for m in metrics), default=0)
    return note(widest or longest + output - 1, longest, at_least=not widest)


def decode_phase(req: ServeRequest, sd_metrics) -> dict | None:
    """What ``specsim hardware`` prints for the same pair, device, runtime, TP, acceptance and γ, at the SD
    run's mean decode batch and the workload's mean context: the decode-phase speedup the served TPOT
    speedup is to be read against (None: a cost profile, a γ that varies by batch, or no decode step)."""
    if (
        not sd_metrics.mean_decode_batch > 0  # every request ended at its prefill's token: nothing decoded
        or req.cost_profile is not None
        or req.gamma_by_batch
        or req.sd_off_from_batch
        or req.trace
        or req.gamma < 1
    ):
        return None
    target, draft = _models(req, None)
    device = load_device(req.device_name)
    runtime = device_runtimes(req.runtime, [device])[device.name]
    per_image = target.vision.image_tokens if target.vision else 0
    text, output = req.load("prompt_tokens"), req.load("output_tokens")
    context = round(text + _images(req, target) * per_image + output / 2)
    batch = max(1, round(sd_metrics.mean_decode_batch))
    plan = plan_hardware(
        target,
        draft,
        [device],
        [_acceptance(req, load_profile).method_tau((req.gamma,))],
        efficiency={device.name: runtime},
        batches=(batch,),
        contexts=(context,),
        parallel=Parallel(req.tp, split=split_mode(None, req.tp, {device.name: runtime})),
    )
    return {"gamma": req.gamma, "batch": batch, "context_tokens": context, "speedup": plan.rows[0].speedup}
