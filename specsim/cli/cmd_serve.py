"""``specsim serve``: simulate an inference server under load, SD on vs off side by side.

Numpy only at import (plug-in rule: no torch). Text tables by default, ``--json`` for machines; writes no
file. The work is in :mod:`specsim.serve`.
"""

from __future__ import annotations

import argparse

import numpy as np

from specsim.bounds import number_arg
from specsim.cli.model_options import add_model_options, image_size
from specsim.cli.progress import ProgressBar
from specsim.draft_kinds.registry import draft_kind
from specsim.draft_shapes.policies import GammaPolicy, parse_batch_ranges
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.plan_inputs import device_runtimes, resolve_models, split_mode
from specsim.jsonio import check_writable, dumps_json
from specsim.serve.arrivals import burstiness_arg, rate_arg, rates_arg, read_trace
from specsim.serve.compare import (
    TARGET_ONLY,
    ServeSetup,
    Workload,
    compare_at,
    max_rate_meeting_slo,
    sweep_rates,
)
from specsim.serve.metrics import parse_slo
from specsim.serve.roofline_cost import RooflineStepCost
from specsim.serve.scheduler import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, SchedulerConfig
from specsim.serve.serve_text import comparison_text, max_rate_text, sweep_text, vllm_measured_text
from specsim.serve.speculation import IidAcceptance, alpha_arg, replay_of
from specsim.serve.vllm_bench import read_vllm_bench_result

_DESC = (
    "Simulate a vLLM-V1-like server (continuous batching, chunked prefill, decode first, an encoder budget "
    "for images) serving requests that arrive at a rate (Poisson, or Gamma gaps with --burstiness) or from a "
    "JSONL trace, with speculative decoding (SD: gamma drafts per step, each accepted with probability "
    "alpha) and without it (target-only). Every step is priced by the GPU planner's roofline for the pair, "
    "device and runtime (specsim hardware). Prints TTFT (arrival -> first token), TPOT (time per output "
    "token after the first), ITL (gaps between tokens; SD emits tau tokens at once, so many gaps are 0) and "
    "E2E at p50/p90/p99 in ms, output tokens/s, requests/s and goodput (requests/s meeting --slo). "
    "--rates sweeps rates and names the one from which SD stops paying (p50 TPOT worse than target-only)."
)


