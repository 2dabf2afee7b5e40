"""``specsim profiles``: the shipped profiles, one line each; ``specsim profiles show NAME``: what one
holds."""

from __future__ import annotations

import argparse
import sys

from specsim.check.check_tables import summary
from specsim.errors import SpecsimError
from specsim.jsonio import dumps_json
from specsim.profile_format import Profile
from specsim.profiles import DEFAULT_PROFILE, load_profile, shipped_profiles


def register(sub) -> None:
    """Add profiles to the ``specsim`` parser."""
    pr = sub.add_parser(
        "profiles",
        help="list the shipped profiles, or show what one holds",
        description="The shipped profiles, one line each; 'specsim profiles show NAME' (a shipped name or a "
        "path) prints its provenance, methods x scenarios, the gammas measured, its latency kind and its "
        "check rows' errors.",
    )
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_profiles, action=None)
    # a subcommand, not two optional positionals: argparse took `show --json NAME` as `show` and an extra NAME
    show = pr.add_subparsers(dest="action", metavar="{show}").add_parser("show", help="show one profile")
    show.add_argument("name", help="the profile to show (shipped name or path)")
    # SUPPRESS: the subcommand's --json, when not given, leaves the one given before `show` standing
    show.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


def latency_kind(profile: Profile) -> str:
    """What the profile prices forwards with, in words."""
    lat = profile.latency
    ratio = lat.published_ratio
    if ratio is not None:
        return f"published ratio g*c+v = {ratio.gamma_c_plus_v:g} at gamma = {ratio.gamma}"
    try:
        model = lat.forward_costs()
    except SpecsimError:
        return "none (no latency timings)"
    if lat.cost_model_from_tables:
        return "1-D tables (schema 1), priced as a one-context cost model"
    trees = ", token-tree grids" if model.tree is not None else ""
    return f"measured cost model (gamma <= {model.max_gamma}{trees})"


def profile_summary(name: str, profile: Profile) -> dict:
    """The facts ``profiles show`` prints: provenance, entries, gammas, latency kind, check errors."""
    entries = profile.acceptance
    greedy = [c for c in profile.checks if c.temperature is None]
    return {
        "name": name,
        "schema_version": profile.schema_version,
        "provenance": profile.provenance.to_json(),
        "methods": list(dict.fromkeys(e.method for e in entries)),
        "scenarios": list(dict.fromkeys(e.scenario for e in entries)),
        "gammas_measured": sorted({e.gamma for e in entries if e.gamma is not None}),
        "traced_entries": sum(1 for e in entries if any(t.match is not None for t in e.traces)),
        "latency": latency_kind(profile),
        "checks": len(profile.checks),
        "sampled_checks": len(profile.checks) - len(greedy),
        "greedy_check_summary": summary(greedy) if greedy else None,
    }


def cmd_profiles(args) -> int:
    """The shipped profiles, one line (or JSON object) each; or one profile's summary."""
    if args.action == "show":
        info = profile_summary(args.name, load_profile(args.name))
        if args.json:
            print(dumps_json(info))
            return 0
        _print_summary(info)
        return 0
    return _list(args.json)


def _print_summary(info: dict) -> None:
    prov = info["provenance"]
    print(f"profile {info['name']} (schema {info['schema_version']}): target {prov['target']}, "
          f"draft {prov['draft']}")  # fmt: skip
    print(f"source: {prov['source']}; device: {prov['device']}; dtype: {prov['dtype']}; date: {prov['date']}")
    print(f"methods ({len(info['methods'])}): {', '.join(info['methods']) or 'none'}")
    print(f"scenarios ({len(info['scenarios'])}): {', '.join(info['scenarios']) or 'none'}")
    gammas = ", ".join(map(str, info["gammas_measured"])) or "none (traces only)"
    print(f"tau measured at gamma: {gammas}; entries with greedy traces: {info['traced_entries']}")
    print(f"latency: {info['latency']}")
    s = info["greedy_check_summary"]
    checks = f"check rows: {info['checks']} ({info['sampled_checks']} sampled)"
    if s:
        checks += (
            f"; greedy: median |err| {s['median_abs_rel_err']:.1%}, max {s['max_abs_rel_err']:.1%} over "
            f"{s['rows']} rows"
        )
    print(checks)


def _list(as_json: bool) -> int:
    items = []
    for name, path in shipped_profiles().items():
        try:
            prof = load_profile(str(path))
        except SpecsimError as err:
            print(f"specsim: warning: shipped profile {name} does not load: {err}", file=sys.stderr)
            continue
        methods = list(dict.fromkeys(a.method for a in prof.acceptance))
        scenarios = list(dict.fromkeys(a.scenario for a in prof.acceptance))
        items.append(
            {
                "name": name,
                "schema_version": prof.schema_version,
                "cost_model": prof.latency.published_ratio is None,
                "source": prof.provenance.source,
                "device": prof.provenance.device,
                "target": prof.provenance.target,
                "draft": prof.provenance.draft,
                "methods": methods,
                "scenarios": scenarios,
                "path": str(path),
                "default": name == DEFAULT_PROFILE,
            }
        )
    if as_json:
        print(dumps_json(items))
        return 0
    for it in items:
        src = it["source"] if it["source"] == "measured" else "published"
        extra = (
            f"{len(it['methods'])} methods x {len(it['scenarios'])} scenarios"
            if it["methods"]
            else "latency only"
        )
        schema = f"schema {it['schema_version']}" + (", cost model" if it["cost_model"] else "")
        print(
            f"{it['name']}{' (default)' if it['default'] else ''}: {it['target']} / {it['draft']}; "
            f"{src}; {it['device']}; {extra}; {schema}"
        )
    return 0
