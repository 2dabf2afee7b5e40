"""``specsim tune``: search SD deployments for a load and an objective; print the best per device and the
engine settings that paste.

Parsing and printing only (the work is in :mod:`specsim.tune`). Optuna (and Ray for ``--executor ray``) are
the ``tune`` extra: without them the command is one line naming what to install, exit 2.
"""

from __future__ import annotations

import argparse

import numpy as np

from specsim.bounds import name_arg, number_arg
from specsim.cli.model_options import MODEL_HELP, add_image_size, image_size
from specsim.cli.progress import ProgressBar
from specsim.draft_kinds.registry import draft_kind
from specsim.engines.engine_config import check_model_id
from specsim.errors import SpecsimError, warn
from specsim.hardware.prices import parse_prices
from specsim.jsonio import check_outputs, dumps_json
from specsim.presets import pair_models
from specsim.serve.arrivals import burstiness_arg, parse_image_mix, rate_arg
from specsim.serve.compare import Workload, attainment_arg
from specsim.serve.metrics import parse_slo
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.serve_request import (
    LOAD_DEFAULTS,
    check_longest_request,
    load_value,
    refuse_images_without_vision,
    refuse_with_trace,
    trace_workload,
)
from specsim.serve.speculation import alpha_arg
from specsim.tune.executor import EXECUTORS, make_executor
from specsim.tune.objective import OBJECTIVES, make_objective
from specsim.tune.paste import draft_name
from specsim.tune.space import check_space, parse_space
from specsim.tune.study import SEARCHES, StudyPlan, require_optuna, run_study, storage_url
from specsim.tune.trial import TuneContext

_DESC = (
    "Search speculative-decoding deployments (device, runtime, TP, draft and drafting kind, gamma per decode "
    "batch band, the batch from which SD is off, max_num_seqs) for a load (a rate or a JSONL trace, an image "
    "mix) and an objective (goodput under --slo, output tokens/s per GPU, or $ per million tokens), each "
    "deployment priced by `specsim serve`'s simulation. Optuna's seeded TPE, or every point of a small "
    "space; "
    "simulations run in local processes or on a Ray cluster, in ask/tell rounds of --batch trials, so the "
    "trials are the same whatever runs them. Prints the best deployment per device with its predicted "
    "metrics, target-only at the same settings, the validation of the planner there, and the vLLM, SGLang, "
    "TensorRT-LLM and llama.cpp settings that paste."
)


