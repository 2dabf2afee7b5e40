"""``specsim import vllm|sglang``: a serving engine's speculative-decoding metrics -> a profile acceptance
entry."""

from __future__ import annotations

import argparse
import sys

from specsim.bounds import MAX_GAMMA, name_arg, number_arg
from specsim.engines.imported import EngineImport, add_to_profile, import_sglang, import_vllm
from specsim.errors import SpecsimError, warn
from specsim.jsonio import check_writable, dumps_json
from specsim.predict.tau_at_gamma import extrapolated, tau_with_source
from specsim.profile_format import MethodAcceptance
from specsim.report import fmt, format_table

_DESC = (
    "Import acceptance from a serving engine into a profile (created, or added to). tau(k) = tokens per "
    "draft/verify step, bonus token included (vLLM's 'mean acceptance length'); a_k = P(at least k drafts "
    "accepted). vLLM's per-position counters give tau(k) exactly for every k <= K (the server's "
    "num_speculative_tokens); k > K is an i.i.d. extrapolation, marked *. SGLang gives tau at its draft "
    "length only."
)


def register(sub) -> None:
    """Add ``specsim import vllm`` and ``specsim import sglang``."""
    imp = sub.add_parser(
        "import", help="import vLLM / SGLang speculative-decoding metrics into a profile", description=_DESC
    )
    engines = imp.add_subparsers(dest="import_engine", metavar="ENGINE")
    imp.set_defaults(func=lambda args: (imp.print_help(sys.stderr), 2)[1])

    v = engines.add_parser(
        "vllm", help="vLLM /metrics scrape(s) or LLM.get_metrics() JSON", description=_DESC
    )
    v.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="one scrape (counters since server start) or two (earlier, later: their difference); "
        "Prometheus text from GET /metrics, or a JSON list of LLM.get_metrics() items",
    )
    v.add_argument(
        "--num-speculative-tokens",
        type=number_arg("gamma", integer=True),
        default=None,
        help="the server's num_speculative_tokens K, checked against the counters (optional)",
    )
    _common(v)
    v.set_defaults(func=cmd_import_vllm)

    s = engines.add_parser(
        "sglang", help="SGLang /metrics scrape or JSONL of /generate responses", description=_DESC
    )
    s.add_argument(
        "file",
        metavar="FILE",
        help="Prometheus text with sglang:spec_accept_length, or JSONL of "
        "/generate responses whose meta_info has completion_tokens and spec_verify_ct",
    )
    s.add_argument(
        "--num-steps",
        type=number_arg("gamma", integer=True),
        required=True,
        help="the server's --speculative-num-steps (draft length K of a chain, topk 1)",
    )
    _common(s)
    s.set_defaults(func=cmd_import_sglang)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--method",
        required=True,
        type=name_arg,
        help="drafting method name for the entry (e.g. M, eagle, draft)",
    )
    p.add_argument(
        "--scenario", required=True, type=name_arg, help="scenario name for the entry (e.g. chat, chartqa)"
    )
    p.add_argument(
        "--out", required=True, type=name_arg, help="profile JSON to create, or to add the entry to"
    )
    p.add_argument(
        "--model",
        default=None,
        type=name_arg,
        help="model_name label to import when a scrape holds several (for a "
        "responses file: the model's name, for the provenance)",
    )
    p.add_argument(
        "--images-per-prompt",
        type=number_arg("images", integer=True),
        default=0,
        help="images per request of this traffic (default 0)",
    )
    p.add_argument(
        "--engine-version",
        default="unknown",
        type=name_arg,
        help="engine version, for the provenance (e.g. 0.11.0)",
    )
    p.add_argument(
        "--draft",
        default=None,
        type=name_arg,
        help="draft model name, for the provenance and `specsim recommend`",
    )
    p.add_argument("--device", default=None, type=name_arg, help="GPU the engine ran on, for the provenance")
    p.add_argument(
        "--window",
        default=None,
        type=name_arg,
        help="time window text for the provenance (default: the files' modification times)",
    )
    p.add_argument(
        "--show-k",
        type=number_arg("gamma", integer=True),
        default=None,
        help="show tau(k) up to this k (default K+2; at most 1024)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _check_args(args) -> None:
    if args.images_per_prompt < 0:
        raise SpecsimError(f"--images-per-prompt: expected an integer >= 0, got {args.images_per_prompt}")
    if args.show_k is not None and args.show_k < 1:
        raise SpecsimError(f"--show-k: expected an integer >= 1, got {args.show_k}")
    if not str(args.out).endswith(".json"):
        raise SpecsimError(f"--out: expected a path ending in .json, got {args.out!r}")
    check_writable(args.out, "--out")


def cmd_import_vllm(args) -> int:
    _check_args(args)
    imp = import_vllm(
        args.files, model=args.model, num_speculative_tokens=args.num_speculative_tokens, window=args.window
    )
    return _finish(imp, args)


def cmd_import_sglang(args) -> int:
    _check_args(args)
    return _finish(
        import_sglang(args.file, num_steps=args.num_steps, model=args.model, window=args.window), args
    )


def tau_rows(entry: MethodAcceptance, k_max: int) -> list[dict]:
    """τ(k) for k = 1..k_max from the entry as predict reads it, with a_k where the histogram gives it."""
    survival = None
    if entry.accepted_histogram is not None:
        from specsim.acceptance.theory import survival_from_histogram

        survival = survival_from_histogram(entry.accepted_histogram)
    rows = []
    for k in range(1, k_max + 1):
        tau, source = tau_with_source(entry, k)
        a_k = None if survival is None or k > len(survival) else float(survival[k - 1])
        prev = (
            1.0 if k == 1 else (None if survival is None or k - 1 > len(survival) else float(survival[k - 2]))
        )
        rows.append(
            {
                "k": k,
                "tau": tau,
                "tau_source": source,
                "extrapolated": extrapolated(source),
                "a_k": a_k,
                "conditional": None if a_k is None or not prev else a_k / prev,
            }
        )
    return rows


def _import_warnings(profile, entry, replaced) -> list[str]:
    """What an import into an existing profile changed besides adding: an entry replaced, another target."""
    out = []
    if replaced is not None:
        of = f", of {replaced.provenance.target!r}" if replaced.provenance else ""
        out.append(
            f"replaced the entry of method {entry.method!r}, scenario {entry.scenario!r} in profile "
            f"{profile.name} (gamma {replaced.gamma}{of}); give another --method or --scenario to keep both"
        )
    mine, theirs = entry.provenance.target if entry.provenance else "", profile.provenance.target
    if mine and theirs and mine != theirs:
        out.append(f"these counters are of model {mine!r}, but profile {profile.name}'s target is {theirs!r}")
    return out


def _finish(imp: EngineImport, args) -> int:
    entry = imp.entry(
        method=args.method,
        scenario=args.scenario,
        images_per_prompt=args.images_per_prompt,
        engine_version=args.engine_version,
        draft=args.draft,
        device=args.device,
    )
    rows = tau_rows(entry, args.show_k or min(imp.gamma + 2, MAX_GAMMA))  # the default: K+2, at most the cap
    profile, created, replaced = add_to_profile(entry, args.out)
    done = "new profile" if created else f"{'replaced in' if replaced else 'added to'} profile {profile.name}"
    for line in _import_warnings(profile, entry, replaced):
        warn(line)
    if args.json:
        print(
            dumps_json(
                {
                    "engine": imp.engine,
                    "model": imp.model,
                    "K": imp.gamma,
                    "window": imp.window,
                    "files": list(imp.files),
                    "facts": list(imp.facts),
                    "tau": rows,
                    "accepted_histogram": None
                    if imp.accepted_histogram is None
                    else list(imp.accepted_histogram),
                    "profile": str(args.out),
                    "created": created,
                    "replaced": replaced is not None,
                }
            )
        )
        return 0
    print(f"{imp.engine} metrics of model {imp.model or '(unlabelled)'!r}, window {imp.window}")
    for fact in imp.facts:
        print(f"  {fact}")
    table = [
        [
            str(r["k"]),
            fmt(r["tau"], 4) + ("*" if r["extrapolated"] else ""),
            fmt(r["a_k"], 4),
            fmt(r["conditional"], 4),
        ]
        for r in rows
    ]
    print()
    print(format_table(["k", "tau(k)", "a_k", "P(k-th accepted | k-1 accepted)"], table))
    if any(r["extrapolated"] for r in rows) and imp.accepted_histogram is None:  # SGLang: tau at K alone
        print(
            f"\n* not measured: SGLang reports tau at its draft length K = {imp.gamma} only; every other k "
            f"drafts at the i.i.d. alpha of tau({imp.gamma})"
        )
    elif any(r["extrapolated"] for r in rows):
        print(
            f"\n* past the measured draft length K = {imp.gamma}: the counters' curve carried on, each later "
            f"draft accepted at the i.i.d. alpha of tau({imp.gamma}) (not measured)"
        )
    print(
        f"wrote {args.out} ({done}): method "
        f"{entry.method!r}, scenario {entry.scenario!r}, gamma = {entry.gamma}"
    )
    if not created and profile.latency.target_decode_ms_by_context is not None:
        return 0
    print(
        "speedup needs latency: `specsim recommend --engine vllm|sglang --profile "
        f"{args.out} --pair ... --device ...` (hardware planner), or a latency profile of the pair from "
        f"`specsim calibrate latency --out lat.json` and `specsim serve --acceptance-profile {args.out} "
        "--cost-profile lat.json`"
    )
    return 0
