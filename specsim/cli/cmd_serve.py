"""``specsim serve``: simulate an inference server under load, SD on vs off side by side.

Numpy only at import (plug-in rule: no torch). Text tables by default, ``--json`` for machines; writes no
file. The work is in :mod:`specsim.serve`.
"""

from __future__ import annotations

import argparse

from specsim.bounds import number_arg
from specsim.cli.model_options import add_model_options, add_price_option
from specsim.cli.progress import ProgressBar
from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json
from specsim.predict.acceptance_source import ACCEPTANCE_FORMS
from specsim.serve.arrivals import burstiness_arg, check_span, rate_arg, rates_arg
from specsim.serve.compare import attainment_arg, compare_at, max_rates, sweep_rates
from specsim.serve.scheduler import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS
from specsim.serve.serve_request import (
    GAMMA_DEFAULT,
    ServeRequest,
    context_note,
    decode_phase,
    load_value,
    serve_setup,
)
from specsim.serve.serve_text import (
    comparison_text,
    decode_phase_text,
    max_rate_text,
    sweep_text,
    vllm_measured_text,
)
from specsim.serve.speculation import alpha_arg

_DESC = (
    "Simulate a vLLM-V1-like server (continuous batching, chunked prefill, decode first, an encoder budget "
    "for images) serving requests that arrive at a rate (Poisson, or Gamma gaps with --burstiness) or from a "
    "JSONL trace, with speculative decoding (SD: gamma drafts per step, each accepted with probability "
    "alpha) and without it (target-only). Every step is priced by the GPU planner's roofline for the pair, "
    "device and runtime (specsim hardware). Prints TTFT (arrival -> first token), TPOT (time per output "
    "token after the first), ITL (gaps between tokens; SD emits tau tokens at once, so many gaps are 0) and "
    "E2E at p50/p90/p99 in ms, output tokens/s, requests/s and goodput (requests/s meeting --slo). "
    "--rates sweeps rates and names the rates at which SD pays and those at which it loses (p50 TPOT worse "
    "than target-only)."
)


