"""``specsim hardware``: rank devices for a target/draft pair.

Numpy only at import (plug-in rule: no torch). Text tables by default, ``--json`` for machines.
"""

from __future__ import annotations

import argparse

from specsim.bounds import number_arg
from specsim.cli.model_options import add_model_options, add_price_option, keep_option_defaults, refuse_unread
from specsim.draft_kinds.registry import draft_kind
from specsim.errors import SpecsimError
from specsim.hardware.device import load_devices
from specsim.hardware.parallel import SPLIT_MODES
from specsim.hardware.plan import DEFAULT_BATCHES, DEFAULT_CONTEXTS
from specsim.hardware.plan_request import PlanRequest, answer
from specsim.hardware.plan_text import plan_text
from specsim.hardware.runtime import Runtime
from specsim.hardware.tree_plan import tree_plan_text
from specsim.hardware.weight_formats import WEIGHT_DTYPES
from specsim.jsonio import check_writable, dumps_json
from specsim.predict.acceptance_source import ACCEPTANCE_FORMS
from specsim.profiles import DEFAULT_PROFILE
from specsim.report import fmt, format_table, parse_int, parse_int_lists

_DESC = (
    "Rank devices by predicted tokens/s and speculative-decoding speedup for a target/draft pair, using a "
    "roofline latency model (a pass's attention kernels and its matmuls each take max(FLOPs/(peak*"
    "eff_compute(rows)), bytes/(bandwidth*eff_memory(rows))), one after the other, + the runtime's "
    "per-forward/per-layer overhead, + all-reduces under tensor parallel) and acceptance tau "
    "(from a profile, or --tau/--alpha). speedup = tau/(gamma*c + v + o), c = Tq/Tp, v = Tv(gamma)/Tp, o = "
    "the engine's named block terms / Tp, best "
    "gamma per device unless --gamma; tokens/s are summed over the batch. Decode phase only. The local CPU "
    "is measured only when asked (--device cpu)."
)


