"""The serving check against ``llama-server``: runs at each rate, target-only and SD, in rounds; and their
rows against ``specsim serve``'s simulation of the same requests priced from the llama.cpp profile.

Servers: ``-np`` slots (``max_num_seqs``), each with ``-c / -np`` KV cells (the longest request's), one per
side; finished runs go to a partial file a rerun goes on from. The prediction
(:func:`specsim.check.serve_comparison.predicted_run`) replays the runs' arrivals and prompts through
llama-server's scheduler, every step priced by :class:`specsim.serve.llama_step_cost`. More:
ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from calibrate.llama_cpp.check_runs import BASE, Setting, label_gamma
from calibrate.llama_cpp.serve_runs import run_load, workload_arrivals
from calibrate.llama_cpp.server import LlamaServer, ServerConfig
from calibrate.run.timing import out_of_time as past_budget
from specsim.check.serve_comparison import ServedTimes, headline_halfwidth, predicted_run, serve_check_row
from specsim.draft_shapes.block_plans import greedy_plan
from specsim.errors import SpecsimError
from specsim.jsonio import parse_json, read_text, write_json_atomic
from specsim.serve.llama_step_cost import LlamaServerStepCost
from specsim.serve.scheduler import SchedulerConfig

SCHEMA_VERSION = 1
N_BATCH = 2048  # llama-server's logical batch: the most prompt and decode rows one step takes


def serve_settings(target, draft, threads, gammas, slots: int, context_tokens: int) -> list[Setting]:
    """Target-only and the draft model at each γ, ``slots`` slots splitting ``context_tokens`` KV cells."""
    base = ServerConfig(target, threads, context_tokens=context_tokens, parallel=slots)
    out = [Setting(BASE, base)]
    for g in gammas:
        cfg = ServerConfig(target, threads, context_tokens, slots, draft, "draft-simple", g)
        out.append(Setting(f"draft:{g}", cfg))
    return out


def _key(rate: float, label: str) -> str:
    return f"{rate:g}@{label}"


def run_serve_check(
    llama,
    settings: list[Setting],
    prompts: list[list[int]],
    *,
    rates,
    requests: int,
    new_tokens: int,
    seed: int,
    min_rounds: int,
    max_rounds: int,
    halfwidth: float,
    max_seconds: float | None,
    partial: Path,
    niceness: int = 0,
) -> tuple[dict, bool, float]:
    """(runs by "rate@label" → list of ServedTimes, finished, the client's mean CPU share in cores): each
    (rate, side) runs ``min_rounds`` times, then on while its headline metrics' relative 95% half-width
    exceeds ``halfwidth`` (:func:`specsim.check.serve_comparison.headline_halfwidth`, as our own server
    loop's check), up to ``max_rounds``; finished when none is left."""
    key = {
        "settings": [s.label for s in settings],
        "rates": list(rates),
        "requests": requests,
        "new_tokens": new_tokens,
        "seed": seed,
        "prompts": len(prompts),
    }
    runs: dict = {}
    if partial.exists():
        d = parse_json(read_text(partial, "serving partial"), str(partial))
        if d.get("key") != key:
            raise SpecsimError(f"{partial}: a partial serving check of other settings (delete it)")
        runs = {
            k: [ServedTimes(**{f: _tuples(v) for f, v in t.items()}) for t in ts]
            for k, ts in d["runs"].items()
        }
    shares, t0 = [], time.perf_counter()

    def wanted(done: list) -> bool:
        n = len(done)
        return n < min_rounds or (n < max_rounds and headline_halfwidth(done) > halfwidth)

    def left() -> list[tuple[float, Setting]]:
        return [(r, s) for r in rates for s in settings if wanted(runs.get(_key(r, s.label), []))]

    def out_of_time() -> bool:  # rounds done: the fewest runs of any (rate, side)
        done = min((len(runs.get(_key(r, s.label), [])) for r in rates for s in settings), default=min_rounds)
        return past_budget(t0, max_seconds, done, min_rounds)

    with contextlib.ExitStack() as stack:
        servers = {}
        # round-robin: the (rate, side) with the fewest runs next, so rounds interleave the sides
        while (todo := left()) and not out_of_time():
            rate, s = min(todo, key=lambda x: len(runs.get(_key(x[0], x[1].label), [])))
            if s.label not in servers:
                servers[s.label] = stack.enter_context(LlamaServer(llama, s.config, niceness=niceness))
            arrivals = workload_arrivals(requests, rate, seed)
            times, share = run_load(servers[s.label], prompts, arrivals, new_tokens)
            runs.setdefault(_key(rate, s.label), []).append(times)
            shares.append(share)
            data = {k: [{f: _lists(v) for f, v in asdict(t).items()} for t in ts] for k, ts in runs.items()}
            write_json_atomic(partial, {"key": key, "runs": data})
    return runs, not left(), float(np.mean(shares)) if shares else 0.0


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _lists(v):
    return [_lists(x) for x in v] if isinstance(v, tuple) else v


def serve_rows(
    profile, entry, runs: dict, settings, rates, prompt_traces, *, slots, new_tokens, seed, scenario
) -> list:
    """One :class:`specsim.profile_format.ServeCheckRow` per (rate, side); request i followed trace i mod P of
    ``prompt_traces`` (the prompts in the order they were sent)."""
    rows = []
    for rate in rates:
        for s in settings:
            measured = runs.get(_key(rate, s.label), [])
            if not measured:
                continue
            gamma = label_gamma(s.label)
            request_traces = [
                prompt_traces[i % len(prompt_traces)] for i in range(len(measured[0].arrival_s))
            ]
            plans = [greedy_plan(t.match[1:new_tokens], gamma, new_tokens - 1) for t in request_traces]
            blocks = plans if gamma else []
            tau = float(np.mean([p.tokens / p.blocks for p in blocks])) if blocks else 1.0
            cost = LlamaServerStepCost.from_profile(profile, tau)
            scheduler = SchedulerConfig(
                max_num_seqs=slots, max_num_batched_tokens=N_BATCH, chunked_prefill=True
            )
            pred = predicted_run(
                profile,
                measured[0].requests(),
                gamma=gamma,
                entries=[entry],
                traces=request_traces,
                image_tokens_per_image=0,
                max_num_seqs=slots,
                cost=cost,
                scheduler=scheduler,
            )
            rows.append(
                serve_check_row(
                    measured,
                    pred,
                    method=entry.method,
                    scenario=scenario,
                    gamma=gamma,
                    rate_per_s=rate,
                    new_tokens=new_tokens,
                    max_num_seqs=slots,
                    seed=seed,
                    runtime="llama.cpp",
                )
            )
    return rows
