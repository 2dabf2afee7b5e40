"""``specsim hardware``: rank devices for a target/draft pair.

Numpy only at import (plug-in rule: no torch). Text tables by default, ``--json`` for machines.
"""

from __future__ import annotations

import argparse

from specsim.bounds import MAX_PLAN_ROWS, number_arg
from specsim.errors import SpecsimError, warn
from specsim.hardware.device import load_device, load_devices
from specsim.hardware.fit import (
    FitResult,
    HoldoutResult,
    fit_efficiency,
    holdout,
    points_from_latency,
    short_context_split,
)
from specsim.hardware.model import ModelSpec, dtype_bytes
from specsim.hardware.parallel import SPLIT_MODES
from specsim.hardware.plan import (
    DEFAULT_BATCHES,
    MethodTau,
    Parallel,
    plan_hardware,
)
from specsim.hardware.plan_text import plan_text
from specsim.hardware.published_set import resolve_model_spec
from specsim.hardware.runtime import DEFAULT_RUNTIMES, Runtime, load_runtime
from specsim.jsonio import check_writable, dumps_json
from specsim.presets import pair_models, pair_profile, profile_pair
from specsim.profile import DEFAULT_PROFILE, Profile, load_profile, shipped_profiles
from specsim.report import fmt, format_table, parse_int, parse_int_list

_DESC = ("Rank devices by predicted tokens/s and speculative-decoding speedup for a target/draft pair, using a "
         "roofline latency model (time = max(FLOPs/(peak*eff_compute(rows)), bytes/(bandwidth*eff_memory(rows))) + "
         "the runtime's per-forward/per-layer overhead, + all-reduces under tensor parallel) and acceptance tau "
         "(from a profile, or --tau/--alpha). speedup = tau/(gamma*c + v), c = Tq/Tp, v = Tv(gamma)/Tp, best gamma "
         "per device unless --gamma; tokens/s are summed over the batch. Decode phase only. The local CPU is "
         "measured only when asked (--device cpu).")


