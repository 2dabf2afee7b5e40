"""``specsim check``: run real speculative decoding and compare it with the profile's prediction.

Plug-in of :mod:`specsim.cli`; torch is imported only when the command runs. The runs are
:func:`calibrate.check.run_check` (rounds until each row's measured speedup is precise enough); the
predictions and the tables are :mod:`specsim.check` and :mod:`specsim.check_report`.
"""

from __future__ import annotations

import sys

from specsim.bounds import number_arg
from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json, show
from specsim.profile import load_profile, resolve_profile_path, save_profile
from specsim.report import parse_int_list

_DESC = ("Per gamma and method: tau and speedup over target-only decoding, predicted from the profile (tau from "
         "trace replay; with a cost model, every forward priced at its own rows, context and batch along each "
         "prompt's blocks, plus the engine's overhead) vs measured (wall clock, interleaved, repeated in rounds "
         "until the measured speedup's 95%% confidence half-width is within --halfwidth), with the textbook "
         "prediction (v = 1, i.i.d. alpha) beside it. Writes the rows into the profile's checks.")


def register(subparsers, calibrate_subparsers) -> None:
    """Add ``specsim check``."""
    from calibrate.cli_acceptance import _method_args, _model_args
    from calibrate.cli_check_sampled import add_sampling_args

    chk = subparsers.add_parser("check", help="run real speculative decoding and compare with the prediction",
                                description=_DESC)
    chk.add_argument("--profile", required=True, help="profile with latency and acceptance sections")
    chk.add_argument("--gamma", default="1,2,3,4,6,8", help="gammas, e.g. 1,2,3,4,6,8 or 1-4 (default 1,2,3,4,6,8)")
    _model_args(chk, required=False)
    _method_args(chk)
    chk.add_argument("--scenario", default=None, help="scenario name as in 'calibrate acceptance' (default: the "
                     "prompt set's name)")
    chk.add_argument("--tree", action="append", default=None, metavar="SPEC", help="also run token-tree decoding "
                     "with this tree (repeatable; e.g. 4,2,1, chain:5, parents:0,0,1); needs top-k traces "
                     "('calibrate acceptance --top-k K') and tree grids ('calibrate latency --tree-sizes/--tree')")
    chk.add_argument("--policy", action="append", default=None, metavar="SPEC", help="also run a draft-length "
                     "policy (repeatable; e.g. heuristic:4,max=8, confidence:0.4,gamma=8, batch:1=4@1); every gamma "
                     "it reaches must be in the profile's latency grid")
    rep = chk.add_argument_group("repeats (rounds of every prompt x method x gamma, interleaved)")
    rep.add_argument("--halfwidth", type=number_arg("ratio"), default=0.015, help="stop repeating a row once its "
                     "measured decode-phase speedup has a 95%% half-width within this fraction (default 0.015)")
    rep.add_argument("--min-rounds", type=number_arg("repeats", integer=True), default=2, help="at least this many "
                     "rounds (default 2; one round gives no half-width)")
    rep.add_argument("--max-rounds", type=number_arg("repeats", integer=True), default=6,
                     help="at most this many rounds (default 6)")
    rep.add_argument("--max-minutes", type=number_arg("minutes"), default=None,
                     help="stop starting rounds after this long")
    add_sampling_args(chk)
    chk.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    chk.add_argument("--no-write", action="store_true", help="do not write the rows into the profile")
    chk.set_defaults(func=cmd_check)


def _entry(profile, method: str, scenario: str | None):
    cands = [a for a in profile.acceptance if a.method == method and (scenario is None or a.scenario == scenario)]
    if not cands:
        known = ", ".join(f"{a.method}/{a.scenario}" for a in profile.acceptance) or "none"
        raise SpecsimError(f"profile has no acceptance entry for method={method!r} scenario={scenario!r} "
                           f"(has: {known}; run 'specsim calibrate acceptance' first)")
    return cands[0]


