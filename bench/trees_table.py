"""Benchmark: best chain vs best token tree vs best draft-length policy, per method × images, predicted and
measured on this CPU and planned for three GPUs (the table of issue 16).

Per pair (a preset and its profile, which must hold latency with tree grids and top-k acceptance):

1. predicted (cost-model walk over every traced request's exact greedy schedule): the best γ, the best tree
   (Sequoia-style search with the measured Tv(n)), and the best of the candidate policies, per method ×
   scenario;
2. measured (``--measure``): ``specsim check`` runs those γ, trees and policies for real, in rounds with 95%
   half-widths; the replay == engine counts and the median |err| of the tree and policy rows are printed;
3. planned: the method's per-rank acceptance on three GPUs (vLLM runtime, batch 1, the pair's architecture):
   the best γ, the best tree (roofline search) and the predicted-best policy, each priced on its replayed
   schedule.

Prepare each profile first (a quiet window), e.g. for the reference pair and the zoo:

    specsim calibrate latency --preset qwen2.5-coder-0.5b-1.5b --threads 1 --tree-sizes 2,4,8,16,32,64 \\
        --out ref.json
    specsim calibrate acceptance --preset qwen2.5-coder-0.5b-1.5b --threads 1 --top-k 8 --limit 6 \\
        --out ref.json
    python bench/trees_table.py --pair qwen2.5-coder-0.5b-1.5b=ref.json --pair zoo=zoo.json --measure \\
        --limit 6 --max-new-tokens 64 --json trees_table.json
    python bench/trees_table.py --pair zoo=zoo.json --method T --limit 1 --max-new-tokens 8 --measure \\
        --max-rounds 2  # tiny
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402

POLICIES = (
    "heuristic:2,max={m}",
    "heuristic:4,max={m}",
    "confidence:0.3,gamma={m}",
    "confidence:0.5,gamma={m}",
    "confidence:0.7,gamma={m}",
)
DEVICES = ("l4", "a100-80gb-sxm", "h100-sxm")
ARCH = {"zoo": (ROOT / "calibrate/zoo/weights/target", ROOT / "calibrate/zoo/weights/draft")}


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--pair",
        action="append",
        required=True,
        metavar="PRESET=PROFILE",
        help="a pair preset and its profile (latency with tree grids, top-k acceptance); repeatable",
    )
    p.add_argument(
        "--method", action="append", default=None, help="methods (default: every method in the profile)"
    )
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        help="candidate policies ({m} = the profile's largest "
        "gamma; default: heuristic 2 and 4, confidence 0.3, 0.5, 0.7)",
    )
    p.add_argument("--measure", action="store_true", help="run `specsim check` on the chosen runs (heavy)")
    p.add_argument(
        "--limit", type=number_arg("size", integer=True), default=None, help="prompts per check (the first N)"
    )
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=64)
    p.add_argument("--max-rounds", type=number_arg("repeats", integer=True), default=4)
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    p.add_argument(
        "--device", action="append", default=None, help=f"GPUs to plan for (default {', '.join(DEVICES)})"
    )
    p.add_argument("--json", default=None, help="also write the rows here")
    return p.parse_args(argv)


def _predicted(profile, entry, policies: list) -> dict:
    """The best γ, best tree and best candidate policy of one entry, predicted."""
    from specsim.predict.predict_drafts import best_tree_for, compare

    cmp = compare(profile, [entry], range(1, profile.latency.cost_model.max_gamma + 1), policies)[0]
    choice, tree = best_tree_for(profile, entry)
    known = [p for p in cmp.drafts if p.speedup is not None]
    policy = max(known, key=lambda p: p.speedup) if known else None
    return {
        "gamma": cmp.best_chain.gamma,
        "chain_pred": cmp.best_chain.speedup,
        "tree": str(choice.tree),
        "tree_pred": tree.speedup,
        "policy": None if policy is None else policy.draft.removeprefix("policy:"),
        "policy_pred": None if policy is None else policy.speedup,
    }


def _check(preset: str, path: str, rows: list[dict], args) -> dict:
    """Run `specsim check` on every chosen γ, tree and policy of a pair; its JSON output."""
    from specsim.cli.main import main

    gammas = ",".join(sorted({str(r["gamma"]) for r in rows}, key=int))
    argv = [
        "check",
        "--preset",
        preset,
        "--profile",
        path,
        "--gamma",
        gammas,
        "--threads",
        str(args.threads),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--max-rounds",
        str(args.max_rounds),
        "--json",
        "--no-progress",
    ]
    argv += [x for t in sorted({r["tree"] for r in rows}) for x in ("--tree", t)]
    argv += [x for p in sorted({r["policy"] for r in rows if r["policy"]}) for x in ("--policy", p)]
    argv += [x for m in dict.fromkeys(r["method"] for r in rows) for x in ("--method", m)]
    argv += ["--limit", str(args.limit)] if args.limit else []
    print("$ specsim " + " ".join(argv), file=sys.stderr)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if main(argv) != 0:
            raise SystemExit(f"failed: specsim {' '.join(argv)}")
    return json.loads(out.getvalue())


def _measured(report: dict, rows: list[dict]) -> None:
    """Fill each row's measured speedups (and half-widths) from a check report."""
    by = {(c["method"], c["scenario"], c.get("draft") or str(c["gamma"])): c for c in report["rows"]}
    for r in rows:
        for kind, key in (
            ("chain", str(r["gamma"])),
            ("tree", f"tree:{r['tree']}"),
            ("policy", f"policy:{r['policy']}"),
        ):
            c = by.get((r["method"], r["scenario"], key))
            r[f"{kind}_meas"] = None if c is None else c["speedup_measured"]
            # the check's own walk over the measured prompts: --limit may run fewer than were traced
            r[f"{kind}_check_pred"] = None if c is None else c["speedup_predicted"]
            r[f"{kind}_hw"] = None if c is None else c.get("speedup_halfwidth")


