"""``calibrate latency --engine llama.cpp``, ``calibrate acceptance --engine llama.cpp`` and ``check
--runtime llama.cpp`` (called by the commands' modules): checks, calls into :mod:`calibrate.llama_cpp`,
prints. Every bad value is one line before a binary runs."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from calibrate.cli.latency_checks import request_flag
from calibrate.cli.llama_cpp_options import check_threads, checked_ngram, refuse_transformers_flags
from calibrate.llama_cpp.models import setup_from_args
from specsim.errors import SpecsimError
from specsim.jsonio import check_writable, dumps_json

DEFAULT_DEPTHS = (32, 96, 192)
DEFAULT_PREFILL = (4, 8, 16, 32, 64, 128)
DEFAULT_GAMMAS = (1, 2, 3, 4, 5, 6)
HELD_OUT_PROMPTS = 2


def _command() -> str:
    return "specsim " + shlex.join(sys.argv[1:])


def cmd_latency_llama(args) -> int:
    """Measure the pass grids and the per-block terms through llama.cpp into --out, its raw records kept
    beside it (--request-batches: also the batched grids of llama-server's slots; --batched-only: those
    alone, into a llama.cpp profile; --refit: fit the kept records again, timing nothing)."""
    from calibrate.llama_cpp.latency import (
        LatencyPlan,
        add_batched,
        measure_latency,
        save_latency,
        summary_lines,
    )
    from calibrate.llama_cpp.pass_grids import GridPlan
    from calibrate.llama_cpp.serve_grids import ServePlan
    from calibrate.llama_cpp.server import LlamaServer, ServerConfig

    refuse_transformers_flags(args, "latency", "--engine llama.cpp")
    check_writable(args.out, "--out")
    threads, ngram = check_threads(args), checked_ngram(args)
    gammas = tuple(sorted(set(args.gammas or DEFAULT_GAMMAS)))
    if gammas[-1] > 15:
        raise SpecsimError(f"--gammas: llama.cpp's grid is timed up to gamma 15, got {gammas[-1]}")
    depths = tuple(sorted(set(args.contexts or DEFAULT_DEPTHS)))
    prefill = tuple(sorted(set(args.prefill_tokens or DEFAULT_PREFILL)))
    if args.batched_only and not args.request_batches:
        raise SpecsimError("--batched-only: needs --request-batches")
    records = Path(f"{args.out}.llama-latency.records.json")
    if args.refit and (args.batched_only or args.request_batches):
        raise SpecsimError("--refit: fits the one-request terms again; not with --request-batches")
    if args.refit and not records.exists():
        raise SpecsimError(f"--refit: no records at {records} (a finished calibration keeps them there)")
    serve = None
    if args.request_batches:
        serve = ServePlan(
            tuple(sorted(set(args.request_batches))),
            tuple(sorted(set(request_flag(args, "request_gammas")))),
            depths,
            threads,
            min(args.min_repeats or 3, 5),
            args.renice,
        )
    reps = args.min_repeats or 5
    llama, target, draft, _, prompts, note = setup_from_args(args, prompts_limit=None)
    if args.batched_only:
        path, seconds = add_batched(args.out, llama, target, draft, serve)
        print(f"wrote {path}: llama-server's batched grids at B = {list(serve.batches)} in {seconds:.0f} s")
        return 0
    # The set's last prompts price each γ's real blocks: a check of its first --limit prompts runs others.
    held = prompts[-HELD_OUT_PROMPTS:] if len(prompts) > HELD_OUT_PROMPTS else []
    with LlamaServer(llama, ServerConfig(target, threads)) as server:
        ids = server.tokenize_chat(prompts[0].text)
        held_ids = [server.tokenize_chat(p.text) for p in held]
    grid = GridPlan(depths, gammas[-1], prefill, threads, reps, args.renice)
    plan = LatencyPlan(grid, gammas, ngram=ngram, held_out=tuple(p.prompt_id for p in held))
    notes = "; ".join(x for x in (_command(), note) if x)
    partial = records if args.refit else Path(f"{args.out}.llama-latency.partial.json")
    kw = {"niceness": args.renice, "notes": notes, "held_out": held_ids, "kept": args.refit}
    result = measure_latency(llama, target, draft, plan, ids, partial=partial, **kw)
    path = save_latency(args.out, result.section)
    partial.replace(records)  # kept: --refit fits them again after a change to the fit
    if serve is not None:
        add_batched(path, llama, target, draft, serve)
    if args.json:
        print(dumps_json(result.section.to_json()))
    else:
        print("\n".join(summary_lines(result, path)))
    return 0


def cmd_acceptance_llama(args) -> int:
    """Greedy traces from llama.cpp's logits into --out."""
    from calibrate.llama_cpp.latency import save_traces
    from calibrate.llama_cpp.traces import trace_prompts

    refuse_transformers_flags(args, "acceptance", "--engine llama.cpp")
    check_writable(args.out, "--out")
    threads = check_threads(args)
    if args.method not in (None, ["plain"]):
        raise SpecsimError(f"--method: llama.cpp drafts with a text model only (plain), got {args.method}")
    llama, target, draft, name, prompts, _ = setup_from_args(args, prompts_limit=args.limit)

    def bar(i, n):
        if not args.no_progress:
            print(f"\rllama.cpp traces: {i}/{n} prompts", end="" if i < n else "\n", file=sys.stderr)

    traces = trace_prompts(llama, target, draft, prompts, args.max_new_tokens, threads, bar)
    path, entry = save_traces(args.out, traces, args.scenario or name, _command(), target, draft)
    rate = sum(sum(t.match[1:]) for t in traces) / max(sum(len(t.match) - 1 for t in traces), 1)
    print(
        f"wrote {path}: {len(traces)} llama.cpp traces of {entry.method}/{entry.scenario} "
        f"({args.max_new_tokens} tokens each; draft argmax = target token at {rate:.1%})"
    )
    return 0