def register(sub) -> None:
    """Add ``specsim hardware``."""
    p = sub.add_parser("hardware", help="rank GPUs/CPUs for a target/draft pair (roofline + profile tau)",
                       description=_DESC)
    p.add_argument("--pair", default=None, help="preset pair: llava-1.5-7b-68m (default) or qwen2.5-coder-0.5b-1.5b")
    p.add_argument("--target", default=None, help="target: calibrate preset, HF config.json path, or a model of the "
                   "published set (llama-2-70b, llama-3.1-8b, codellama-34b, ...; cited configs)")
    p.add_argument("--draft", default=None, help="draft: same choices as --target")
    p.add_argument("--model-config", default=None, metavar="CONFIG_JSON",
                   help="target as a HF config.json (same as --target PATH); needs --draft")
    p.add_argument("--dtype", default=None, help="weights dtype: bfloat16, float16, float32, int8, int4, int4-g32, "
                   "q8_0, q4_0, q4_k_m (default: bfloat16 or the config's)")
    p.add_argument("--kv-dtype", default=None, help="KV-cache dtype when it differs from the weights' (e.g. "
                   "--dtype int4 --kv-dtype float16; default: the weights' or float16 for quantised weights)")
    p.add_argument("--runtime", default=None, metavar="NAME_OR_JSON", help="serving runtime: hf-eager, vllm, "
                   "gpt-fast, llama.cpp, torch-cpu or a runtime JSON (default: vllm on GPUs, torch-cpu on CPUs)")
    p.add_argument("--tp", type=number_arg("gpus", integer=True), default=1, help="GPUs per replica of the target "
                   "(default 1), split as --split-mode says")
    p.add_argument("--split-mode", choices=SPLIT_MODES, default=None, help="how --tp GPUs share the target: "
                   "'tensor' (Megatron sharding: a pass's time divides, all-reduces added) or 'layer' (whole layers "
                   "per GPU, run in turn: only memory divides); default: the runtime's (layer for llama.cpp and "
                   "hf-eager, tensor for vllm and gpt-fast)")
    p.add_argument("--draft-sharded", action="store_true", help="with --tp: split the draft the same way (default: "
                   "the draft runs whole on one GPU)")
    p.add_argument("--gamma", type=number_arg("gamma", integer=True), default=None, help="evaluate at this fixed gamma instead of the best")
    p.add_argument("--tau", type=float, default=None, help="tau at --gamma (tokens per block, bonus included) "
                   "instead of a profile; other gammas are not used")
    p.add_argument("--alpha", type=float, default=None, help="i.i.d. acceptance alpha instead of a profile: "
                   "tau(gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)")
    p.add_argument("--profile", default=None, help=f"profile for tau (default: the pair's, {DEFAULT_PROFILE})")
    p.add_argument("--method", action="append", default=None, help="method code (repeatable) or 'all'; default: first")
    p.add_argument("--scenario", default=None, help="profile scenario (default: its first)")
    p.add_argument("--batch", action="append", default=None, help="batch sizes, e.g. 1,2,4 or 1-8 (default 1..64 x2)")
    p.add_argument("--context", action="append", default=None, help="context tokens (default 1024,4096,8192)")
    p.add_argument("--gamma-max", default="8", help="largest gamma tried (default 8)")
    p.add_argument("--device", action="append", default=None, help="catalog name or device JSON (repeatable; "
                   "default: the whole GPU catalog; 'cpu' measures this machine)")
    p.add_argument("--fit-profile", default=None, help="fit efficiencies on this profile's measured latencies "
                   "and use them on every device")
    p.add_argument("--fit-device", default=None, help="device the fit profile was measured on (default: from "
                   "its provenance, 'cpu' = this machine)")
    p.add_argument("--fit-dtype", default=None, help="weights dtype of the fit profile's models (default: its "
                   "provenance dtype, e.g. float32)")
    p.add_argument("--validate", action="store_true", help="with --fit-profile: fit on short contexts / small "
                   "gamma, report the error on the held-out points")
    p.add_argument("--trees", action="store_true", help="also pick the best token tree per device, batch and "
                   "context (Tv(n) from the roofline over n+1 rows; tau from the profile's top-k traces or --alpha; "
                   "trees of <= --tree-max-nodes nodes)")
    p.add_argument("--tree-max-nodes", type=number_arg("gamma", integer=True), default=64,
                   help="largest tree searched with --trees (default 64)")
    p.add_argument("--list-devices", action="store_true", help="list the catalog with sources and exit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="PNG", help="write speedup vs batch size per device")
    p.set_defaults(func=cmd_hardware)


def _ints(values: list[str] | None, default, name: str, unit: str) -> list[int]:
    if not values:
        return list(default)
    return sorted({x for text in values for x in parse_int_list(text, name=name, unit=unit)})


def _models(args: argparse.Namespace) -> tuple[str | None, ModelSpec, ModelSpec]:
    if args.model_config:
        if args.target:
            raise SpecsimError("--model-config: give either --model-config or --target, not both")
        args.target = args.model_config
    if args.pair and (args.target or args.draft):
        raise SpecsimError("--pair: give either --pair or --target/--draft, not both")
    if bool(args.target) != bool(args.draft):
        raise SpecsimError("--target/--draft: give both (or --pair)")
    pair = None
    kw = {"dtype": args.dtype, "kv_dtype": args.kv_dtype}
    if args.target:
        target_name, draft_name = args.target, args.draft
    elif args.pair is None and args.fit_profile is not None:
        return _fit_profile_models(args.fit_profile, kw)
    else:
        pair = args.pair or "llava-1.5-7b-68m"
        target_name, draft_name = pair_models(pair)
    return pair, resolve_model_spec(target_name, **kw), resolve_model_spec(draft_name, **kw)


def _fit_profile_models(fit_profile: str, kw: dict) -> tuple[str | None, ModelSpec, ModelSpec]:
    """The models a --fit-profile was measured with: those of the pair whose profile it is, else its provenance's."""
    profile = load_profile(fit_profile)
    pair = profile_pair(profile.name)
    target_name, draft_name = pair_models(pair) if pair else (profile.provenance.target, profile.provenance.draft)
    try:
        return pair, resolve_model_spec(target_name, **kw), resolve_model_spec(draft_name, **kw)
    except SpecsimError:
        raise SpecsimError(f"--fit-profile: profile {profile.name!r} was measured with {target_name!r} / "
                           f"{draft_name!r}, which are not model presets or config files; pass --pair NAME or "
                           "--target/--draft CONFIG_JSON for its models") from None


def _methods(profile: Profile, args: argparse.Namespace, gamma_max: int) -> list[MethodTau]:
    from specsim.predict import select_entries

    wanted = None if not args.method or args.method == ["all"] else args.method
    entries = select_entries(profile, wanted, args.scenario)
    if args.scenario is None:
        entries = [e for e in entries if e.scenario == entries[0].scenario]
    if not args.method:
        entries = entries[:1]
    return [MethodTau.from_entry(e, range(1, gamma_max + 1)) for e in entries]


def _user_methods(args: argparse.Namespace, gamma_max: int) -> list[MethodTau] | None:
    """--tau (at --gamma) or --alpha (i.i.d.) instead of a profile; None when neither is given."""
    if args.tau is None and args.alpha is None:
        return None
    if args.tau is not None and args.alpha is not None:
        raise SpecsimError("--tau/--alpha: give one of them, not both")
    if args.tau is not None:
        if args.gamma is None:
            raise SpecsimError("--tau: needs --gamma (the gamma that tau belongs to)")
        if not 1.0 <= args.tau <= args.gamma + 1:
            raise SpecsimError(f"--tau: expected 1 <= tau <= gamma+1 = {args.gamma + 1}, got {args.tau}")
        return [MethodTau("user", f"tau={args.tau:g}", (args.gamma,), (args.tau,), ("--tau",))]
    if not 0.0 <= args.alpha < 1.0:
        raise SpecsimError(f"--alpha: expected 0 <= alpha < 1, got {args.alpha}")
    from specsim.theory import tau_iid

    gammas = (args.gamma,) if args.gamma else tuple(range(1, gamma_max + 1))
    return [MethodTau("user", f"alpha={args.alpha:g}", gammas, tuple(float(tau_iid(args.alpha, g)) for g in gammas),
                      tuple("iid --alpha" for _ in gammas))]


def _fixed_gamma(methods: list[MethodTau], gamma: int | None) -> list[MethodTau]:
    """Keep only ``gamma`` in every method (--gamma)."""
    if gamma is None:
        return methods
    if gamma < 1:
        raise SpecsimError(f"--gamma: expected an integer >= 1, got {gamma}")
    out = []
    for mt in methods:
        if gamma not in mt.gammas:
            raise SpecsimError(f"--gamma: method {mt.method} has tau for gamma {list(mt.gammas)}, not {gamma}")
        k = mt.gammas.index(gamma)
        out.append(MethodTau(mt.method, mt.scenario, (gamma,), (mt.tau[k],), (mt.tau_source[k],),
                             mt.draft_batch_size))
    return out


def _runtimes(args: argparse.Namespace, devices) -> dict[str, Runtime]:
    """The runtime per device: --runtime for all, else the kind's default; kinds must match."""
    out = {}
    for dev in devices:
        rt = load_runtime(DEFAULT_RUNTIMES[dev.kind] if args.runtime is None else args.runtime)
        if rt.kind != dev.kind:
            raise SpecsimError(f"--runtime: {rt.name!r} runs on {rt.kind} devices, but {dev.name!r} is a {dev.kind}")
        out[dev.name] = rt
    return out


def _split_mode(args: argparse.Namespace, efficiency: dict) -> str:
    """--split-mode, else the runtimes' own (tensor for fitted efficiencies); runtimes that disagree need it."""
    if args.split_mode is not None:
        return args.split_mode
    modes = {getattr(e, "split_mode", "tensor") for e in efficiency.values()}
    if len(modes) > 1 and args.tp > 1:
        raise SpecsimError(f"--split-mode: the devices' runtimes split a model differently ({sorted(modes)}); "
                           "expected --split-mode tensor or layer")
    return modes.pop() if len(modes) == 1 else "tensor"


def _fit_device_name(profile: Profile, given: str | None) -> str:
    if given:
        return given
    device = profile.provenance.device.strip().lower()
    if device.startswith("cpu"):
        return "cpu"
    from specsim.hardware.device import catalog_names

    if device in catalog_names():
        return device
    raise SpecsimError(f"--fit-device: profile {profile.name!r} was measured on {profile.provenance.device!r}, "
                       "which is not a catalog name; pass --fit-device NAME_OR_JSON")


PROFILE_FIT_GPU = ("compute_efficiency", "memory_efficiency_gemv", "memory_efficiency_gemm", "overhead_ms_per_forward")


def _fit(args, target: ModelSpec, draft: ModelSpec) -> tuple[FitResult | HoldoutResult, list[str]]:
    profile = load_profile(args.fit_profile)
    dev = load_device(_fit_device_name(profile, args.fit_device))
    dtype = args.fit_dtype or profile.provenance.dtype
    try:
        dtype_bytes(dtype)
    except SpecsimError:
        raise SpecsimError(f"--fit-dtype: profile {profile.name!r} has dtype {dtype!r}, which the roofline cannot "
                           "size; pass --fit-dtype float32|bfloat16|float16|int8") from None
    models = {"target": target.with_dtype(dtype), "draft": draft.with_dtype(dtype)}
    points, skipped = points_from_latency(profile.latency)
    source = f"fitted on profile {profile.name} ({len(points)} points, {dtype}) measured on {dev.name}"
    rt = load_runtime(DEFAULT_RUNTIMES[dev.kind] if args.runtime is None else args.runtime)
    # A GPU runtime's ``fit`` list is for the published set (SD blocks, all-reduces, quantized kernels); a
    # latency profile constrains its efficiencies and per-forward overhead. The CPU runtime was made for profiles.
    free = rt.fit if rt.kind == "cpu" else PROFILE_FIT_GPU
    kw = {"source": source, "start": rt, "free": free}
    if args.validate:
        return holdout(points, models, dev, short_context_split(points), **kw), skipped
    return fit_efficiency(points, models, dev, **kw), skipped


def cmd_hardware(args: argparse.Namespace) -> int:
    if args.list_devices:
        return _list_devices(args)
    if args.plot is not None:
        check_writable(args.plot, "--plot", suffix=".png")
    gamma_max = parse_int(args.gamma_max, name="--gamma-max", unit="gamma")
    batches = _ints(args.batch, DEFAULT_BATCHES, "--batch", "batch")
    contexts = _ints(args.context, (1024, 4096, 8192), "--context", "tokens")
    pair, target, draft = _models(args)
    methods = _user_methods(args, gamma_max)
    profile = None
    if methods is None:
        profile_name = args.profile if args.profile is not None else ((pair_profile(pair) if pair else None) or DEFAULT_PROFILE)
        if args.profile is None and profile_name not in shipped_profiles():
            raise SpecsimError(f"--profile: the default profile {profile_name!r} for pair {pair!r} is not shipped "
                               "yet; pass --profile NAME_OR_PATH")
        profile = load_profile(profile_name)
        if not profile.acceptance:
            raise SpecsimError(f"--profile: profile {profile.name!r} has latency but no acceptance entries: pass "
                               "--profile NAME_OR_PATH with acceptance, --alpha A, or --tau T --gamma N")
        methods = _fixed_gamma(_methods(profile, args, max(gamma_max, args.gamma or 0)), args.gamma)
        notes = [f"tau from profile {profile.name} ({profile.provenance.source})"]
        if args.profile is None and pair is None:
            warn(f"tau comes from the default profile {profile.name} ({profile.provenance.target} / "
                 f"{profile.provenance.draft}), not from {target.name} / {draft.name}: pass --alpha A, --tau T "
                 "--gamma N or --profile with their acceptance")
    else:
        notes = [f"tau from the command line ({methods[0].scenario})"]
    devices = load_devices(args.device)
    rows = len(batches) * len(contexts) * len(devices) * len(methods)
    if rows > MAX_PLAN_ROWS:
        raise SpecsimError(f"--batch/--context: {len(batches)} batch sizes x {len(contexts)} contexts x {len(devices)} "
                           f"devices x {len(methods)} methods = {rows} rows; expected at most {MAX_PLAN_ROWS} "
                           "(narrow the ranges)")
    fit = None
    efficiency = _runtimes(args, devices)
    if args.fit_profile is not None:
        fit, skipped = _fit(args, target, draft)
        notes += [f"fit: skipped {s}" for s in skipped]
        fitted = fit.fit.efficiency if isinstance(fit, HoldoutResult) else fit.efficiency
        efficiency = {d.name: fitted for d in devices}
    parallel = Parallel(args.tp, args.draft_sharded, _split_mode(args, efficiency))
    plan = plan_hardware(target, draft, devices, methods, efficiency=efficiency, batches=batches,
                         contexts=contexts, notes=tuple(notes), parallel=parallel)
    trees = _trees(args, profile, target, draft, devices, efficiency, batches, contexts, gamma_max)
    if args.plot:
        from specsim.hardware.plots import plot_speedup_vs_batch

        plot_speedup_vs_batch(plan, args.plot)
    if args.json:
        out = {"target": target.name, "draft": draft.name, "profile": None if profile is None else profile.name,
               "plan": plan.to_json(),
               "fit": None if fit is None else fit.to_json()}
        if trees is not None:
            out["trees"] = [r.to_json() for r in trees]
        print(dumps_json(out))
        return 0
    print(plan_text(plan, target, draft, fit))
    if trees is not None:
        from specsim.hardware.tree_plan import tree_plan_text

        print("\ntoken trees (Sequoia-style search; tau from per-rank acceptance, the same at every depth; speedup "
              "= tau*Tp / (draft passes + Tv(n) + runtime overhead per block)):")
        print(tree_plan_text(trees))
    return 0


def _trees(args, profile, target, draft, devices, efficiency, batches, contexts, gamma_max):
    """The best tree per device × batch × context (--trees), or None."""
    if not args.trees:
        return None
    if args.tp > 1:
        raise SpecsimError("--trees: several GPUs per replica are not modelled for token trees (use --tp 1)")
    from specsim.hardware.tree_plan import TreeMethod, plan_trees, tree_methods
    from specsim.trees import rank_acceptance_iid

    if args.alpha is not None:
        methods = [TreeMethod("user", rank_acceptance_iid(args.alpha, 8), 1, f"iid ranks, alpha={args.alpha:g}")]
    elif profile is None:
        raise SpecsimError("--trees: needs per-rank acceptance, from a profile's top-k traces or --alpha (not --tau)")
    else:
        from specsim.predict import select_entries

        wanted = None if not args.method or args.method == ["all"] else args.method
        entries = select_entries(profile, wanted, args.scenario)
        entries = [e for e in entries if e.scenario == entries[0].scenario] if args.scenario is None else entries
        methods = tree_methods(entries if args.method else entries[:1])
    return plan_trees(target, draft, devices, methods, efficiency=efficiency, batches=batches, contexts=contexts,
                      n_max=args.tree_max_nodes, gamma_max=gamma_max)


def _list_devices(args: argparse.Namespace) -> int:
    devices = load_devices(args.device)
    if args.json:
        print(dumps_json([d.to_json() for d in devices]))
        return 0
    rows = [[d.name, f"{d.memory_bandwidth_bytes_per_s / 1e9:.0f}", f"{d.peak_flops_per_s / 1e12:.1f}",
             d.peak_flops_dtype, f"{d.memory_bytes / 1e9:.0f}", fmt(d.price_per_hour_usd, 2)] for d in devices]
    print(format_table(["device", "GB/s", "TFLOP/s", "dtype", "GB", "$/h"], rows))
    for d in devices:
        print(f"{d.name}:")
        for key, src in d.sources.items():
            print(f"  {key}: {src}")
    return 0