def _planned(preset: str, profile, entry, row: dict, devices: list[str]) -> None:
    """Fill each row's GPU speedups: best γ, best tree, the row's policy, on replayed schedules."""
    from specsim.draft_shapes.draft_plans import draft_plan
    from specsim.draft_shapes.policies import parse_policy
    from specsim.draft_shapes.tree_replay import TreeMethod, rank_acceptance
    from specsim.draft_shapes.trees import parse_tree
    from specsim.hardware.device import load_device
    from specsim.hardware.model_resolution import load_model_spec
    from specsim.hardware.runtime import load_runtime
    from specsim.hardware.tree_plan import plan_trees, replay_speedup
    from specsim.presets import pair_models

    names = ARCH.get(preset) or pair_models(preset)
    target, draft = (load_model_spec(str(n)) for n in names)
    traces = [t for t in entry.traces if t.draft_rank is not None]
    ctx = sum((t.prompt_tokens or 0) + len(t.match) / 2 for t in traces) / len(traces)
    rt, k = load_runtime("vllm"), entry.draft_batch_size
    method = TreeMethod(entry.method, rank_acceptance(traces, 8), k)
    for name in devices:
        dev = load_device(name)

        def speed(d, dev=dev):
            return replay_speedup(
                target, draft, dev, rt, [draft_plan(d, t) for t in traces], context=ctx, draft_batch_size=k
            )

        best = plan_trees(target, draft, [dev], [method], efficiency=rt, contexts=(int(ctx),), n_max=64)[0]
        chains = {g: speed(g) for g in range(1, 9)}
        g = max(chains, key=chains.get)
        row[name] = {
            "gamma": g,
            "chain": chains[g],
            "tree": best.best_tree,
            "tree_speedup": speed(parse_tree(best.best_tree)),
            "policy": row["policy"],
            "policy_speedup": speed(parse_policy(row["policy"])) if row["policy"] else None,
        }