def register(sub) -> None:
    """Add ``specsim tune``."""
    p = sub.add_parser(
        "tune", help="search SD settings for a load and an SLO (optuna; local or Ray)", description=_DESC
    )
    m = p.add_argument_group("models")
    m.add_argument(
        "--pair",
        type=name_arg,
        default=None,
        help="preset pair (default llava-1.5-7b-68m): its target, and its draft with --alpha",
    )
    m.add_argument("--target", type=name_arg, default=None, help=f"target model: {MODEL_HELP}")
    m.add_argument(
        "--draft",
        action="append",
        default=[],
        metavar="[MODEL][:KIND][:M|T]@ACCEPTANCE",
        help="a draft option to search (repeatable; one per drafting kind searches kinds): KIND a drafting "
        "kind of hardware --list (model, eagle, eagle3, mtp, ngram, suffix; default model), priced as serve "
        "--draft-kind prices it (MODEL: the draft model or head, none for a lookup kind, a head kind's "
        "preset by default); M (the draft's prompt keeps the images, default) or T (it drops them); "
        "ACCEPTANCE an i.i.d. alpha (0.7) or traces:PROFILE[:METHOD[/SCENARIO]]",
    )
    m.add_argument("--alpha", type=alpha_arg, default=None, help="with --pair: its draft at i.i.d. alpha")
    m.add_argument(
        "--model-id", action="append", default=[], metavar="NAME=ID", help="HF id of a model for the configs"
    )
    add_image_size(m)
    load = p.add_argument_group("load")
    rate = load.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=rate_arg, default=None, help="requests per second (default 4)")
    rate.add_argument(
        "--trace",
        default=None,
        metavar="JSONL",
        help="requests from a JSONL trace or a vLLM bench result JSON (as serve --trace)",
    )
    load.add_argument(
        "--requests",
        type=number_arg("size", integer=True),
        default=None,
        help="requests (default 1000)",
    )
    load.add_argument(
        "--prompt-tokens",
        type=number_arg("tokens", integer=True),
        default=None,
        help="text tokens per prompt",
    )
    load.add_argument(
        "--images",
        default=None,
        metavar="N|MIX",
        help="images per prompt, or a mix 0:1,1:2,3:1 (weights); default 1, 0 for a text-only target",
    )
    load.add_argument(
        "--output-tokens",
        type=number_arg("output_tokens", integer=True),
        default=None,
        help="output tokens",
    )
    load.add_argument(
        "--burstiness",
        type=burstiness_arg,
        default=None,
        help="Gamma shape of the gaps (1 = Poisson)",
    )
    load.add_argument(
        "--max-num-batched-tokens",
        type=number_arg("step_tokens", integer=True),
        default=8192,
        help="token budget per step",
    )
    o = p.add_argument_group("objective")
    o.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default=None,
        help="default: goodput with --slo, else tokens-per-gpu",
    )
    o.add_argument("--slo", default=None, help="bounds in ms, e.g. ttft=500,tpot=50 (keys ttft, tpot, e2e)")
    o.add_argument(
        "--slo-attainment",
        type=attainment_arg,
        default=None,
        help="share that must meet --slo (0.9), for tokens-per-gpu and usd-per-mtok (goodput counts it)",
    )
    o.add_argument(
        "--price", action="append", default=[], metavar="DEVICE=USD", help="price per GPU-hour of a device"
    )
    s = p.add_argument_group("search space (comma lists; integer ranges as 1-4)")
    s.add_argument("--device", type=name_arg, default="h100-sxm", help="devices (default h100-sxm)")
    s.add_argument("--runtime", type=name_arg, default=None, help="runtimes (default: each device's)")
    s.add_argument("--tp", default="1", help="tensor-parallel degrees of the target (default 1)")
    s.add_argument("--gamma", default="0-5", help="gamma per band; 0 = no drafting (default 0-5)")
    s.add_argument(
        "--gamma-breaks",
        default=None,
        metavar="B,...",
        help="decode batch sizes after which gamma may change",
    )
    s.add_argument("--sd-off-from-batch", default="never", help="batch sizes from which SD is off, or never")
    s.add_argument("--max-num-seqs", default="256", help="max_num_seqs values (default 256)")
    r = p.add_argument_group("search")
    r.add_argument(
        "--search", choices=SEARCHES, default="auto", help="auto: exhaustive when the space fits in --trials"
    )
    r.add_argument(
        "--trials", type=number_arg("size", integer=True), default=50, help="trials in the study (default 50)"
    )
    r.add_argument(
        "--batch", type=number_arg("size", integer=True), default=8, help="trials per ask/tell round (8)"
    )
    r.add_argument(
        "--seed", type=number_arg("seed", zero_ok=True, integer=True), default=0, help="seed (default 0)"
    )
    r.add_argument(
        "--storage", default=None, help="resumable study: sqlite:///PATH, PATH.db or a journal PATH.log"
    )
    named = "the study's name in --storage (default specsim-tune)"
    r.add_argument("--study-name", type=name_arg, default=None, help=named)
    x = p.add_argument_group("executor")
    x.add_argument("--executor", choices=EXECUTORS, default="local", help="local processes or ray")
    x.add_argument(
        "--jobs",
        type=number_arg("threads", integer=True),
        default=1,
        help="processes, or a local Ray cluster's workers",
    )
    x.add_argument(
        "--ray-address", default=None, help="an existing Ray cluster (auto or HOST:PORT); default: start one"
    )
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    out.add_argument("--plot", default=None, metavar="PNG", help="the latency-throughput front")
    p.set_defaults(func=cmd_tune)


