"""The batched grids of a llama.cpp profile (``calibrate latency --engine llama.cpp --request-batches``):
what ``llama-server``'s passes cost with B slots decoding in its unified KV cache.

``llama-batched-bench`` (``-kvu``) → ``target_decode``, ``draft_step`` at (1, width, B) and ``target_verify``
at (γ+1, width, B); ``llama-bench`` on the draft → ``draft_catchup``. The work outside the passes is B times
the one-request terms (the server samples and handles tokens slot by slot).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from calibrate.llama_cpp.bench_output import parse_batched_jsonl, parse_bench_jsonl
from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.llama_cpp.pass_grids import GEN_FORWARDS, run_bench
from calibrate.run.timing import summarize
from specsim.costs.pass_cost import PassCost
from specsim.profile_format.batched_cost import BatchedCosts
from specsim.profile_format.cost_grid import CostGrid, make_grid
from specsim.profile_format.overhead_grid import OverheadGrid

SCHEMA_VERSION = 1
ENGINE = "llama-server: B slots in one unified KV cache, rejected drafts removed (llama.cpp)"


@dataclass(frozen=True)
class ServePlan:
    """Slots B, the γ of the verification and catch-up grids, per-slot cache widths, threads, repetitions."""

    batches: tuple[int, ...]
    gammas: tuple[int, ...]
    widths_tokens: tuple[int, ...]
    threads: int
    repetitions: int = 3
    niceness: int = 0
    schema_version: int = SCHEMA_VERSION


def _batched(llama, model, plan: ServePlan, sequences: list[int], per_seq: int) -> dict:
    """step ms samples by (sequences, width): ``sequences`` each of width/``per_seq`` tokens."""
    pp = ",".join(str(max(1, w // per_seq)) for w in plan.widths_tokens for _ in range(plan.repetitions))
    args = ["-t", str(plan.threads), "-tb", str(plan.threads), "-c", "8192", "-kvu", "-npp", pp]
    args += ["-ntg", str(GEN_FORWARDS), "-npl", ",".join(map(str, sequences)), "--output-format", "jsonl"]
    out = defaultdict(list)
    for r in parse_batched_jsonl(run_bench(llama, model, args, plan.niceness, "llama-batched-bench")):
        width = min(plan.widths_tokens, key=lambda w: abs(max(1, w // per_seq) - r.prompt_tokens))
        out[(r.sequences, width)].append(r.step_ms)
    return out


def _grid(cells: dict, rows, plan: ServePlan, key) -> CostGrid:
    """rows × widths × batches from ``cells[key(row, B, width)]``."""
    shape = (len(rows), len(plan.widths_tokens), len(plan.batches))
    stats = np.empty(shape, dtype=object)
    for i, r in enumerate(rows):
        for j, w in enumerate(plan.widths_tokens):
            for k, b in enumerate(plan.batches):
                stats[i, j, k] = summarize(cells[key(r, b, w)])
    values = [np.vectorize(lambda s, f=f: getattr(s, f))(stats) for f in ("median_ms", "halfwidth_ms", "n")]
    return make_grid(rows, plan.widths_tokens, plan.batches, *values)


def _catchup(llama, draft, plan: ServePlan) -> dict:
    out = defaultdict(list)
    for g in plan.gammas:
        for b in plan.batches:
            depths = ",".join(str(b * w) for w in plan.widths_tokens)
            args = ["-p", str(b * (g + 1)), "-n", "0", "-d", depths, "-t", str(plan.threads)]
            text = run_bench(llama, draft, [*args, "-r", str(plan.repetitions), "-o", "jsonl"], plan.niceness)
            for rec in parse_bench_jsonl(text):
                out[(g + 1, b, rec.depth_tokens // b)].extend(rec.pass_ms)
    return out


def measure_batched(llama: LlamaCpp, target: str, draft: str, plan: ServePlan, one: PassCost) -> BatchedCosts:
    """The batched grids (module docstring); ``one``: the profile's one-request costs (its terms per block
    and per step, times B)."""
    b = list(plan.batches)
    decode = _batched(llama, target, plan, b, 1)
    dstep = _batched(llama, draft, plan, b, 1)
    verify = {}
    for g in plan.gammas:
        for (seqs, w), ms in _batched(llama, target, plan, [x * (g + 1) for x in b], g + 1).items():
            verify[(g + 1, seqs // (g + 1), w)] = ms
    catchup = _catchup(llama, draft, plan)
    rows = tuple(g + 1 for g in plan.gammas)
    per_block = [[float(bb * one.block_overhead_ms(g, 1)) for bb in b] for g in plan.gammas]
    return BatchedCosts(
        target_decode=_grid(decode, (1,), plan, lambda r, bb, w: (bb, w)),
        target_verify=_grid(verify, rows, plan, lambda r, bb, w: (r, bb, w)),
        draft_step=_grid(dstep, (1,), plan, lambda r, bb, w: (bb, w)),
        overhead_ms_per_block=OverheadGrid(tuple(plan.gammas), tuple(b), tuple(tuple(x) for x in per_block)),
        overhead_ms_per_target_step=tuple(float(bb * one.step_overhead_ms(1)) for bb in b),
        engine=ENGINE,
        draft_catchup=_grid(catchup, rows, plan, lambda r, bb, w: (r, bb, w)),
    )
