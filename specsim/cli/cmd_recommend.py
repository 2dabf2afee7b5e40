"""``specsim recommend``: a serving engine's speculative settings per batch size, from a profile and the
planner."""

from __future__ import annotations

import json
import shlex

from specsim.bounds import RANGES, name_arg, number_arg
from specsim.cli.model_options import add_model_options, image_size, keep_option_defaults
from specsim.cli.recommend_outputs import (
    PLACEHOLDER_GGUF,
    check_gguf_draft,
    llama_measured,
    write_config,
)
from specsim.draft_kinds.registry import draft_kind, engine_method
from specsim.engines.engine_config import (
    CONFIG_HEADINGS,
    SGLANG_ALGORITHMS_WITHOUT_MODEL,
    VLLM_METHODS_WITHOUT_MODEL,
    check_model_id,
    hub_id,
    is_model_id,
    llama_cpp_server_args,
    sglang_server_args,
    vllm_speculative_config,
)
from specsim.engines.imported import NOT_REPORTED
from specsim.engines.llama_cpp import is_llama_cpp_profile
from specsim.engines.recommend import (
    DEFAULT_GAMMA_MAX,
    DEFAULT_SHOWN_BATCHES,
    LatencyModel,
    Recommendation,
    default_gamma_max,
    fixed_gamma_note,
    fixed_gamma_speedups,
    recommend,
)
from specsim.errors import SpecsimError
from specsim.hardware.device import DEVICE_DEFAULT, load_device
from specsim.hardware.measured_pair import other_pair_note
from specsim.hardware.model import check_block_positions
from specsim.hardware.plan_inputs import resolve_models
from specsim.hardware.runtime import DEFAULT_RUNTIMES, load_runtime
from specsim.jsonio import check_outputs, dumps_json, show, write_json_atomic
from specsim.predict.acceptance_source import ACCEPTANCE_FORMS, Acceptance, from_options
from specsim.presets import pair_models
from specsim.profile_format import Profile
from specsim.profiles import load_profile
from specsim.report import fmt, format_table, parse_int_list
from specsim.serve.speculation import alpha_arg
from specsim.validation.regime_error import regime_errors

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llama.cpp": "llama.cpp"}
_DESC = (
    "Recommend a serving engine's speculative-decoding settings per batch size: the best draft length "
    "gamma (0 = turn SD off there) from the profile's tau(gamma) and the hardware planner's roofline latency "
    "(speedup = tau/(gamma*c + v + o), c = Tq/Tp, v = Tv(gamma)/Tp, o = overhead/Tp, decode phase). Prints a "
    "table and the engine's config: vLLM speculative_config (num_speculative_tokens, "
    "num_speculative_tokens_per_batch_size) or SGLang --speculative-* flags, or llama-server flags (a "
    "llama.cpp profile: priced from its own measured passes, one request at a time)."
)


def register(sub) -> None:
    """Add ``specsim recommend``."""
    p = sub.add_parser(
        "recommend", help="vLLM / SGLang speculative settings per batch size", description=_DESC
    )
    p.add_argument("--engine", required=True, choices=sorted(ENGINE_NAMES), help="serving engine")
    p.add_argument(
        "--profile",
        default=None,
        help="profile with the acceptance entry (e.g. from `specsim import`); or --alpha, --acceptance",
    )
    p.add_argument("--alpha", type=alpha_arg, default=None, help="i.i.d. acceptance instead of a profile")
    p.add_argument(
        "--acceptance",
        default=None,
        metavar="SPEC",
        help=f"acceptance from one source, as every command takes it: {ACCEPTANCE_FORMS}",
    )
    p.add_argument("--method", default=None, help="method of the entry (default: the profile's only one)")
    p.add_argument("--scenario", default=None, help="scenario of the entry (default: the profile's only one)")
    # --device and --context default to None: a llama.cpp profile refuses them given, at any value
    add_model_options(
        p, runtime_default="the --engine's own on GPUs", pair_default=None, device_given_only=True
    )
    p.add_argument("--dtype", default=None, help="weights/KV dtype (default: bfloat16 or the config's)")
    p.add_argument(
        "--batch",
        default=",".join(str(b) for b in DEFAULT_SHOWN_BATCHES),
        help="batch sizes shown, e.g. 1,8,64 or 1-16; every size up to the largest is evaluated "
        "(default 1,2,4,...,256)",
    )
    p.add_argument("--context", default=None, help="tokens in each sequence's KV cache (default 1024)")
    p.add_argument(
        "--gamma-max",
        default=None,
        help="largest draft length tried (default: the measured K where tau past K would be an i.i.d. "
        f"extrapolation, as for imported counters, marked * when asked for; max(K, {DEFAULT_GAMMA_MAX}) "
        "where the profile's traces replay tau exactly)",
    )
    p.add_argument(
        "--min-speedup",
        type=number_arg("ratio"),
        default=1.0,
        help="turn SD off where the best predicted speedup is below this (default 1.0)",
    )
    p.add_argument(
        "--engine-method",
        default=None,
        help="vLLM method (default draft_model) or SGLang algorithm (default STANDALONE)",
    )
    p.add_argument(
        "--draft-model",
        type=name_arg,
        default=None,
        help="draft model for the engine config: a Hugging Face id org/name or a local path (default: the "
        "profile's draft name; --config-out refuses one that is not a model id)",
    )
    p.add_argument(
        "--at-batch",
        type=number_arg("batch", integer=True),
        default=None,
        help="SGLang and llama-server: the batch size their one draft length is chosen for (default 1)",
    )
    p.add_argument(
        "--out", default=None, help="write the whole recommendation (table, config, assumptions) as JSON"
    )
    p.add_argument(
        "--config-out",
        default=None,
        help="write only the engine config: vLLM speculative_config JSON, "
        "or the SGLang flags as one shell line",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_recommend)
    keep_option_defaults(p)