def _held_out(args) -> tuple:
    """--remeasure's prompts: the prompt set's last :data:`HELD_OUT_PROMPTS`, as the calibration's real
    blocks take them; SpecsimError where the checked prompts (its first --limit) reach them."""
    from calibrate.llama_cpp.models import workload_prompts

    name, every = workload_prompts(args.prompts, None, args.allow_outside_images)
    checked = every[: args.limit] if args.limit else every
    held = tuple(every[-HELD_OUT_PROMPTS:])
    if len(every) <= HELD_OUT_PROMPTS or {p.prompt_id for p in held} & {p.prompt_id for p in checked}:
        raise SpecsimError(
            f"--remeasure: the held-out prompts are {name}'s last {HELD_OUT_PROMPTS}; expected --limit <= "
            f"{max(len(every) - HELD_OUT_PROMPTS, 0)} so the check runs others, got {len(checked)} prompts"
        )
    return held


def cmd_check_llama(args) -> int:
    """llama.cpp's own SD against its target-only decoding, one request at a time (or --serve-rates): every
    flag and the profile checked first, then the models and prompts once, then the runs."""
    from calibrate.cli.check_request import check_rounds, fill_serve_defaults
    from calibrate.llama_cpp.check_runs import (
        check_settings,
        keep_runs,
        llama_rows,
        remeasured_profile,
        run_llama_check,
    )
    from specsim.check.check_tables import check_table, rounds_note, terms_table
    from specsim.profiles import load_profile, resolve_profile_path, save_profile

    refuse_transformers_flags(args, "check", "--runtime llama.cpp")
    check_rounds(args)  # --max-new-tokens among them, as for this project's engines
    gammas, serving = sorted(args.gamma), args.serve_rates is not None
    threads = check_threads(args)
    if serving:
        if args.ngram is not None:
            raise SpecsimError("--ngram: applies one request at a time, not with --serve-rates")
        if args.remeasure:
            raise SpecsimError("--remeasure: applies one request at a time, not with --serve-rates")
        fill_serve_defaults(args)
    else:  # one request at a time: nothing is served, and nothing drawn
        served = {"--max-num-seqs": args.max_num_seqs, "--serve-requests": args.serve_requests}
        given = [f for f, v in (served | {"--seed": args.seed or None}).items() if v is not None]
        if given:
            raise SpecsimError(f"{given[0]}: applies with --serve-rates (one request at a time reads none)")
    path = resolve_profile_path(args.profile)
    if not args.no_write:
        check_writable(path, "--profile")
    profile = load_profile(str(path))
    model = profile.latency.forward_costs()
    if model.first_pass_drafts:
        raise SpecsimError(
            f"--profile {args.profile}: its latency is not llama.cpp's (calibrate latency --engine llama.cpp)"
        )
    model.check_gamma(gammas[-1])
    entry = profile.one_entry("plain", args.scenario)
    if serving:
        from calibrate.cli.llama_cpp_serve import check_slots, cmd_serve_llama

        check_slots(profile, args.max_num_seqs)
    ngram = checked_ngram(args)
    held = _held_out(args) if args.remeasure else ()
    setup = setup_from_args(args, prompts_limit=args.limit)
    if serving:
        return cmd_serve_llama(args, profile, path, entry, gammas, threads, setup)
    llama, target, draft, _, prompts, note = setup
    settings = check_settings(target, draft, threads, gammas, ngram)
    partial = Path(f"{path}.llama-check.partial.json")
    runs = run_llama_check(
        llama,
        settings,
        prompts,
        new_tokens=args.max_new_tokens,
        threads=threads,
        partial=partial,
        halfwidth=args.halfwidth,
        min_rounds=args.min_rounds,
        max_rounds=args.max_rounds,
        max_seconds=None if args.max_minutes is None else 60 * args.max_minutes,
        niceness=args.renice,
        held_out=held,
    )
    if held and runs.rounds:
        profile, line = remeasured_profile(profile, runs)
        print(f"re-measured between the check's rounds: {line}", file=sys.stderr)
    rows = llama_rows(profile, entry, runs, settings, gammas[0])
    done = runs.finished
    kept = None
    if not args.no_write and done:
        save_profile(profile.with_checks(rows), path)
        kept = keep_runs(partial)
    if args.json:
        print(
            dumps_json(
                {
                    "rows": [r.to_json() for r in rows],
                    "rounds": runs.rounds,
                    "seconds": runs.seconds,
                    "finished": done,
                }
            )
        )
        return 0
    more = rounds_note(rows, runs.rounds, runs.seconds, args.halfwidth)
    print(check_table(rows))
    terms = terms_table(rows)
    if terms:  # the check's own blocks against the profile's: drift between calibration and check shows here
        print("\n" + terms)
    state = "finished" if done else f"not finished: rerun the same command to go on ({partial})"
    state += f" (raw runs: {kept})" if kept else ""
    print(
        f"{runs.rounds} round(s) in {runs.seconds:.0f} s, {state}; {note or 'normal priority'}",
        file=sys.stderr,
    )
    if more:
        print(more, file=sys.stderr)
    return 0