def register(sub) -> None:
    """Add ``specsim hardware``."""
    p = sub.add_parser(
        "hardware", help="rank GPUs/CPUs for a target/draft pair (roofline + profile tau)", description=_DESC
    )
    add_model_options(p, many_devices=True)
    add_price_option(p)
    p.add_argument(
        "--model-config",
        default=None,
        metavar="CONFIG_JSON",
        help="target as a HF config.json (same as --target PATH); needs --draft",
    )
    p.add_argument(
        "--dtype",
        default=None,
        help=f"weights dtype: {', '.join(WEIGHT_DTYPES)} (default: bfloat16 or the config's)",
    )
    p.add_argument(
        "--kv-dtype",
        default=None,
        help="KV-cache dtype when it differs from the weights' (e.g. "
        "--dtype int4 --kv-dtype float16; default: the weights' or float16 for quantised weights)",
    )
    p.add_argument(
        "--tp",
        type=number_arg("gpus", integer=True),
        default=1,
        help="GPUs per replica of the target (default 1), split as --split-mode says",
    )
    p.add_argument(
        "--split-mode",
        choices=SPLIT_MODES,
        default=None,
        help="how --tp GPUs share the target: "
        "'tensor' (Megatron sharding: a pass's time divides, all-reduces added) or 'layer' (whole layers "
        "per GPU, run in turn: only memory divides); default: the runtime's (layer for llama.cpp and "
        "hf-eager, tensor for vllm and gpt-fast)",
    )
    p.add_argument(
        "--expert-parallel",
        action="store_true",
        help="with --tp and a mixture-of-experts target: each GPU holds E/tp whole experts (vLLM "
        "--enable-expert-parallel, SGLang --ep-size) and a pass waits for the busiest; default: every "
        "expert split over the GPUs",
    )
    placement = p.add_mutually_exclusive_group()
    placement.add_argument(
        "--draft-sharded",
        action="store_const",
        const=True,
        default=None,
        help="with --tp: split the draft the same way as the target (default: as the runtime places it; "
        "vLLM and SGLang shard it)",
    )
    placement.add_argument(
        "--draft-one-gpu",
        dest="draft_sharded",
        action="store_const",
        const=False,
        help="with --tp: run the whole draft on one GPU",
    )
    p.add_argument(
        "--gamma",
        type=number_arg("gamma", integer=True),
        default=None,
        help="evaluate at this fixed gamma instead of the best",
    )
    p.add_argument(
        "--tau",
        type=float,
        default=None,
        help="tau at --gamma (tokens per block, bonus included) "
        "instead of a profile; other gammas are not used",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="i.i.d. acceptance alpha instead of a profile: tau(gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)",
    )
    p.add_argument(
        "--acceptance",
        default=None,
        metavar="SPEC",
        help=f"tau from one acceptance source, as every command takes it: {ACCEPTANCE_FORMS}",
    )
    p.add_argument(
        "--profile", default=None, help=f"profile for tau (default: the pair's, {DEFAULT_PROFILE})"
    )
    p.add_argument(
        "--method", action="append", default=None, help="method code (repeatable) or 'all'; default: first"
    )
    p.add_argument("--scenario", default=None, help="profile scenario (default: its first)")
    p.add_argument(
        "--batch", action="append", default=None, help="batch sizes, e.g. 1,2,4 or 1-8 (default 1..64 x2)"
    )
    p.add_argument("--context", action="append", default=None, help="context tokens (default 1024,4096,8192)")
    p.add_argument(
        "--prompt-tokens",
        type=number_arg("prompt_tokens", integer=True),
        default=None,
        help="a request's prompt tokens (with --output-tokens, instead of --context): the decode runs over "
        "the mean cached context, prompt + output/2, and each row adds the end-to-end speedup with both "
        "prefills",
    )
    p.add_argument(
        "--output-tokens",
        type=number_arg("output_tokens", integer=True),
        default=None,
        help="a request's output tokens (with --prompt-tokens)",
    )
    p.add_argument("--gamma-max", default=None, help="largest gamma tried (default 8)")
    p.add_argument(
        "--fit-profile",
        default=None,
        help="fit efficiencies on this profile's measured latencies and use them on every device",
    )
    p.add_argument(
        "--fit-device",
        default=None,
        help="device the fit profile was measured on (default: from its provenance, 'cpu' = this machine)",
    )
    p.add_argument(
        "--fit-dtype",
        default=None,
        help="weights dtype of the fit profile's models (default: its provenance dtype, e.g. float32)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="with --fit-profile: fit on short contexts / small "
        "gamma, report the error on the held-out points",
    )
    p.add_argument(
        "--trees",
        action="store_true",
        help="also pick the best token tree per device, batch and "
        "context (Tv(n) from the roofline over n+1 rows; tau from the profile's top-k traces or --alpha; "
        "trees of <= --tree-max-nodes nodes)",
    )
    p.add_argument(
        "--tree-max-nodes",
        type=number_arg("tree_nodes", integer=True),
        default=None,
        help="largest tree searched with --trees (default 64)",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list presets, pairs, shipped model ids, devices, runtimes and drafting kinds, and exit",
    )
    p.add_argument("--list-devices", action="store_true", help="list the catalog with sources and exit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="write speedup vs batch size: a panel per context, a line per device and method",
    )
    p.set_defaults(func=cmd_hardware)
    keep_option_defaults(p)


def _refuse_unused(args: argparse.Namespace) -> None:
    """Options that would change nothing in this combination: refused, not ignored."""
    if args.gamma_max is not None and args.gamma is not None and not args.trees:
        raise SpecsimError("--gamma-max: bounds the gamma searched, and --gamma fixes it; give one of them")
    if args.tree_max_nodes is not None and not args.trees:
        raise SpecsimError("--tree-max-nodes: bounds the token trees --trees searches; add --trees")
    given = [f for f, v in (("--split-mode", args.split_mode), ("--draft-sharded/--draft-one-gpu",
             args.draft_sharded)) if v is not None]  # fmt: skip
    if given and args.tp == 1:
        raise SpecsimError(f"{given[0]}: places the model over --tp GPUs, and --tp is 1; add --tp N")
    if args.draft_sharded is not None and not draft_kind(args.draft_kind).has_model:
        raise SpecsimError(
            "--draft-sharded/--draft-one-gpu: places a draft model, and kind "
            f"{args.draft_kind} drafts with none"
        )


# what a listing reads; every other option shapes a plan, and a listing would drop it without a word
_LISTING_READS = {"list": {"list", "json"}, "list_devices": {"list_devices", "device", "price", "json"}}


def _refuse_beside_listing(args: argparse.Namespace, listing: str) -> None:
    """SpecsimError for an option given beside ``listing`` that it does not read."""
    if args.list and args.list_devices:
        raise SpecsimError("--list, --list-devices: two listings; give one")
    refuse_unread(
        args, _LISTING_READS[listing], f"shapes a plan, and --{listing.replace('_', '-')} only lists"
    )