def _pairs(items: list[str], flag: str, value=str) -> dict:
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if key.strip() and key.strip() in out:  # the last would win silently
            raise SpecsimError(f"{flag}: {key.strip()!r} given twice (expected each NAME once)")
        try:
            out[key.strip()] = value(text.strip())
        except ValueError:
            sep = ""
        if not sep or not key.strip() or not text.strip():
            raise SpecsimError(f"{flag}: expected NAME=VALUE, got {item!r}")
    return out


def _model_ids(items: list[str], target: str, space) -> dict[str, str]:
    """--model-id NAME=ID pairs: each NAME the target or a draft of the space, each ID a model id."""
    names = {target} | {draft_name(draft_kind(d.kind), d.model, target) for d in space.drafts} - {None}
    ids = _pairs(items, "--model-id")
    for name, value in ids.items():
        if name not in names:
            raise SpecsimError(
                f"--model-id {name}={value}: {name!r} names no model of this study (expected one of "
                f"{', '.join(sorted(names))})"
            )
        check_model_id(value, f"--model-id {name}", bare_ok=True)
    return ids


def _refuse_unused(args: argparse.Namespace) -> None:
    """Options that would change nothing in this combination: refused, not ignored."""
    if args.slo_attainment is not None and args.slo is None:
        raise SpecsimError("--slo-attainment: the share that must meet --slo; give --slo")
    if args.study_name is not None and args.storage is None:
        raise SpecsimError("--study-name: names the study in --storage; give --storage")
    twice = sorted({d for d in args.draft if args.draft.count(d) > 1})
    if twice:
        raise SpecsimError(f"--draft: {twice[0]!r} given twice; give each draft option once")
    if args.gamma_breaks is not None and not args.gamma_breaks.strip():
        raise SpecsimError("--gamma-breaks: expected batch sizes B,..., got ''")


def _inputs(args):
    """Everything the study needs, checked before anything heavy runs."""
    if args.pair and args.target:
        raise SpecsimError("--pair: give either --pair or --target, not both")
    target, pair_draft = (
        pair_models(args.pair or "llava-1.5-7b-68m") if not args.target else (args.target, None)
    )
    _refuse_unused(args)
    drafts = list(args.draft)
    if args.alpha is not None:
        if pair_draft is None:
            raise SpecsimError(
                "--alpha: sets the acceptance of --pair's draft; with --target give --draft MODEL@ALPHA"
            )
        drafts.insert(0, f"{pair_draft}@{args.alpha!r}")
    if not drafts:
        raise SpecsimError(
            "--draft: give at least one draft option [MODEL][:KIND][:M|T]@ACCEPTANCE (or --pair with --alpha)"
        )
    space = parse_space(
        devices=args.device, drafts=drafts, gammas=args.gamma, runtimes=args.runtime, tps=args.tp,
        gamma_breaks=args.gamma_breaks, sd_off_from_batch=args.sd_off_from_batch,
        max_num_seqs=args.max_num_seqs,
    )  # fmt: skip
    size = image_size(args)
    target_spec = check_space(space, target, None if size is None else (size.width_px, size.height_px))
    mix = parse_image_mix(args.images if args.images is not None else ("1" if target_spec.vision else "0"))
    if args.trace is not None:
        refuse_with_trace(**{k: getattr(args, k) for k in LOAD_DEFAULTS} | {"images": args.images})
        workload, rate = trace_workload(args.trace, args.seed)[0], None
    else:
        load = {k: load_value(k, getattr(args, k)) for k in LOAD_DEFAULTS}
        shape = (
            load["requests"],
            load["prompt_tokens"],
            mix[0][0],
            load["output_tokens"],
            load["burstiness"],
        )
        workload = Workload(*shape, image_mix=mix if len(mix) > 1 else ())
        rate = args.rate if args.rate is not None else 4.0
    refuse_images_without_vision(workload, target_spec, "--trace" if args.trace else "--images")
    check_longest_request(target_spec, workload)
    if workload.max_images():  # one image's tokens in a step: the target's, whatever the deployment
        budget = SchedulerConfig(1, args.max_num_batched_tokens, None, True, None)
        image_tokens = target_spec.vision.image_tokens
        budget.check_workload(image_tokens=image_tokens, max_gamma=0, longest_prompt=0, longest_sequence=0)
    workload.at_rate(rate, np.random.default_rng(0))  # a request no deployment serves: one line, here
    slo = parse_slo(args.slo) if args.slo is not None else None
    name = args.objective or ("goodput" if slo is not None else "tokens-per-gpu")
    prices = parse_prices(args.price)  # bounded as hardware's and serve's --price
    objective = make_objective(
        name,
        has_slo=slo is not None,
        slo_attainment=args.slo_attainment,
        devices=space.devices,
        prices=prices,
    )
    if prices and name != "usd-per-mtok":  # no other objective or line of the report reads a price
        raise SpecsimError(f"--price: prices the usd-per-mtok objective, and the objective is {name}")
    context = TuneContext(
        target,
        workload,
        rate,
        slo,
        args.max_num_batched_tokens,
        args.seed,
        None if size is None else (size.width_px, size.height_px),
    )
    storage = None if args.storage is None else storage_url(args.storage).removeprefix("sqlite:///")
    check_outputs((storage, "--storage", None), (args.plot, "--plot", ".png"))
    study = args.study_name or "specsim-tune"
    plan = StudyPlan(args.search, args.trials, args.batch, args.seed, args.storage, study)
    require_optuna()
    executor = make_executor(args.executor, jobs=args.jobs, ray_address=args.ray_address)
    return context, space, objective, plan, executor, _model_ids(args.model_id, target, space)


