"""``specsim predict`` and ``specsim sweep``: speedup per method and scenario from a profile."""

from __future__ import annotations

import argparse
from itertools import groupby

from specsim.bounds import number_arg
from specsim.cli.predict_flags import refuse_past_window, refuse_unpriced_flags, refuse_unread_flags
from specsim.draft_shapes.draft_plans import parse_drafts
from specsim.errors import SpecsimError, warn
from specsim.hardware.host import contended_note, other_host_note
from specsim.jsonio import dumps_json
from specsim.predict.prediction import Prediction, predict
from specsim.predict.sweep import sweep
from specsim.profile_format import WHAT_IF_SCENARIO, MethodAcceptance, Profile
from specsim.profiles import DEFAULT_PROFILE, load_profile
from specsim.report import fmt, format_table, parse_int, parse_int_list

EXTRAPOLATED_MARK = "*"
ASSUMED_MARK = "+"

_SYMBOLS = (
    "tau: tokens per block (bonus included); c = Tq/Tp; v = Tv(gamma)/Tp; o = the engine's overhead per "
    "block / Tp; speedup = tau / (d*c + v + o) for the decode phase (d: drafts per block, gamma at most)"
)


def register(sub) -> None:
    """Add predict and sweep to the ``specsim`` parser."""
    p = sub.add_parser(
        "predict",
        help="predicted speedup at one gamma, per method and scenario",
        description="Predicted decode-phase speedup at one gamma. " + _SYMBOLS,
    )
    p.add_argument("--gamma", required=True, help="draft length gamma, an integer in 1..1024")
    _common(p)
    p.add_argument(
        "--new-tokens",
        type=str,
        default=None,
        help="also show end-to-end request latency (ms) for this many output tokens (needs absolute latency "
        "tables in the profile); every column of the per-gamma table is then priced on requests of that "
        "length (a --tree/--policy comparison walks the traced requests)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=str,
        default=None,
        help="the engine's cap on new tokens per traced request (as 'specsim check --max-new-tokens'): "
        "drafting near it is cut as the engine cuts it (default: each trace's own length)",
    )
    _draft_args(p)
    p.add_argument(
        "--best-tree",
        action="store_true",
        help="also list the best token tree for the profile's "
        "acceptance (Sequoia-style search over trees of <= 64 nodes, priced with the measured Tv(n))",
    )
    p.set_defaults(func=cmd_predict)

    s = sub.add_parser(
        "sweep",
        help="speedup per gamma and the best gamma per method and scenario",
        description="Speedup over a range of gamma and the best gamma. " + _SYMBOLS,
    )
    s.add_argument("--gamma", default="1-10", help="gammas: 1-10, or 1,2,4 (default 1-10; each <= 1024)")
    _common(s)
    _draft_args(s)
    s.set_defaults(func=cmd_sweep)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"shipped profile name or path to a profile JSON (default {DEFAULT_PROFILE}; "
        "see `specsim profiles`)",
    )
    p.add_argument(
        "--method",
        action="append",
        default=None,
        help="drafting method code (repeatable), e.g. M, T, C, MT; default: all",
    )
    p.add_argument(
        "--scenario",
        default=None,
        help="scenario name (e.g. ChartQA) or image-count group (1img, 2img, 5img); default: all",
    )
    p.add_argument(
        "--textbook",
        action="store_true",
        help="use the textbook model instead of measured latency: v = Tv/Tp = 1 and i.i.d. alpha",
    )
    p.add_argument(
        "--context-tokens",
        type=number_arg("tokens"),
        default=None,
        help="schema-1 profiles: the context at which Tp, Tq are read (default: the verify context); "
        "cost-model profiles: the prompt length each request walks from (default: its own)",
    )
    p.add_argument(
        "--alpha",
        default=None,
        help="what-if: add an i.i.d. acceptance row with this alpha in [0, 1) (the only acceptance "
        "a latency-only profile can use)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _draft_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tree",
        action="append",
        default=None,
        metavar="SPEC",
        help="token tree to compare (repeatable): 4,2,1 (branching per depth), chain:5, parents:0,0,1; "
        "needs top-k traces and the profile's tree grids",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="SPEC",
        help="draft-length policy to compare (repeatable): fixed:5, heuristic:4,max=8, "
        "confidence:0.4,gamma=8, batch:1=5,8=3,32=0@8",
    )