def latency_model(args, kind) -> LatencyModel:
    """Target, draft side (of drafting ``kind``) and device for the planner's roofline: the one place that
    picks device/runtime (by default the engine's own: vllm, or sglang)."""
    if not (args.pair or args.target):
        raise SpecsimError(
            "models: expected --pair NAME or --target (and --draft, or a --draft-kind that needs none)"
        )
    _, target, draft = resolve_models(
        pair=args.pair,
        target=args.target,
        draft=args.draft,
        dtype=args.dtype,
        image_size=image_size(args),
        draft_kind=kind.name,
    )
    device = load_device(DEVICE_DEFAULT if args.device is None else args.device)
    own = args.engine if device.kind == "gpu" else DEFAULT_RUNTIMES[device.kind]
    runtime = load_runtime(own if args.runtime is None else args.runtime)
    if runtime.kind != device.kind:
        raise SpecsimError(
            f"--runtime: {runtime.name!r} runs on {runtime.kind} devices, but {device.name!r} is a "
            f"{device.kind}"
        )
    note = (
        f"latency: roofline on {device.name} with the {runtime.name} runtime "
        f"(overheads and efficiencies by rows); drafting kind {kind.name}"
    )
    return LatencyModel(target, draft, device, efficiency=runtime, notes=(note,), draft_kind=kind.name)


def _acceptance(args) -> tuple[Profile | None, Acceptance]:
    """(profile or None, the one acceptance) of --profile (--method/--scenario), --alpha or --acceptance."""
    found = from_options(alpha=args.alpha, spec=args.acceptance, profile=args.profile, method=args.method,
                         scenario=args.scenario, profile_flag="--profile")  # fmt: skip
    if found is None:
        raise SpecsimError("--profile: needed (the acceptance entry), or --alpha A or --acceptance SPEC")
    return (None if args.profile is None else load_profile(args.profile)), found


def _draft_model(
    args, profile, acc: Acceptance, method: str, borrowed: bool, lm: LatencyModel
) -> tuple[str | None, str]:
    """(draft model for the config, where from: given, hub, profile or priced): --draft-model, else a shipped
    model's hub id, else the profile's draft where its τ is this pair's, else the draft priced (``borrowed``:
    τ of another pair; no profile); a method without a draft model gets only an explicit --draft-model."""
    without = VLLM_METHODS_WITHOUT_MODEL if args.engine == "vllm" else SGLANG_ALGORITHMS_WITHOUT_MODEL
    lookup = args.engine != "llama.cpp" and (method in without or method.upper() in without)
    if args.draft_model:
        if lookup:  # the config would carry a model its method never loads
            raise SpecsimError(f"--draft-model: {args.engine}'s {method} drafts with no model; drop it")
        return args.draft_model, "given"
    head = draft_kind(lm.draft_kind).is_head and lm.draft is not None
    hub = hub_id(lm.draft.name) if head else None  # a shipped head: the id it is published under
    if hub:
        return hub, "hub"
    if lookup or args.engine == "llama.cpp":
        return None, "given"  # llama-server reads a GGUF file: only --draft-model names one
    if borrowed or profile is None or acc.entry is None:
        priced = args.draft or (pair_models(args.pair)[1] if args.pair else None)
        hub = hub_id(priced) if priced else None
        # A preset's or alias's label is no id an engine loads: only a typed name may be a bare Hub id.
        return (hub, "hub") if hub else (priced, "priced" if priced != args.draft else "given")
    prov = acc.entry.provenance or profile.provenance
    # an imported profile names no draft: the printed config holds a placeholder, and --config-out refuses it
    return ("DRAFT_MODEL", "placeholder") if prov.draft in (NOT_REPORTED, "") else (prov.draft, "profile")