def register(sub) -> None:
    """Add ``specsim serve``."""
    p = sub.add_parser(
        "serve", help="simulate a server under load: SD on vs off (TTFT/TPOT/goodput)", description=_DESC
    )
    models = p.add_argument_group("models and hardware")
    add_model_options(models)
    models.add_argument(
        "--cost-profile",
        default=None,
        metavar="PROFILE",
        help="price steps from a measured profile's batched grids (calibrate latency --request-batches) "
        "instead of the roofline: this machine's cost; --max-num-seqs defaults to its largest batch",
    )
    models.add_argument(
        "--tp",
        type=number_arg("gpus", integer=True),
        default=1,
        help="GPUs the target is split over (default 1; the draft as the runtime places it: vLLM and SGLang "
        "shard it the same way)",
    )
    models.add_argument(
        "--draft-image-tokens",
        type=number_arg("tokens", integer=True),
        default=None,
        help="positions one image fills in the draft's prompt (default: the target's, multimodal drafting; "
        "0: text-only drafting); roofline pricing only",
    )
    load = p.add_argument_group("load")
    rate = load.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=rate_arg, default=None, help="requests per second (default 4)")
    rate.add_argument("--rates", type=rates_arg, default=None, help="sweep these rates, e.g. 1,2,4,8")
    rate.add_argument(
        "--trace",
        default=None,
        metavar="JSONL",
        help="requests from a JSONL file (arrival_s, prompt_tokens, images, output_tokens per line), or a "
        "'vllm bench serve --save-result --save-detailed' JSON (its prompts and outputs at its rate and "
        "burstiness; its measured medians are printed beside the simulation)",
    )
    load.add_argument(
        "--requests",
        type=number_arg("size", integer=True),
        default=1000,
        help="requests per simulation (default 1000)",
    )
    load.add_argument(
        "--burstiness",
        type=burstiness_arg,
        default=1.0,
        help="Gamma shape of the inter-arrival gaps: 1 = Poisson (default), < 1 burstier",
    )
    load.add_argument(
        "--prompt-tokens",
        type=number_arg("tokens", integer=True),
        default=512,
        help="text tokens per prompt (default 512)",
    )
    load.add_argument(
        "--images",
        type=number_arg("images", zero_ok=True, integer=True),
        default=1,
        help="images per prompt, each taking the target's image tokens (default 1)",
    )
    load.add_argument(
        "--output-tokens",
        type=number_arg("tokens", integer=True),
        default=256,
        help="output tokens per request (default 256)",
    )
    sd = p.add_argument_group("speculative decoding")
    sd.add_argument(
        "--gamma",
        type=number_arg("gamma", integer=True),
        default=3,
        help="draft tokens per step (num_speculative_tokens, default 3)",
    )
    sd.add_argument(
        "--gamma-by-batch",
        default=None,
        metavar="LO-HI:G,...",
        help="gamma per decode batch size, e.g. 1-8:5,9-32:3,33-256:0 "
        "(vLLM num_speculative_tokens_per_batch_size); --gamma elsewhere",
    )
    sd.add_argument(
        "--sd-off-from-batch",
        type=number_arg("batch", integer=True),
        default=None,
        help="no SD in steps whose decode batch is at least this (vLLM disable_by_batch_size)",
    )
    sd.add_argument(
        "--alpha",
        type=alpha_arg,
        default=None,
        help="i.i.d. acceptance probability per draft token (this or --acceptance-profile is needed)",
    )
    sd.add_argument(
        "--acceptance-profile",
        metavar="PROFILE",
        default=None,
        help="replay a profile's greedy traces instead of --alpha: simulated request i follows traced prompt "
        "i mod n (--method, --scenario pick the entry); with --cost-profile, the method's own prompt and "
        "set-up per image are priced too",
    )
    sd.add_argument("--method", default=None, help="drafting method of --acceptance-profile's entry")
    sd.add_argument("--scenario", default=None, help="scenario of --acceptance-profile's entry")
    sched = p.add_argument_group("scheduler (vLLM V1 knobs)")
    sched.add_argument(
        "--max-num-seqs",
        type=number_arg("batch", integer=True),
        default=None,
        help=f"most running requests (default {DEFAULT_MAX_NUM_SEQS}; with --cost-profile its largest batch)",
    )
    sched.add_argument(
        "--max-num-batched-tokens",
        type=number_arg("tokens", integer=True),
        default=DEFAULT_MAX_NUM_BATCHED_TOKENS,
        help=f"token budget per step (default {DEFAULT_MAX_NUM_BATCHED_TOKENS})",
    )
    sched.add_argument(
        "--encoder-budget",
        type=number_arg("tokens", integer=True),
        default=None,
        help="image tokens the encoder takes per step (default: the token budget)",
    )
    sched.add_argument("--no-chunked-prefill", action="store_true", help="prefill whole prompts only")
    sched.add_argument(
        "--kv-cache-tokens",
        type=number_arg("tokens", integer=True),
        default=None,
        help="KV positions that fit (default: device memory left by the weights, roofline)",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--slo", default=None, help="goodput bounds in ms, e.g. ttft=500,tpot=50 (keys ttft, tpot, e2e)"
    )
    out.add_argument(
        "--max-rate",
        action="store_true",
        help="search the highest rate at which --slo-attainment of the requests meet --slo, SD and "
        "target-only (a rate search; --rate/--rates then only print their comparison)",
    )
    out.add_argument(
        "--slo-attainment",
        type=number_arg("ratio"),
        default=0.9,
        help="share of requests that must meet --slo for --max-rate (default 0.9)",
    )
    out.add_argument(
        "--seed",
        type=number_arg("seed", zero_ok=True, integer=True),
        default=0,
        help="seed of arrivals and acceptance (default 0)",
    )
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr for --rates")
    out.add_argument(
        "--plot", default=None, metavar="PNG", help="with --rates: latency, throughput vs rate, SD on and off"
    )
    out.add_argument(
        "--jobs",
        type=number_arg("threads", integer=True),
        default=1,
        help="processes for --rates (default 1; the rates are independent simulations)",
    )
    p.set_defaults(func=cmd_serve)


def _policy(args) -> GammaPolicy:
    by_batch = parse_batch_ranges(args.gamma_by_batch) if args.gamma_by_batch is not None else ()
    return GammaPolicy(args.gamma, by_batch, args.sd_off_from_batch)