def _comparison(args, profile: Profile, methods, gammas, drafts: list, max_new_tokens=None) -> list | None:
    """Chain vs tree vs policy rows when --tree, --policy or --best-tree asked for them; else None."""
    from specsim.predict.predict_drafts import compare

    if not drafts and not getattr(args, "best_tree", False):
        return None
    # --sweep always compares with the best tree when the profile can price one.
    best = getattr(args, "best_tree", True)
    return compare(
        profile,
        profile.select_entries(methods, args.scenario),
        gammas,
        drafts,
        best_tree=best,
        context_tokens=args.context_tokens,
        max_new_tokens=max_new_tokens,
    )


def _print_comparison(rows: list, args) -> None:
    from specsim.predict.predict_drafts import comparison_table

    print(
        "\nchain vs token tree vs draft-length policy (decode phase; every traced request walked through the "
        "cost model; block/Tp = ms per block in units of the target's ms per token; speedup = tau / block/Tp)"
    )
    print(comparison_table(rows))
    trees = [p for r in rows for p in r.drafts if (p.draft or "").startswith("tree:")]
    if any(r.best_chain for r in rows) and (trees or any(r.best_tree for r in rows)):
        print(
            "note: tree rows, tree:chain:G included, are priced on the profile's tree grids (its tree "
            "engine's passes), chain rows on its chain grids; the two engines were measured apart"
        )
    # The textbook has no trees or policies, and a tree needs its traces: these flags shape the table above
    # (one at most: refuse_unread_flags refuses --new-tokens beside --textbook).
    flags = (("--textbook", args.textbook), ("--new-tokens", getattr(args, "new_tokens", None)))
    shaped = next((f for f, on in flags if on), None)
    if shaped:
        print(f"note: {shaped} applies to the table above, not to this comparison")


def _load(args) -> tuple[Profile, list[str] | None]:
    """(profile named by --profile, methods to show): with --alpha, the profile gains an i.i.d. what-if row,
    which joins --method's list when one was given."""
    profile = load_profile(args.profile)
    refuse_unpriced_flags(args, profile)
    if args.alpha is None:
        if not profile.acceptance:
            raise SpecsimError(
                f"profile {profile.name!r} has latency but no acceptance entries: pass --alpha A "
                "for an i.i.d. what-if, or add acceptance with `specsim calibrate acceptance`"
            )
        return profile, args.method
    try:
        alpha = float(args.alpha)
    except ValueError:
        alpha = float("nan")
    if not 0.0 <= alpha < 1.0:  # as every command's --alpha: 1 would accept every draft at any gamma
        raise SpecsimError(f"--alpha: expected a probability in [0, 1), got {args.alpha!r}")
    # τ at γ=1 is 1+α; a what-if entry is i.i.d. at every γ by definition (tau_with_source: not extrapolated).
    entry = MethodAcceptance(
        method=f"iid(alpha={alpha:g})",
        scenario=WHAT_IF_SCENARIO,
        images_per_prompt=0,
        gamma=1,
        tau=1.0 + alpha,
        notes="--alpha what-if",
    )
    methods = [*args.method, entry.method] if args.method else None
    return profile.with_acceptance([entry]), methods


def _warn_other_host(profile: Profile) -> None:
    """A ``specsim: warning:`` line when the profile's latency comes from another CPU model, and one when its
    calibration's host was contended (after the work: an error stays one line)."""
    for note in (other_host_note(profile), contended_note(profile)):
        if note:
            warn(note)


def _header(profile: Profile) -> str:
    prov = profile.provenance
    return (
        f"profile {profile.name}: target {prov.target}, draft {prov.draft}\n"
        f"source: {prov.source}; device: {prov.device}"
    )