def _fmt(x, hw=None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" + (f"±{x * hw:.2f}" if hw else "")


def _print(rows: list[dict], devices: list[str]) -> None:
    head = [
        "pair",
        "method",
        "images",
        "chain γ",
        "pred",
        "meas",
        "tree",
        "pred",
        "meas",
        "policy",
        "pred",
        "meas",
    ]
    head += [f"{d} γ/tree/policy" for d in devices]
    lines = [head]
    for r in rows:
        pred = {k: r.get(f"{k}_check_pred") or r[f"{k}_pred"] for k in ("chain", "tree", "policy")}
        cells = [
            r["pair"],
            r["method"],
            str(r["images"]),
            str(r["gamma"]),
            _fmt(pred["chain"]),
            _fmt(r.get("chain_meas"), r.get("chain_hw")),
            r["tree"],
            _fmt(pred["tree"]),
            _fmt(r.get("tree_meas"), r.get("tree_hw")),
            r["policy"] or "-",
            _fmt(pred["policy"]),
            _fmt(r.get("policy_meas"), r.get("policy_hw")),
        ]
        cells += [
            f"{_fmt(r[d]['chain'])} (γ={r[d]['gamma']}) / {_fmt(r[d]['tree_speedup'])} ({r[d]['tree']}) / "
            f"{_fmt(r[d]['policy_speedup'])}"
            for d in devices
        ]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    if any(r.get("chain_check_pred") for r in rows):
        print(
            "pred: the cost-model walk over the prompts measured (the best gamma, tree and policy were "
            "chosen over every traced prompt)"
        )


def _summary(reports: dict) -> None:
    """Replay == engine for trees and policies, and the median |err| of their rows, per pair."""
    import numpy as np

    for pair, rep in reports.items():
        for kind in ("tree", "policy"):
            agree = rep.get(f"{kind}_replay_equals_engine", {}).values()
            same, total = sum(a[0] for a in agree), sum(a[1] for a in agree)
            errs = [
                abs(c["speedup_predicted"] / c["speedup_measured"] - 1)
                for c in rep["rows"]
                if (c.get("draft") or "").startswith(kind + ":")
            ]
            line = f"{pair}: {kind}s: replay == engine for {same}/{total} (prompt, {kind})"
            if errs:
                line += (
                    f"; predicted vs measured decode speedup median |err| {np.median(errs):.1%} over "
                    f"{len(errs)} rows"
                )
            print(line)
        chains = [
            abs(c["speedup_predicted"] / c["speedup_measured"] - 1) for c in rep["rows"] if not c.get("draft")
        ]
        if chains:
            print(
                f"{pair}: chains: predicted vs measured decode speedup median |err| "
                f"{np.median(chains):.1%} over {len(chains)} rows"
            )


def main(argv=None) -> int:
    from specsim.draft_shapes.policies import parse_policy
    from specsim.profiles import load_profile

    args = parse_args(argv)
    devices = args.device or list(DEVICES)
    rows, reports = [], {}
    for spec in args.pair:
        preset, _, path = spec.partition("=")
        profile = load_profile(path)
        m = profile.latency.cost_model.max_gamma
        policies = [parse_policy(p.format(m=m)) for p in (args.policy or POLICIES)]
        pair_rows = []
        for entry in profile.select_entries(args.method):
            row = {
                "pair": preset,
                "method": entry.method,
                "scenario": entry.scenario,
                "images": entry.images_per_prompt,
            } | _predicted(profile, entry, policies)
            _planned(preset, profile, entry, row, devices)
            pair_rows.append(row)
        if args.measure:
            reports[preset] = _check(preset, path, pair_rows, args)
            _measured(reports[preset], pair_rows)
        rows += pair_rows
    _print(rows, devices)
    _summary(reports)
    if args.json:
        from specsim.jsonio import write_json_atomic

        write_json_atomic(args.json, {"rows": rows, "checks": reports})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
