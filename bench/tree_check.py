"""Benchmark: chain vs token tree vs dynamic draft length on one pair, measured block counts next to the
greedy replay's prediction from top-k traces, and decode-phase ms per token next to target-only decoding.

Per prompt: a top-k acceptance trace per method (K = the widest tree's branching), target-only decoding,
then every chain γ, tree and policy (greedy), then target-only again. Prints per run: blocks measured vs
replayed (they must be equal), τ, draft and verify ms per block, decode ms per token, speedup, and
whether every output equals the target's greedy output. Exit status 1 if either check fails.

    python bench/tree_check.py --preset zoo --method MT --limit 2 --max-new-tokens 16 --threads 1   # tiny
    python bench/tree_check.py --preset qwen2.5-coder-0.5b-1.5b --limit 12 --max-new-tokens 64 --threads 1 \\
        --gamma 2,4 --tree 4,2,1 --tree 2,2,2,1 --tree 8,1,1 --policy heuristic:5 \\
        --policy confidence:0.4,gamma=8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from calibrate.workload import run_setup as C  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="zoo")
    p.add_argument(
        "--method", default=None, help="drafting method (default: plain for text pairs, T for VLMs)"
    )
    p.add_argument("--prompts", default=None)
    p.add_argument("--limit", type=number_arg("size", integer=True), default=2)
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=16)
    p.add_argument("--gamma", default="3", help="chain gammas, comma-separated")
    p.add_argument(
        "--tree", action="append", default=None, help="tree spec, repeatable (default 4,2,1 and 2,2,2)"
    )
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        help="draft-length policy, repeatable (default heuristic:5 and confidence:0.4,gamma=6)",
    )
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=1)
    p.add_argument("--json", default=None, help="also write the rows here")
    return p.parse_args(argv)


def _runs(args):
    from specsim.draft_shapes.policies import parse_policy
    from specsim.draft_shapes.trees import parse_tree
    from specsim.report import parse_int_list

    runs = [("chain", f"gamma={g}", g) for g in parse_int_list(args.gamma, name="--gamma")]
    runs += [("tree", t, parse_tree(t)) for t in (args.tree or ["4,2,1", "2,2,2"])]
    runs += [
        ("policy", p, parse_policy(p)) for p in (args.policy or ["heuristic:5", "confidence:0.4,gamma=6"])
    ]
    return runs


def _replayed_blocks(kind, spec, trace) -> int:
    from specsim.acceptance.replay import replay_blocks_per_prompt
    from specsim.draft_shapes.policies import replay_policy_blocks
    from specsim.draft_shapes.tree_replay import replay_tree_blocks

    if kind == "chain":
        return int(replay_blocks_per_prompt([trace], spec)[0])
    if kind == "tree":
        return len(replay_tree_blocks(trace.draft_rank, spec))
    return len(replay_policy_blocks(trace, spec))


def _decode(setup, method, kind, spec, req, kw):
    from calibrate.drafting import tree_drafting
    from calibrate.run.engine import speculative_decode
    from calibrate.run.tree_engine import tree_decode

    drafter = setup.drafter(method)
    if kind == "tree":
        return tree_decode(setup.target, tree_drafting(drafter), req, tree=spec, **kw)
    return speculative_decode(setup.target, drafter, req, gamma=spec, **kw)


def _load(args):
    """The pair, prompts and one drafting method (plain for text pairs, T by default for image prompts)."""
    from specsim.errors import SpecsimError

    ns = argparse.Namespace(
        preset=args.preset,
        target=None,
        draft=None,
        random_weights=False,
        prompts=args.prompts,
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        device="cpu",
        dtype="float32",
        threads=args.threads,
        no_progress=True,
        captioner=None,
        caption_prefix=None,  # the acceptance default ("Image: "), read by caption drafting only
        method=[args.method] if args.method else None,
    )
    try:
        return C.load_setup(ns, C.read_workload(ns))
    except SpecsimError:
        if args.method:
            raise
        ns.method = ["T"]  # image prompts need a multimodal method; text-only drafting is the default there
        return C.load_setup(ns, C.read_workload(ns))


def _measure(setup, runs, kw, top_k):
    """Per run: summed blocks, replayed blocks, tokens, decode/draft/verify ms, output identity; and the
    target-only ms and tokens (before and after each prompt's runs)."""
    from calibrate.drafting import PLAIN
    from calibrate.measure.acceptance_traces import acceptance_trace, drafter_trace
    from calibrate.run.engine import target_decode

    method = setup.methods[0]
    totals = {
        name: {
            "blocks": 0,
            "replayed": 0,
            "tokens": 0,
            "ms": 0.0,
            "draft": 0.0,
            "verify": 0.0,
            "lossless": True,
        }
        for _, name, _ in runs
    }
    base_ms = base_tokens = 0
    for kind, _, spec in runs:  # warm-up (first-call allocations, mask paths), thrown away
        _decode(setup, method, kind, spec, setup.requests[0], kw | {"max_new_tokens": 4})
    target_decode(setup.target, setup.requests[0], **kw | {"max_new_tokens": 4})
    for req in setup.requests:
        pt = (
            acceptance_trace(setup.target, setup.draft, req, top_k=top_k, **kw)
            if method == PLAIN
            else drafter_trace(setup.target, setup.drafter(method), req, top_k=top_k, **kw)
        )
        for _ in range(2):  # target-only before and after, so drift hits both sides
            base = target_decode(setup.target, req, **kw)
            base_ms += base.decode_ms
            base_tokens += len(base.tokens)
        for kind, name, spec in runs:
            out = _decode(setup, method, kind, spec, req, kw)
            t = totals[name]
            t["lossless"] &= out.tokens == pt.output_tokens  # == the target's greedy output
            t["blocks"] += len(out.blocks)
            t["replayed"] += _replayed_blocks(kind, spec, pt.trace)
            t["tokens"] += len(out.tokens)
            t["ms"] += out.decode_ms
            t["draft"] += sum(b.draft_ms for b in out.blocks)
            t["verify"] += sum(b.verify_ms for b in out.blocks)
    return totals, base_ms / base_tokens


def _rows(runs, totals, base_per_token) -> list[dict]:
    rows = []
    for kind, name, _ in runs:
        t = totals[name]
        per_token = t["ms"] / t["tokens"]
        rows.append(
            {
                "kind": kind,
                "run": name,
                "blocks": t["blocks"],
                "replayed_blocks": t["replayed"],
                "tau": t["tokens"] / t["blocks"],
                "draft_ms_per_block": t["draft"] / t["blocks"],
                "verify_ms_per_block": t["verify"] / t["blocks"],
                "ms_per_token": per_token,
                "speedup": base_per_token / per_token,
                "output_equals_target": t["lossless"],
            }
        )
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)  # bad input is refused before torch and the models load

    import torch

    torch.set_num_threads(args.threads)
    runs = _runs(args)
    top_k = max([max(len(k) for k in spec.children()) for kind, _, spec in runs if kind == "tree"] + [1])
    setup = _load(args)
    kw = {"max_new_tokens": args.max_new_tokens, "eos_token_id": setup.eos}
    totals, base_per_token = _measure(setup, runs, kw, top_k)
    rows = _rows(runs, totals, base_per_token)
    print(
        f"{setup.target.name} / {setup.draft.name}, method {setup.methods[0]}, "
        f"{len(setup.requests)} prompts, {args.max_new_tokens} new tokens; "
        f"target-only {base_per_token:.2f} ms/token"
    )
    print(
        f"{'run':<34}{'blocks':>7}{'replay':>7}{'tau':>7}{'draft/blk':>10}{'verify/blk':>11}{'ms/token':>9}"
        f"{'speedup':>8}"
    )
    for r in rows:
        print(
            f"{r['kind'] + ' ' + r['run']:<34}{r['blocks']:>7}{r['replayed_blocks']:>7}{r['tau']:>7.2f}"
            f"{r['draft_ms_per_block']:>10.1f}{r['verify_ms_per_block']:>11.1f}{r['ms_per_token']:>9.2f}"
            f"{r['speedup']:>8.2f}"
        )
    same = sum(r["blocks"] == r["replayed_blocks"] for r in rows)
    lossless = sum(r["output_equals_target"] for r in rows)
    print(
        f"replay == engine (blocks summed over prompts) for {same}/{len(rows)} runs; "
        f"output == target greedy for {lossless}/{len(rows)}"
    )
    if args.json:
        from specsim.jsonio import write_json_atomic

        write_json_atomic(
            args.json, {"method": setup.methods[0], "target_ms_per_token": base_per_token, "rows": rows}
        )
    return 0 if same == lossless == len(rows) else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