def _marks(p: Prediction) -> tuple[str, str]:
    tau_mark = EXTRAPOLATED_MARK if p.extrapolated else ""
    sp_mark = ASSUMED_MARK if ("assumed" in p.note or p.textbook) and p.speedup is not None else ""
    return tau_mark, sp_mark


def cmd_predict(args) -> int:
    """Predictions at one γ per method and scenario, with end-to-end latency when --new-tokens is given."""
    gamma = parse_int(args.gamma, name="--gamma", unit="gamma")
    new_tokens = (
        None if args.new_tokens is None else parse_int(args.new_tokens, name="--new-tokens", unit="tokens")
    )
    max_new = (
        None
        if args.max_new_tokens is None
        else parse_int(args.max_new_tokens, name="--max-new-tokens", unit="tokens")
    )
    drafts = parse_drafts(args.tree, args.policy)  # a bad --tree/--policy fails before any work
    profile, methods = _load(args)
    refuse_unread_flags(args, drafts)
    refuse_past_window(profile, args.context_tokens, gamma, new_tokens or max_new)
    rows = predict(
        profile,
        gamma,
        methods=methods,
        scenario=args.scenario,
        textbook=args.textbook,
        context_tokens=args.context_tokens,
        new_tokens=new_tokens,
        max_new_tokens=max_new,
    )
    drafts = (
        _comparison(args, profile, methods, [gamma], drafts, max_new) if drafts or args.best_tree else None
    )
    _warn_other_host(profile)
    if args.json:
        out = [r.to_json() for r in rows]
        print(
            dumps_json(
                out if drafts is None else {"predictions": out, "drafts": [c.to_json() for c in drafts]}
            )
        )
        return 0
    print(_header(profile))
    print(f"gamma = {gamma}" + ("  (textbook: v = 1, i.i.d. alpha)" if args.textbook else ""))
    with_overhead = any(r.o is not None for r in rows)
    columns = [  # (header, cell); a column no row has a value for is left out
        ("method", lambda r: r.method),
        ("tau", lambda r: fmt(r.block_tau) + _marks(r)[0]),
        ("d", lambda r: fmt(r.drafts_per_block)),
        ("c", lambda r: fmt(r.c)),
        ("v", lambda r: fmt(r.v)),
        ("o", lambda r: fmt(r.o)),
        ("d*c+v+o" if with_overhead else "g*c+v", lambda r: fmt(r.gamma_c_plus_v)),
        ("speedup", lambda r: (fmt(r.speedup, 2) + _marks(r)[1]) if r.speedup is not None else "n/a"),
        ("tok/s", lambda r: fmt(r.tokens_per_s, 1)),
    ]
    if new_tokens:
        columns += [
            (
                f"e2e ms ({new_tokens} tok)",
                lambda r: fmt(r.end_to_end["sd_total_ms"], 0) if r.end_to_end else "n/a",
            ),
            ("e2e speedup", lambda r: fmt(r.end_to_end["speedup"], 2) if r.end_to_end else "n/a"),
        ]
    columns = [(h, cell) for h, cell in columns if any(cell(r) != "-" for r in rows)]
    _print_by_scenario(rows, [h for h, _ in columns], lambda r: [cell(r) for _, cell in columns])
    _print_notes(
        rows,
        {r.note: None for r in rows if r.note},
        e2e_missing=[r.end_to_end_note for r in rows if r.end_to_end_note],
    )
    ratio = profile.latency.published_ratio
    if ratio is not None:
        print(
            f"g*c+v = {ratio.gamma_c_plus_v:g} at gamma = {ratio.gamma} is a published ratio, not a timing: "
            f"{ratio.derivation}. So the speedups of the methods it was derived from restate the paper's; "
            "every other speedup is derived (tau / g*c+v)."
        )
    if with_overhead:
        print(DECODE_PHASE_NOTE)
    if drafts is not None:
        _print_comparison(drafts, args)
    return 0