# where a draft name that is only a label comes from (a typed name may be a bare Hub id)
DRAFT_LABELS = {
    "profile": "the profile's draft name",
    "priced": "the preset's draft name",
    "placeholder": "a placeholder: the profile names no draft model",
}


def _draft_id_note(draft_model: str | None, source: str, snippet) -> list[str]:
    """Refusal is for --config-out; a printed config whose draft is not a model id gets this note."""
    if snippet is None or not draft_model or is_model_id(draft_model, bare_ok=source not in DRAFT_LABELS):
        return []
    where = DRAFT_LABELS.get(source, "given by --draft-model")
    return [
        f"the draft {show(draft_model)} ({where}) is not a model id (Hugging Face org/name or a local path): "
        "give --draft-model ID before using this config; --config-out refuses it"
    ]


def _one_int(text: str, name: str, lo: int, unit: str) -> int:
    """One integer in lo..the cap of ``unit`` (:mod:`specsim.bounds`); SpecsimError naming ``name``."""
    hi = int(RANGES[unit][1])
    try:
        value = int(str(text).strip())
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise SpecsimError(f"{name}: expected one integer in {lo}..{hi} ({unit}), got {show(text)}")
    return value


def cmd_recommend(args) -> int:
    check_outputs((args.out, "--out", None), (args.config_out, "--config-out", None))
    kind = draft_kind(getattr(args, "draft_kind", None))
    method, method_note = engine_method(args.engine, args.engine_method, kind)
    profile, entry = _acceptance(args)
    given_max = None if args.gamma_max is None else _one_int(args.gamma_max, "--gamma-max", 1, "gamma")
    if args.engine == "llama.cpp" and profile is not None and is_llama_cpp_profile(profile):
        return llama_measured(args, profile, entry.entry, given_max)
    lm = latency_model(args, kind)
    borrowed = None if profile is None else other_pair_note(profile, lm.target, lm.draft)
    given = "1024" if args.context is None else args.context
    context = _one_int(given, "--context", 1, "tokens")  # as hardware's: a decode has a context
    gamma_max = default_gamma_max(entry) if given_max is None else given_max
    check_block_positions(lm.target, context, gamma_max, "--context")
    rec = recommend(
        entry,
        lm,
        batches=parse_int_list(args.batch, name="--batch", unit="batch"),
        context_tokens=context,
        gamma_max=gamma_max,
        min_speedup=args.min_speedup,
    )
    draft_model, source = _draft_model(args, profile, entry, method, borrowed is not None, lm)
    snippet, extra_notes = _snippet(args, rec, entry, lm, method, draft_model)
    if args.config_out and snippet is not None and draft_model:
        label = f" ({DRAFT_LABELS[source]})" if source in DRAFT_LABELS else ""
        check_model_id(draft_model, "--draft-model", label=label, bare_ok=not label)  # nothing written yet
    if args.engine == "llama.cpp":
        check_gguf_draft(args.config_out, snippet)
    extra = [n for n in (borrowed, method_note) if n]
    extra += extra_notes + _draft_id_note(draft_model, source, snippet)
    extra += list(rec.notes)
    validation = regime_errors(lm.efficiency, rec.shown_batches, rec.context_tokens)
    out = rec.to_json() | {
        "validation": [v.to_json() for v in validation],
        "engine": ENGINE_NAMES[args.engine],
        "profile": None if profile is None else profile.name,
        "target": lm.target.name,
        "draft": None if lm.draft is None else lm.draft.name,
        "draft_kind": lm.draft_kind,
        "config": snippet,
        "notes": extra,
    }
    if args.out:
        write_json_atomic(args.out, out)
    if args.config_out:
        text = None  # SD off: nothing to write, and write_config says so
        if snippet is not None:
            text = (json.dumps(snippet, indent=1) if args.engine == "vllm" else shlex.join(snippet)) + "\n"
        write_config(args.config_out, text)
    if args.json:
        print(dumps_json(out))
        return 0
    print(_text(args, rec, lm, profile, snippet, extra, validation))
    return 0


