"""Benchmark: coverage of the sampled check's 95% prediction intervals on tiny seeded pairs (draft = the
target plus weight noise), the way ``specsim check --temperature T`` computes them.

Per pair: its latency cost model (calibrate.measure.latency_plan), then per temperature: acceptance traces at
that T (β teacher-forced on the target's greedy output and, with --sample-paths K, the acceptance along K
seeded sampled target paths per prompt, as ``calibrate acceptance --sample-paths K`` stores them),
seeded sampled runs (every prompt × γ once per seed), and one row per γ. Prints each row (τ and speedup:
Monte Carlo mean, 95% interval, measured, inside?) and the share of rows inside over all pairs and
temperatures.

    python bench/sampled_check_tiny.py                           # 3 pairs x 2 T x 5 gammas, a few minutes
    python bench/sampled_check_tiny.py --sample-paths 0          # beta on the greedy output only
    python bench/sampled_check_tiny.py --seeds 10 --json /tmp/sampled_tiny.json
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--noise", default="0.05,0.2,0.5", help="draft weight noise of each pair (default 0.05,0.2,0.5)"
    )
    p.add_argument("--temperature", default="1.0,0.7", help="temperatures (default 1.0,0.7)")
    p.add_argument("--gamma", default="1,2,3,4,6")
    p.add_argument("--prompts", type=number_arg("size", integer=True), default=8)
    p.add_argument("--new-tokens", type=number_arg("output_tokens", integer=True), default=32)
    p.add_argument(
        "--seeds", type=number_arg("repeats", integer=True), default=6, help="runs per prompt (default 6)"
    )
    p.add_argument("--seed", type=number_arg("seed", integer=True), default=0)
    p.add_argument(
        "--sample-paths",
        type=number_arg("size", integer=True, zero_ok=True),
        default=8,
        help="sampled target paths per prompt (default 8; 0: beta on the greedy output only)",
    )
    p.add_argument("--json", default=None, help="also write every row and the coverage here")
    return p.parse_args(argv)


def _pair(k: int, noise: float, args, folder: Path):
    """(models, requests, profile with the pair's cost model) of tiny pair ``k``."""
    from calibrate.measure import latency_plan as L
    from calibrate.models.loaded_model import LoadedModel
    from calibrate.run.engine import Request
    from specsim.profiles import load_profile
    from tests.tiny_pair import tiny_pair, tiny_prompts

    target, draft = tiny_pair(seed=k, noise=noise)
    wrap = {
        role: LoadedModel(
            model=m,
            tokenizer=None,
            name=f"tiny-llama-{role}-{noise}",
            kind="causal",
            weights="random",
            device="cpu",
            dtype="float32",
        )
        for role, m in (("target", target), ("draft", draft))
    }
    reqs = [
        Request(ids, prompt_id=f"p{i}")
        for i, ids in enumerate(tiny_prompts(n=args.prompts, seed=5 + k, max_len=24))
    ]
    lengths = [r.input_ids.shape[1] for r in reqs]
    gammas = [int(g) for g in args.gamma.split(",")]
    plan = L.default_plan(
        wrap["target"],
        **L.workload_plan(lengths, lengths, args.new_tokens, gammas),
        max_repeats=40,
        target_rel_halfwidth=0.03,
    )
    path = folder / f"pair{k}.json"
    L.calibrate_latency(wrap, plan, path, progress=False, name=f"tiny-pair-noise-{noise}")
    return wrap, reqs, load_profile(str(path))


def _rows(wrap, reqs, prof, temperature: float, args, rng) -> list:
    from calibrate.measure.acceptance_traces import acceptance_entry, acceptance_trace, target_paths
    from calibrate.measure.sampled_check_runs import run_sampled_check
    from calibrate.workload import run_setup as C
    from calibrate.workload.prompt_sets import Prompt
    from specsim.check.sampled import sampled_row

    gammas = [int(g) for g in args.gamma.split(",")]
    kw = {"max_new_tokens": args.new_tokens, "temperature": temperature}
    traces = [
        acceptance_trace(
            wrap["target"],
            wrap["draft"],
            r,
            **kw,
            paths=target_paths(wrap["target"], r, paths=args.sample_paths, seed=args.seed, **kw),
        )
        for r in reqs
    ]
    entry = acceptance_entry(
        traces, method="plain", scenario=f"{prof.name}-T{temperature:g}", notes=f"beta at T={temperature}"
    )
    setup = C.Setup(
        target=wrap["target"],
        draft=wrap["draft"],
        prompts=[Prompt(id=r.prompt_id, text="") for r in reqs],
        requests=reqs,
        eos=None,
        name="tiny",
        methods=["plain"],
    )
    runs = run_sampled_check(
        setup,
        gammas,
        temperature=temperature,
        seeds=args.seeds,
        max_new_tokens=args.new_tokens,
        seed=args.seed,
    )
    ids = [r.prompt_id for r in reqs]
    specs = [runs.specs[("plain", i)] for i in ids]
    return [
        sampled_row(prof, entry, g, specs, runs.measured("plain", g, ids), temperature=temperature, rng=rng)
        for g in gammas
    ]


def main(argv=None) -> int:
    args = parse_args(argv)  # bad input is refused before torch and the models load

    import numpy as np
    import torch

    from specsim.check.check_tables import coverage, coverage_line, sampled_table
    from specsim.jsonio import write_json_atomic

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, noise in enumerate(float(x) for x in args.noise.split(",")):
            wrap, reqs, prof = _pair(k, noise, args, Path(tmp))
            for temperature in (float(t) for t in args.temperature.split(",")):
                new = _rows(wrap, reqs, prof, temperature, args, rng)
                print(f"\npair noise {noise}, T={temperature:g}:\n{sampled_table(new)}", flush=True)
                rows += new
    print(f"\nall pairs and temperatures: {coverage_line(rows)}")
    if args.json:
        write_json_atomic(args.json, {"rows": [r.to_json() for r in rows], "coverage": coverage(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