DECODE_PHASE_NOTE = (
    "tau, d, c, v, o: the decode phase (each request's blocks after its first pass), averaged over each "
    "request's walk from its prompt to prompt + new tokens; d: drafts made per block (gamma, fewer where the "
    "token budget cuts a block short); o: the engine's overhead per block outside the models, in units of "
    "Tp; speedup = tau / (d*c + v + o). --json: decode_tau, drafts_per_block, and tau over whole requests "
    "(first pass included), as `specsim check` measures it"
)


def _print_by_scenario(items, headers: list[str], row_of) -> None:
    """One table per (scenario, images per prompt) run of ``items``, each item a row ``row_of(item)``."""
    for (scenario, images), group in groupby(items, key=lambda r: (r.scenario, r.images_per_prompt)):
        print(f"\nscenario {scenario} ({images} image{'s' if images != 1 else ''})")
        print(format_table(headers, [row_of(r) for r in group]))


def _print_notes(rows, notes: dict, e2e_missing=(), marked=None) -> None:
    """The legend of the marks ``marked`` rows print (default: every row), then the notes."""
    lines, marked = [], rows if marked is None else marked
    if any(r.extrapolated for r in marked):
        srcs = sorted({r.tau_source for r in marked if r.extrapolated})
        lines.append(
            f"{EXTRAPOLATED_MARK} tau extrapolated from another gamma assuming i.i.d. acceptance "
            f"({', '.join(srcs)})"
        )
    if any(_marks(r)[1] for r in rows):
        lines.append(f"{ASSUMED_MARK} speedup rests on an assumption stated below")
    lines += [f"note: {n}" for n in notes]
    lines += [f"note: {m}" for m in dict.fromkeys(e2e_missing)]
    priced = [r for r in rows if r.speedup is not None]  # rows without a speedup say why in their notes
    if priced and all(r.tokens_per_s is None for r in priced):
        lines.append("tok/s needs absolute Tp (ms); this profile has none")
    if lines:
        print("\n" + "\n".join(lines))


def cmd_sweep(args) -> int:
    """Speedup per γ and the best γ per method and scenario."""
    gammas = parse_int_list(args.gamma, name="--gamma", unit="gamma")
    drafts = parse_drafts(args.tree, args.policy)  # a bad --tree/--policy fails before any work
    profile, methods = _load(args)
    refuse_past_window(profile, args.context_tokens, max(gammas))
    results = sweep(
        profile,
        gammas,
        methods=methods,
        scenario=args.scenario,
        textbook=args.textbook,
        context_tokens=args.context_tokens,
    )
    drafts = _comparison(args, profile, methods, gammas, drafts)
    _warn_other_host(profile)
    if args.json:
        out = [r.to_json() for r in results]
        print(dumps_json(out if drafts is None else {"sweep": out, "drafts": [c.to_json() for c in drafts]}))
        return 0
    print(_header(profile))
    print("speedup per gamma" + ("  (textbook: v = 1, i.i.d. alpha)" if args.textbook else ""))

    def row_of(res) -> list[str]:
        cells = [
            "n/a" if p.speedup is None else fmt(p.speedup, 2) + "".join(_marks(p)) for p in res.predictions
        ]
        best = res.best
        return [
            res.method,
            *cells,
            "n/a" if best is None else str(best.gamma),
            "n/a" if best is None else fmt(best.speedup, 2),
        ]

    _print_by_scenario(results, ["method", *[f"g={g}" for g in gammas], "best g", "best"], row_of)
    all_rows = [p for res in results for p in res.predictions]
    priced = [p for p in all_rows if p.speedup is not None]  # a cell prints its marks beside its speedup
    _print_notes(all_rows, {p.note: None for p in all_rows if p.note}, marked=priced)
    for note in dict.fromkeys(r.best_note for r in results if r.best_note):
        print(f"best g n/a: {note}")
    if drafts is not None:
        _print_comparison(drafts, args)
    return 0