def _workload(args) -> tuple[Workload, dict | None]:
    """The workload, and a vLLM result's measured figures when --trace is one."""
    if args.trace is None:
        shape = (args.requests, args.prompt_tokens, args.images, args.output_tokens, args.burstiness)
        return Workload(*shape), None
    for flag, given in (("--burstiness", args.burstiness != 1.0), ("--requests", args.requests != 1000)):
        if given:
            raise SpecsimError(f"{flag}: does not apply with --trace (the trace gives every request)")
    if str(args.trace).endswith(".json"):
        result = read_vllm_bench_result(args.trace)
        return Workload(trace=result.requests(np.random.default_rng([args.seed, 2]))), result.measured
    return Workload(trace=read_trace(args.trace)), None


def _acceptance(args) -> tuple:
    """(acceptance source, its description, the profile entries it replays) from --alpha or
    --acceptance-profile."""
    if args.acceptance_profile is None:
        for flag, value in (("--method", args.method), ("--scenario", args.scenario)):
            if value is not None:
                raise SpecsimError(f"{flag}: applies with --acceptance-profile only")
        if args.alpha is None:
            raise SpecsimError(
                "--alpha: needed (i.i.d. acceptance per draft token, 0 <= alpha < 1), or --acceptance-profile"
            )
        return IidAcceptance(args.alpha), f"iid alpha={args.alpha:g}", ()
    if args.alpha is not None:
        raise SpecsimError("--alpha: give --alpha or --acceptance-profile, not both")
    from specsim.profiles import load_profile

    entry = load_profile(args.acceptance_profile).one_entry(args.method, args.scenario)
    return replay_of(entry), f"greedy traces of {entry.method}/{entry.scenario} replayed", (entry,)


def _profile_cost(args, target, entries=()):
    """The measured profile's step cost and the batch it may run at most (--max-num-seqs within its grid)."""
    from specsim.profiles import load_profile
    from specsim.serve.profile_cost import ProfileStepCost

    image_tokens = target.vision.image_tokens if target.vision else 0
    cost = ProfileStepCost.from_profile(load_profile(args.cost_profile), image_tokens, entries)
    largest = cost.batched.batch_sizes[-1]
    if args.max_num_seqs is not None and args.max_num_seqs > largest:
        raise SpecsimError(
            f"--max-num-seqs: {args.max_num_seqs} is beyond the profile's batched grid (measured up to batch "
            f"{largest}; calibrate latency --request-batches)"
        )
    return cost, largest if args.max_num_seqs is None else args.max_num_seqs


def _setup(args) -> tuple[ServeSetup, dict]:
    slo = parse_slo(args.slo) if args.slo is not None else None
    policy = _policy(args)
    acceptance, acceptance_text, entries = _acceptance(args)
    workload, vllm_measured = _workload(args)
    _, target, draft = resolve_models(
        pair=args.pair,
        target=args.target,
        draft=args.draft,
        image_size=image_size(args),
        draft_kind=args.draft_kind,
    )
    device = load_device(args.device)
    runtime = device_runtimes(args.runtime, [device])[device.name]
    split = split_mode(None, args.tp, {device.name: runtime})
    if args.cost_profile is None:
        cost = RooflineStepCost(
            target,
            draft,
            device,
            runtime,
            tp=args.tp,
            split=split,
            draft_image_tokens_per_image=args.draft_image_tokens,
            draft_kind=draft_kind(args.draft_kind).name,
        )
        kv = args.kv_cache_tokens if args.kv_cache_tokens is not None else cost.kv_cache_tokens()
        max_seqs = DEFAULT_MAX_NUM_SEQS if args.max_num_seqs is None else args.max_num_seqs
    else:
        if args.draft_image_tokens is not None:
            raise SpecsimError(
                "--draft-image-tokens: applies to roofline pricing; with --cost-profile the drafting "
                "method's prompt comes from --acceptance-profile's traces"
            )
        cost, max_seqs = _profile_cost(args, target, entries)
        kv = args.kv_cache_tokens if args.kv_cache_tokens is not None else 1 << 30
    scheduler = SchedulerConfig(
        max_seqs, args.max_num_batched_tokens, args.encoder_budget, not args.no_chunked_prefill, kv
    )
    setup = ServeSetup(cost, workload, policy, acceptance, scheduler, slo, args.seed)
    about = {
        "target": target.name,
        "draft": None if draft is None else draft.name,
        "draft_kind": draft_kind(args.draft_kind).name,
        "device": device.name if args.cost_profile is None else f"measured profile {args.cost_profile}",
        "runtime": "its batched engine" if args.cost_profile else getattr(runtime, "name", "efficiency"),
        "tp": args.tp,
        "sd_policy": policy.describe(),
        "acceptance": acceptance_text,
        "scheduler": {
            "max_num_seqs": scheduler.max_num_seqs,
            "max_num_batched_tokens": scheduler.max_num_batched_tokens,
            "encoder_budget_tokens": scheduler.encoder_budget,
            "chunked_prefill": scheduler.chunked_prefill,
            "kv_cache_tokens": kv,
        },
        "image_tokens_per_image": cost.image_tokens_per_image,
        "workload": "trace " + args.trace
        if args.trace
        else (
            f"{args.requests} requests x ({args.prompt_tokens} text tokens + {args.images} images -> "
            f"{args.output_tokens} output tokens), burstiness {args.burstiness:g}"
        ),
        "seed": args.seed,
    } | ({"vllm_bench_measured": vllm_measured} if vllm_measured is not None else {})
    return setup, about