def cmd_tune(args: argparse.Namespace) -> int:
    context, space, objective, plan, executor, ids = _inputs(args)
    from specsim.tune.tune_report import device_best, front
    from specsim.tune.tune_text import best_text, front_text, header_text, no_best_text

    total = min(plan.trials, space.size) if plan.resolved(space) == "exhaustive" else plan.trials
    progress = ProgressBar(total, not args.no_progress, "specsim tune", "trials")

    def on_round(told: int, best) -> None:
        progress.step(told, None if best is None else f"best {objective.name} {best.value:.4g}")

    try:
        with executor:
            outcome = run_study(space, context, objective, plan, executor, on_round)
    finally:
        progress.close()
    points = front(outcome)
    bests = device_best(outcome, objective, context, space.devices, ids)
    if args.plot is not None and not points:  # an empty plot says nothing, and an older file stays as it was
        warn(f"--plot {args.plot}: not written, no feasible trial to plot")
    elif args.plot is not None:
        from specsim.tune.tune_plots import plot_front

        plot_front(outcome, points, args.plot, f"specsim tune: {context.target}, {objective.describe()}")
    where = executor.describe() + (f", study {plan.study_name!r} in {plan.storage}" if plan.storage else "")
    if args.json:
        print(
            dumps_json(
                {
                    "schema_version": 1,
                    "context": context.to_json(),
                    "space": space.to_json(),
                    "objective": objective.to_json(),
                    "search": {"search": outcome.search, "trials": len(outcome.records)}
                    | {
                        "simulations": outcome.simulations,
                        "batch": plan.batch,
                        "seed": plan.seed,
                        "executor": where,
                    },
                    "best": [b.to_json() for b in bests],
                    "front": [p.to_json() for p in points],
                    "trials": [r.to_json() for r in outcome.records],
                }
            )
        )
        return 0
    print(header_text(context, space, objective, outcome, where))
    print("\n" + front_text(points))
    for device in [d for d in space.devices if d not in {b.device for b in bests}]:
        print("\n" + no_best_text(outcome, device, goodput=objective.name == "goodput"))
    for best in bests:
        print("\n" + best_text(best, objective))
    return 0
