"""Write the small profile that notebooks/02 runs on in CI: a seeded tiny Llama pair (draft = noisy copy
of the target), latency measured with calibrate.measure.latency_plan, traces, and `specsim check` rows — real
measurements of toy models, produced in about a minute on one CPU thread.

    python bench/make_tiny_profile.py [--out notebooks/data/tiny_pair_profile.json]

With token trees and draft-length policies (notebooks/06): tree grids, top-k traces, and check rows for the
trees and policies next to the chain (a few minutes):

    python bench/make_tiny_profile.py --out notebooks/data/tiny_trees_profile.json --top-k 4 \
        --tree-sizes 1,2,4,8,16,24 --tree 4,2,1 --tree 2,2,2,1 --policy heuristic:2,max=8 \
        --policy confidence:0.6,gamma=8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "notebooks/data/tiny_pair_profile.json"))
    p.add_argument("--new-tokens", type=number_arg("output_tokens", integer=True), default=48)
    p.add_argument(
        "--top-k",
        type=number_arg("size", integer=True, zero_ok=True),
        default=0,
        help="top-k traces (draft ranks) for tree replay",
    )
    p.add_argument("--tree-sizes", default="", help="tree grid sizes, e.g. 1,2,4,8,16")
    p.add_argument("--tree", action="append", default=[], help="tree to time and check (repeatable)")
    p.add_argument("--policy", action="append", default=[], help="draft-length policy to check (repeatable)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)  # bad input is refused before torch and the models load

    import torch

    from calibrate.measure import latency_plan as L
    from calibrate.measure.acceptance_traces import acceptance_entry, acceptance_trace
    from calibrate.measure.check_runs import run_check
    from calibrate.measure.tree_grid_sweep import sweep_trees
    from calibrate.models.loaded_model import LoadedModel
    from calibrate.run.engine import Request
    from calibrate.workload import run_setup as C
    from calibrate.workload.prompt_sets import Prompt
    from specsim.check.check_tables import check_table, terms_table
    from specsim.check.comparison import check_row
    from specsim.draft_shapes.policies import parse_policy
    from specsim.draft_shapes.trees import parse_tree
    from specsim.profiles import load_profile, save_profile
    from tests.tiny_pair import tiny_pair, tiny_prompts

    torch.set_num_threads(1)
    target, draft = tiny_pair(seed=0, noise=0.05)
    wrap = {
        k: LoadedModel(
            model=m,
            tokenizer=None,
            name=f"tiny-llama-{k}",
            kind="causal",
            weights="random",
            device="cpu",
            dtype="float32",
        )
        for k, m in (("target", target), ("draft", draft))
    }
    reqs = [Request(ids, prompt_id=f"p{i}") for i, ids in enumerate(tiny_prompts(n=8, seed=5, max_len=24))]
    gammas = [1, 2, 3, 4, 6, 8]
    lengths = [r.input_ids.shape[1] for r in reqs]
    sizes = [int(x) for x in args.tree_sizes.split(",") if x]
    plan = L.default_plan(
        wrap["target"],
        **L.workload_plan(lengths, lengths, args.new_tokens, gammas),
        max_repeats=60,
        target_rel_halfwidth=0.03,
        trees=sweep_trees(sizes, args.tree),
    )
    drafts = [parse_tree(t) for t in args.tree] + [parse_policy(x) for x in args.policy]
    out = Path(args.out)
    out.unlink(missing_ok=True)
    L.calibrate_latency(
        wrap,
        plan,
        out,
        progress=False,
        name="tiny-pair",
        description="Seeded tiny Llama pair (vocab 96, 2 layers, hidden 48); draft = target + 5% "
        "weight noise. Toy numbers for the notebook and tests, not a real model.",
    )
    traces = [
        acceptance_trace(target, draft, r, max_new_tokens=args.new_tokens, top_k=args.top_k) for r in reqs
    ]
    entry = acceptance_entry(traces, method="plain", scenario="tiny", task="synthetic")
    prof = load_profile(str(out)).with_acceptance([entry])
    prompts = [Prompt(id=r.prompt_id, text="") for r in reqs]
    setup = C.Setup(
        target=wrap["target"],
        draft=wrap["draft"],
        prompts=prompts,
        requests=reqs,
        eos=None,
        name="tiny",
        methods=["plain"],
    )
    runs = run_check(setup, gammas + drafts, max_new_tokens=args.new_tokens, max_rounds=4)
    ids = [r.prompt_id for r in reqs]
    specs = [runs.specs[("plain", i)] for i in ids]
    rows = [check_row(prof, entry, g, specs, runs.measured("plain", g, ids)) for g in gammas + drafts]
    save_profile(prof.with_checks(rows), out)
    print(check_table(rows))
    print(terms_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