def cmd_hardware(args: argparse.Namespace) -> int:
    for listing in ("list", "list_devices"):
        if getattr(args, listing):
            _refuse_beside_listing(args, listing)
            return _list_all(args) if listing == "list" else _list_devices(args)
    if args.plot is not None:
        check_writable(args.plot, "--plot", suffix=".png")
    _refuse_unused(args)
    # The ranges are parsed here, at the command line; the request checks what they combine with.
    ranges = {
        "gamma_max": parse_int(args.gamma_max or "8", name="--gamma-max", unit="gamma"),
        "tree_max_nodes": args.tree_max_nodes or 64,
        "batches": parse_int_lists(args.batch, DEFAULT_BATCHES, name="--batch", unit="batch"),
        "contexts": parse_int_lists(args.context, DEFAULT_CONTEXTS, name="--context", unit="tokens"),
    }
    req = PlanRequest.from_options(vars(args) | ranges)
    got = answer(req)
    if args.plot:
        from specsim.hardware.plots import plot_speedup_vs_batch

        plot_speedup_vs_batch(got.plan, args.plot)
    validation = _validation(got.efficiency, got.plan.batches, got.plan.contexts)
    if args.json:
        out = {
            "target": got.target.name,
            "draft": None if got.draft is None else got.draft.name,
            "draft_kind": got.plan.rows[0].draft_kind,
            "profile": None if got.profile is None else got.profile.name,
            "plan": got.plan.to_json(),
            "fit": None if got.fit is None else got.fit.to_json(),
            "validation": [v.to_json() | {"context_tokens": c} for c, v in validation],
        }
        if got.trees is not None:
            out["trees"] = [r.to_json() for r in got.trees]
        print(dumps_json(out))
        return 0
    trees = None if got.trees is None else tree_plan_text(list(got.trees), req.gamma)
    print(plan_text(got.plan, got.target, got.draft, got.fit))
    if validation:
        print("\nvalidation of these speedups (published rows, `specsim validate`):")
        print("\n".join(f"  context {c}: {v.text()}" for c, v in validation))
    if trees is not None:
        print(
            "\ntoken trees (Sequoia-style search; tau from per-rank acceptance, the same at every depth, for "
            "the chain beside each tree too, which can differ from the ranking's tau per gamma; speedup = "
            "tau*T / (draft passes + Tv(n) + the engine's block terms), T and the terms as above):"
        )
        print(trees)
    return 0


def _validation(efficiency: dict, batches, contexts) -> list[tuple[int, object]]:
    """(context, :class:`specsim.validation.regime_error.RegimeError`) for each shipped runtime the plan
    uses, batch band and context: none for a runtime that is not the shipped file of its name (a user's file,
    one fitted on a profile: its hold-out says it), whose rows were never scored."""
    from specsim.validation.regime_error import regime_errors

    runs = {e.name: e for e in efficiency.values() if isinstance(e, Runtime)}
    return [(c, v) for n in sorted(runs) for c in contexts for v in regime_errors(runs[n], batches, c)]


def _list_devices(args: argparse.Namespace) -> int:
    from specsim.hardware.prices import parse_prices, priced

    devices = priced(load_devices(args.device), parse_prices(args.price))  # $/h as the plan would price it
    if args.json:
        print(dumps_json([d.to_json() for d in devices]))
        return 0
    rows = [
        [
            d.name,
            f"{d.memory_bandwidth_bytes_per_s / 1e9:.0f}",
            f"{d.peak_flops_per_s / 1e12:.1f}",
            d.peak_flops_dtype,
            f"{d.memory_bytes / 1e9:.0f}",
            fmt(d.price_per_hour_usd, 2),
        ]
        for d in devices
    ]
    print(format_table(["device", "GB/s", "TFLOP/s", "dtype", "GB", "$/h"], rows))
    for d in devices:
        print(f"{d.name}:")
        for key, src in d.sources.items():
            print(f"  {key}: {src}")
    return 0


def _list_all(args: argparse.Namespace) -> int:
    from specsim.hardware.catalog_listing import catalog_listing

    listing = catalog_listing()
    if args.json:
        print(dumps_json(listing))
        return 0
    for section, rows in listing.items():
        print(f"{section.replace('_', ' ')}:")
        if not rows:
            print("  (none)\n")
            continue
        keys = [k for k in rows[0] if k not in ("source", "description")]
        print(format_table(keys, [[_cell(r.get(k)) for k in keys] for r in rows]) + "\n")
    return 0


def _cell(value) -> str:
    return ", ".join(value) if isinstance(value, list) else fmt(value, 2)