def _snippet(args, rec: Recommendation, entry, lm, method, draft_model):
    """(engine config or None, notes about it)."""
    last = rec.choices[-1].batch_size
    if args.engine == "vllm":
        if args.at_batch is not None:  # vLLM takes a draft length per batch size
            raise SpecsimError("--at-batch: applies to SGLang and llama-server, which take one draft length")
        config = vllm_speculative_config(rec, method=method, draft_model=draft_model)
        notes = (
            [f"SD {_falls_short(rec)} at any evaluated batch size: run without --speculative-config"]
            if config is None
            else [
                f"above batch {last} vLLM keeps the last range's draft length",
                "num_speculative_tokens_per_batch_size needs a vLLM with dynamic speculative decoding; older "
                "versions take one num_speculative_tokens (pick the row of your usual batch size)",
            ]
        )
        return config, notes
    at = 1 if args.at_batch is None else args.at_batch
    if not 1 <= at <= last:
        raise SpecsimError(f"--at-batch: expected a batch size in 1..{last}, got {at}")
    gamma, server = rec.at(at).gamma, ENGINE_NAMES[args.engine]
    if args.engine == "llama.cpp":
        cells = at * (rec.context_tokens + gamma + 1)  # `at` slots at the priced context, a block beyond it
        flags = llama_cpp_server_args(
            gamma, draft_model=draft_model or PLACEHOLDER_GGUF, parallel=at, context_tokens=cells
        )
    else:
        flags = sglang_server_args(rec, at_batch=at, algorithm=method, draft_model=draft_model)
    if flags is None:
        return None, [f"SD {_falls_short(rec)} at batch {at}: launch {server} without its speculative flags"]
    speedups = fixed_gamma_speedups(entry, lm, gamma, max_batch=last, context_tokens=rec.context_tokens)
    notes = [
        f"{server} has one draft length for all batch sizes: {gamma}, chosen for batch {at} (the table's "
        "draft length is each batch's best)"
    ]
    if args.engine == "llama.cpp":
        per_slot = f"{rec.context_tokens} cached tokens and a gamma+1 block"
        notes.append(f"-c: {at} slots of {per_slot}, one pool (-kvu; without it each slot gets -c / -np)")
    if not rec.at(at).fits_memory:
        notes.append(f"--at-batch {at} does not fit in memory at this context (fits NO)")
    flag = "--spec-draft-n-max" if args.engine == "llama.cpp" else "--speculative-num-steps"
    notes.append(fixed_gamma_note(speedups, gamma, rec.min_speedup, flag))
    return flags, notes


def _falls_short(rec: Recommendation) -> str:
    """Why SD is off: it does not pay, or does not reach the user's --min-speedup."""
    return "does not pay" if rec.min_speedup <= 1.0 else f"does not reach --min-speedup {rec.min_speedup:g}"


def _text(args, rec: Recommendation, lm: LatencyModel, profile: Profile, snippet, notes, validation) -> str:
    lines = [
        f"{ENGINE_NAMES[args.engine]} speculative settings for method {rec.method!r} (scenario "
        f"{rec.scenario!r}) of " + (f"profile {profile.name}" if profile else "the acceptance given"),
        f"latency: roofline on {rec.device}; target {lm.target.name}, draft "
        f"{'none (host lookup)' if lm.draft is None else lm.draft.name} ({lm.draft_kind}); context "
        f"{rec.context_tokens} tokens",
    ]
    rows = []
    for b in rec.shown_batches:
        c = rec.at(b)
        mark = "*" if c.extrapolated else ""
        rows.append(
            [
                str(b),
                str(c.gamma),
                fmt(c.speedup, 2),
                str(c.best_gamma),
                fmt(c.best_speedup, 2),
                fmt(c.tau, 3) + mark,
                fmt(c.c, 3),
                fmt(c.v, 2),
                fmt(c.o, 3),
                "yes" if c.fits_memory else "NO",
            ]
        )
    lines += [
        "",
        format_table(
            ["batch", "draft length", "speedup", "best gamma", "its speedup", "tau", "c", "v", "o", "fits"],
            rows,
        ),
    ]
    lines.append("draft length 0 = SD off at that batch size (plain decoding, speedup 1)")
    lines.append("schedule (batch sizes: draft length): " + rec.schedule_text())
    if any(rec.at(b).extrapolated for b in rec.shown_batches):
        lines.append("* tau at this gamma is an i.i.d. extrapolation from the measured gamma")
    lines += [f"validation: {v.text()}" for v in validation]
    lines.append("\n" + CONFIG_HEADINGS[args.engine])
    if args.engine == "vllm":
        lines.append("  (none)" if snippet is None else json.dumps(snippet))
    else:
        lines.append("  (none)" if snippet is None else "  " + shlex.join(snippet))
    lines += [f"note: {n}" for n in notes]
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in rec.assumptions]
    for path in (args.out, args.config_out if snippet is not None else None):
        if path:
            lines.append(f"wrote {path}")
    return "\n".join(lines)