def cmd_serve(args: argparse.Namespace) -> int:
    if args.plot is not None:
        if args.rates is None:
            raise SpecsimError("--plot: draws a rate sweep; give --rates")
        check_writable(args.plot, "--plot", suffix=".png")
    if args.max_rate and args.trace:
        raise SpecsimError("--max-rate: searches request rates, so it does not apply with --trace")
    setup, about = _setup(args)  # --max-rate without --slo: max_rate_meeting_slo says so
    sd_label = f"SD ({setup.policy.describe()})"
    if args.max_rate:
        found = {
            "sd": max_rate_meeting_slo(setup, setup.policy, args.slo_attainment),
            "target_only": max_rate_meeting_slo(setup, TARGET_ONLY, args.slo_attainment),
        }
        if args.json:
            print(dumps_json({**about, "slo_attainment": args.slo_attainment, "max_rate_per_s": found}))
            return 0
        print(_header(about))
        print(max_rate_text(found, setup.slo, args.slo_attainment, sd_label))
        return 0
    if args.rates is not None:
        progress = ProgressBar(len(args.rates), not args.no_progress, "specsim serve", "rates")
        try:
            result = sweep_rates(setup, args.rates, progress.step, jobs=args.jobs)
        finally:
            progress.close()
        if args.plot is not None:
            from specsim.serve.serve_plots import plot_latency_vs_rate

            plot_latency_vs_rate(result, args.plot, sd_label)
        if args.json:
            print(dumps_json({**about, "sweep": result.to_json()}))
            return 0
        print(_header(about))
        print(sweep_text(result, setup.slo is not None))
        return 0
    rate = None if args.trace else (args.rate if args.rate is not None else 4.0)
    comparison = compare_at(setup, rate)
    if args.json:
        print(dumps_json({**about, "comparison": comparison.to_json()}))
        return 0
    print(_header(about) + (f"\nrate: {rate:g} req/s" if rate is not None else ""))
    print(comparison_text(comparison, sd_label))
    if "vllm_bench_measured" in about:
        print(vllm_measured_text(about["vllm_bench_measured"]))
    return 0


def _header(about: dict) -> str:
    s = about["scheduler"]
    return (
        f"{about['target']} / {about['draft'] or 'no draft model'} ({about['draft_kind']} drafting) on "
        f"{about['tp']} x {about['device']} ({about['runtime']}), "
        f"{about['image_tokens_per_image']} tokens per image\n"
        f"workload: {about['workload']}, seed {about['seed']}\n"
        f"scheduler: max_num_seqs {s['max_num_seqs']}, max_num_batched_tokens {s['max_num_batched_tokens']}, "
        f"encoder budget {s['encoder_budget_tokens']}, "
        f"chunked prefill {'on' if s['chunked_prefill'] else 'off'}, "
        f"KV cache {s['kv_cache_tokens']} tokens\n"
        f"SD: {about['sd_policy']}, acceptance {about['acceptance']}"
    )
