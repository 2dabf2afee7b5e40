"""``specsim check --serve-rates … --runtime llama.cpp`` (called by :mod:`calibrate.cli.llama_cpp_handlers`):
checks, runs llama-server under load at each rate (target-only and SD), writes and prints the rows."""

from __future__ import annotations

import sys
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.jsonio import dumps_json


def check_slots(profile, slots: int) -> None:
    """SpecsimError when --max-num-seqs is beyond the profile's llama-server batched grids."""
    from specsim.serve.llama_step_cost import LlamaServerStepCost

    LlamaServerStepCost.from_profile(profile).passes.check_batch(slots, "--max-num-seqs")


def cmd_serve_llama(args, profile, path, entry, gammas, threads, setup) -> int:
    """The serving check of :mod:`calibrate.llama_cpp.serve_check`: each rate and side once a round,
    --min-rounds rounds, then on to --halfwidth or --max-rounds (``setup``:
    :func:`calibrate.llama_cpp.models.setup_from_args` of the command's flags, every flag checked first)."""
    from calibrate.llama_cpp.check_runs import keep_runs
    from calibrate.llama_cpp.serve_check import run_serve_check, serve_rows, serve_settings
    from specsim.check.serve_comparison import serve_summary, serve_table
    from specsim.profiles import save_profile

    traces = {t.prompt_id: t for t in entry.traces}
    llama, target, draft, name, prompts, note = setup
    missing = [p.prompt_id for p in prompts if p.prompt_id not in traces]
    if missing:
        raise SpecsimError(f"--profile {args.profile}: no llama.cpp trace of prompt {missing[0]!r}")
    ids = [list(traces[p.prompt_id].prompt_ids) for p in prompts]
    longest = max(len(i) for i in ids) + args.max_new_tokens + max(gammas) + 16
    settings = serve_settings(target, draft, threads, gammas, args.max_num_seqs, args.max_num_seqs * longest)
    partial = Path(f"{path}.llama-serve.partial.json")
    runs, done, client = run_serve_check(
        llama,
        settings,
        ids,
        rates=args.serve_rates,
        requests=args.serve_requests,
        new_tokens=args.max_new_tokens,
        seed=args.seed,
        min_rounds=args.min_rounds,
        max_rounds=args.max_rounds,
        halfwidth=args.halfwidth,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        partial=partial,
        niceness=args.renice,
    )
    rows = serve_rows(
        profile,
        entry,
        runs,
        settings,
        args.serve_rates,
        [traces[p.prompt_id] for p in prompts],
        slots=args.max_num_seqs,
        new_tokens=args.max_new_tokens,
        seed=args.seed,
        scenario=entry.scenario,
    )
    kept = None
    if done and not args.no_write:
        save_profile(profile.with_serve_checks(rows), path)
        kept = keep_runs(partial)
    split = f"server {threads} threads, one asyncio client thread ({client:.3f} cores)"
    if args.json:
        print(dumps_json({"rows": [r.to_json() for r in rows], "finished": done, "split": split}))
        return 0
    if rows:
        print(serve_table(rows))
        print(dumps_json(serve_summary(rows)))
    state = "finished" if done else f"not finished: rerun the same command to go on ({partial})"
    state += f" (raw runs: {kept})" if kept else ""
    print(f"{split}; {state}; {note or 'normal priority'}", file=sys.stderr)
    return 0