def _check_args(args) -> list[int]:
    gammas = sorted(parse_int_list(args.gamma, name="--gamma"))
    if args.max_new_tokens < 2:  # the first pass carries the prompt; the decode phase starts at token 2
        raise SpecsimError(f"--max-new-tokens: expected an integer >= 2 (a decode phase to time), "
                           f"got {args.max_new_tokens}")
    if not 0 < args.halfwidth < 1:
        raise SpecsimError(f"--halfwidth: expected a fraction in (0, 1), got {args.halfwidth}")
    if args.min_rounds < 1 or args.max_rounds < args.min_rounds:
        raise SpecsimError(f"--min-rounds/--max-rounds: expected 1 <= min <= max, got {args.min_rounds} and "
                           f"{args.max_rounds}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise SpecsimError(f"--max-minutes: expected a positive number, got {args.max_minutes}")
    return gammas


def _drafts(args) -> list:
    """The token trees and draft-length policies of --tree / --policy."""
    from specsim.policies import parse_policy
    from specsim.trees import parse_tree

    drafts = []
    for option, parse, texts in (("--tree", parse_tree, args.tree), ("--policy", parse_policy, args.policy)):
        for text in texts or []:
            try:
                drafts.append(parse(text))
            except SpecsimError as err:
                raise SpecsimError(f"{option} {show(text)}: {err}") from None
    return drafts


def _preflight(profile, entries: list, drafts: list, max_new_tokens: int) -> None:
    """Refuse, before minutes of runs, a tree or policy the profile cannot predict: no cost model, no tree
    grids, traces without draft ranks, or a policy whose replayed γ leaves the measured grid."""
    from specsim.trees import TreeSpec
    from specsim.walk_drafts import draft_label, tree_costs

    cost = profile.latency.cost_model
    for d in drafts:
        if cost is None:
            raise SpecsimError(f"--tree/--policy {draft_label(d)}: the profile has no cost model (run 'specsim "
                               "calibrate latency')")
        if isinstance(d, TreeSpec) and tree_costs(cost).max_nodes < d.n:
            raise SpecsimError(f"--tree {d}: {d.n} nodes, but the profile's tree grids stop at n = "
                               f"{cost.tree.max_nodes} (add it with 'specsim calibrate latency --tree {d}')")
        for e in entries:
            for t in (t for t in e.traces if t.match is not None):
                _preflight_trace(cost, e, t, d, max(max_new_tokens, len(t.match)))


def _preflight_trace(cost, entry, trace, draft, max_new_tokens: int) -> None:
    """Replay ``draft`` on one trace and price it: a γ or a level pass outside the grids fails here."""
    from specsim.walk_drafts import draft_label, draft_plan, plan_cost

    plan = draft_plan(draft, trace, max_new_tokens)
    top = int(max(plan.drafts, default=0)) if hasattr(plan, "drafts") else 0
    if top > cost.max_gamma:
        raise SpecsimError(f"--policy {draft}: reaches gamma {top} on {entry.method}/{trace.prompt_id}, but the "
                           f"profile's latency grid stops at gamma {cost.max_gamma} (cap it, e.g. "
                           f"',max={cost.max_gamma}', or calibrate more gammas)")
    p = trace.prompt_tokens or entry.target_prompt_tokens
    if p:
        try:
            plan_cost(cost, plan, target_prompt_tokens=p, batch=entry.draft_batch_size,
                      draft_prompt_tokens=trace.draft_prompt_tokens or entry.draft_prompt_tokens or p)
        except SpecsimError as err:
            raise SpecsimError(f"{draft_label(draft)} on {entry.method}/{trace.prompt_id}: {err}") from None


def _rows(profile, setup, entries: dict, runs, gammas: list, drafts: list) -> tuple[list, dict, dict]:
    """Check rows per scenario group × method × run, replay-vs-engine agreement by kind, stage shares."""
    from calibrate.check import replay_agreement, stage_shares
    from specsim.check import check_row
    from specsim.trees import TreeSpec

    rows, agreement, stages = [], {}, {}
    for n, reqs in setup.groups.items():
        ids = [r.prompt_id for r in reqs]
        for m in setup.methods:
            entry = entries[(n, m)]
            specs = [runs.specs[(m, p)] for p in ids]
            for g in gammas + drafts:
                rows.append(check_row(profile, entry, g, specs, runs.measured(m, g, ids)))
            first = {g: [r for r in runs.first[(m, g)] if r.prompt_id in set(ids)] for g in gammas + drafts}
            for kind, runs_of in (("gamma", gammas), ("tree", [d for d in drafts if isinstance(d, TreeSpec)]),
                                  ("policy", [d for d in drafts if not isinstance(d, TreeSpec)])):
                if runs_of:
                    pairs = [replay_agreement(entry, first[g], None if kind == "gamma" else g) for g in runs_of]
                    agreement[(m, entry.scenario, kind)] = (sum(p[0] for p in pairs), sum(p[1] for p in pairs))
            stages[(m, entry.scenario)] = stage_shares([r for g in gammas for r in first[g]])
    return rows, agreement, stages


def prepare(args) -> tuple:
    """(γs, profile path, profile, methods) after every check that needs no model: arguments, --profile
    writable, a latency section; methods default to a single-method profile's one."""
    gammas = _check_args(args)
    profile_path = resolve_profile_path(args.profile)
    if not args.no_write:
        check_writable(profile_path, "--profile")
    profile = load_profile(str(profile_path))
    if profile.latency.target_decode_ms_by_context is None and profile.latency.cost_model is None:
        raise SpecsimError(f"profile {args.profile!r} has no latency section (run 'specsim calibrate latency' first)")
    methods = args.method
    if methods is None and len({a.method for a in profile.acceptance}) == 1 and profile.acceptance:
        methods = [profile.acceptance[0].method]  # a single-method profile needs no --method
    return gammas, profile_path, profile, methods


def entries_of(setup, profile, scenario: str | None) -> dict:
    """(images per prompt, method) -> the profile's acceptance entry of that scenario group."""
    return {(n, m): _entry(profile, m, setup.scenario(n, scenario) if n or scenario else None)
            for n in setup.groups for m in setup.methods}


def cmd_check(args) -> int:
    from calibrate.check import run_check
    from calibrate.cli_acceptance import _progress, load_setup
    from specsim.check_report import check_table, summary, terms_table

    if args.temperature > 0:
        from calibrate.cli_check_sampled import cmd_check_sampled

        return cmd_check_sampled(args)
    gammas, profile_path, profile, methods = prepare(args)
    drafts = _drafts(args)
    setup = load_setup(args, methods=methods, cache_captions=False)
    if drafts:
        _preflight(profile, [a for a in profile.acceptance if a.method in setup.methods], drafts, args.max_new_tokens)
    entries = entries_of(setup, profile, args.scenario)  # before any run: a missing entry costs no measuring
    progress = None if args.no_progress else (
        lambda xs, rnd: _progress(xs, args, f"check round {rnd + 1}/{args.max_rounds}"))
    runs = run_check(setup, gammas + drafts, max_new_tokens=args.max_new_tokens, device=args.device,
                     halfwidth=args.halfwidth, min_rounds=args.min_rounds, max_rounds=args.max_rounds,
                     max_seconds=None if args.max_minutes is None else 60 * args.max_minutes, progress=progress)
    rows, agreement, stages = _rows(profile, setup, entries, runs, gammas, drafts)
    if not args.no_write:
        save_profile(profile.with_checks(rows), profile_path)
    if args.json:
        print(dumps_json({"rows": [r.to_json() for r in rows], "summary": summary(rows), "rounds": runs.rounds,
                          "seconds": runs.seconds,
                          "replay_equals_engine": {f"{m}/{s}": list(v) for (m, s, k), v in agreement.items()
                                                   if k == "gamma"},
                          "tree_replay_equals_engine": {f"{m}/{s}": list(v) for (m, s, k), v in agreement.items()
                                                        if k == "tree"},
                          "policy_replay_equals_engine": {f"{m}/{s}": list(v) for (m, s, k), v in agreement.items()
                                                          if k == "policy"},
                          "stages": {f"{m}/{s}": v for (m, s), v in stages.items()}}))
        return 0
    print(check_table(rows))
    terms = terms_table(rows)
    if terms:
        print("\n" + terms)
    for (m, s, kind), (same, total) in agreement.items():
        what = {"gamma": "greedy tau", "tree": "greedy trees", "policy": "greedy policies"}[kind]
        print(f"{s}/{m}: {what}, trace replay == engine for {same}/{total} (prompt, {kind})")
    print(f"{runs.rounds} round(s) in {runs.seconds:.0f} s", file=sys.stderr)
    return 0