def register(sub) -> None:
    """Add ``specsim serve``."""
    p = sub.add_parser(
        "serve", help="simulate a server under load: SD on vs off (TTFT/TPOT/goodput)", description=_DESC
    )
    models = p.add_argument_group("models and hardware")
    add_model_options(models, device_given_only=True)
    add_price_option(models)
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
        default=None,
        help="requests per simulation (default 1000)",
    )
    load.add_argument(
        "--burstiness",
        type=burstiness_arg,
        default=None,
        help="Gamma shape of the inter-arrival gaps: 1 = Poisson (default), < 1 burstier",
    )
    load.add_argument(
        "--prompt-tokens",
        type=number_arg("tokens", integer=True),
        default=None,
        help="text tokens per prompt (default 512)",
    )
    load.add_argument(
        "--images",
        type=number_arg("images", zero_ok=True, integer=True),
        default=None,
        help="images per prompt, each taking the target's image tokens (default 1, 0 for a text-only target)",
    )
    load.add_argument(
        "--output-tokens",
        type=number_arg("output_tokens", integer=True),
        default=None,
        help="output tokens per request (default 256)",
    )
    sd = p.add_argument_group("speculative decoding")
    sd.add_argument(
        "--gamma",
        type=number_arg("gamma", integer=True),
        default=None,  # told apart from a given 3: a --gamma no step reads is refused
        help=f"draft tokens per step (num_speculative_tokens, default {GAMMA_DEFAULT})",
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
        help="i.i.d. acceptance probability per draft token (this, --tau, --acceptance or "
        "--acceptance-profile is needed)",
    )
    sd.add_argument(
        "--tau",
        type=number_arg("ratio"),
        default=None,
        help="tokens per block at --gamma (bonus included), e.g. a published tau: drafts accepted i.i.d. at "
        "the alpha with that tau",
    )
    sd.add_argument(
        "--acceptance",
        default=None,
        metavar="SPEC",
        help=f"acceptance from one source, as every command takes it: {ACCEPTANCE_FORMS}",
    )
    sd.add_argument(
        "--acceptance-profile",
        metavar="PROFILE",
        default=None,
        help="a profile entry's acceptance: its greedy traces replayed (simulated request i follows traced "
        "prompt i mod n), else its accepted-length histogram (imported engine counters), else its tau "
        "(--method, --scenario pick the entry); with --cost-profile, the method's own prompt and set-up per "
        "image are priced too",
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
        type=number_arg("step_tokens", integer=True),
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
        type=number_arg("kv_tokens", integer=True),
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
        "target-only (the search picks its rates: no --rate/--rates)",
    )
    out.add_argument(
        "--slo-attainment",
        type=attainment_arg,
        default=None,
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
        default=None,
        help="processes for --rates (default 1; the rates are independent simulations)",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.plot is not None:
        if args.rates is None:
            raise SpecsimError("--plot: draws a rate sweep; give --rates")
        check_writable(args.plot, "--plot", suffix=".png")
    if args.max_rate and args.trace:
        raise SpecsimError("--max-rate: searches request rates, so it does not apply with --trace")
    if args.max_rate and (args.rate is not None or args.rates is not None):
        given = "--rate" if args.rate is not None else "--rates"
        raise SpecsimError(f"--max-rate: searches the rate itself, so {given} does not apply")
    if args.jobs is not None and args.rates is None:
        raise SpecsimError("--jobs: runs the rates of --rates in processes; give --rates")
    if args.slo_attainment is not None and not args.max_rate:
        raise SpecsimError("--slo-attainment: applies with --max-rate only (the share its search must meet)")
    requests = load_value("requests", args.requests)
    for rate in [args.rate] if args.rate is not None else args.rates or []:
        check_span(requests, rate, "--rate" if args.rates is None else "--rates")
    req = ServeRequest.from_options(vars(args))
    setup, about = serve_setup(req)  # --max-rate without --slo: max_rates says so
    sd_label = f"SD ({setup.policy.describe(setup.scheduler.max_num_seqs)})"
    if args.max_rate:
        search = max_rates(setup, 0.9 if args.slo_attainment is None else args.slo_attainment)
        about = _with_notes(about, context_note(setup))
        if args.json:
            print(dumps_json(about | search))
            return 0
        print(_header(about))
        print(max_rate_text(search, setup.slo, sd_label))
        return 0
    if args.rates is not None:
        progress = ProgressBar(len(args.rates), not args.no_progress, "specsim serve", "rates")
        try:
            result = sweep_rates(setup, args.rates, progress.step, jobs=args.jobs or 1)
        finally:
            progress.close()
        if args.plot is not None:
            from specsim.serve.serve_plots import plot_latency_vs_rate

            plot_latency_vs_rate(result, args.plot, sd_label)
        runs = [m for c in result.rows for m in (c.sd, c.target_only)]
        about = _with_notes(about, context_note(setup, runs))
        phases = [decode_phase(req, c.sd) for c in result.rows]
        usd = [row.usd_per_million_tokens(about["usd_per_hour"]) for row in result.rows]
        if args.json:
            extra = {"decode_phase": phases} if any(phases) else {}
            sweep = result.to_json() | extra
            print(dumps_json({**about, "sweep": sweep, "usd_per_million_output_tokens": usd}))
            return 0
        print(_header(about))
        print(sweep_text(result, setup.slo is not None, usd))
        _print_if(decode_phase_text(phases, [c.tpot_speedup for c in result.rows]))
        return 0
    rate = None if args.trace else (args.rate if args.rate is not None else 4.0)
    comparison = compare_at(setup, rate)
    about = _with_notes(about, context_note(setup, [comparison.sd, comparison.target_only]))
    phase = decode_phase(req, comparison.sd)
    usd = comparison.usd_per_million_tokens(about["usd_per_hour"])
    if args.json:
        extra = {"decode_phase": phase} if phase else {}
        comparison_json = comparison.to_json() | extra
        print(dumps_json({**about, "comparison": comparison_json, "usd_per_million_output_tokens": usd}))
        return 0
    print(_header(about) + (f"\nrate: {rate:g} req/s" if rate is not None else ""))
    print(comparison_text(comparison, sd_label, usd))
    _print_if(decode_phase_text([phase], [comparison.tpot_speedup]))
    if "vllm_bench_measured" in about:
        print(vllm_measured_text(about["vllm_bench_measured"]))
    return 0


def _print_if(text: str | None) -> None:
    if text:
        print(text)


def _with_notes(about: dict, *notes) -> dict:
    """``about`` with ``notes`` (those not None) added to its own."""
    given = [*about.get("notes", []), *(n for n in notes if n)]
    return about | ({"notes": given} if given else {})


def _header(about: dict) -> str:
    s = about["scheduler"]
    kv = s["kv_cache_tokens"]  # None: a measured profile's, which no memory figure caps
    return (
        f"{about['target']} / {about['draft'] or 'no draft model'} ({about['draft_kind']} drafting) on "
        f"{about['tp']} x {about['device']} ({about['runtime']}), "
        f"{about['image_tokens_per_image']} tokens per image\n"
        f"workload: {about['workload']}, seed {about['seed']}\n"
        f"scheduler: max_num_seqs {s['max_num_seqs']}, max_num_batched_tokens {s['max_num_batched_tokens']}, "
        f"encoder budget {s['encoder_budget_tokens']}, "
        f"chunked prefill {'on' if s['chunked_prefill'] else 'off'}, "
        f"KV cache {'unbounded (--kv-cache-tokens caps it)' if kv is None else f'{kv} tokens'}\n"
        f"SD: {about['sd_policy']}, acceptance {about['acceptance']}"
        + "".join(f"\nnote: {n}" for n in about.get("notes", []))
    )
