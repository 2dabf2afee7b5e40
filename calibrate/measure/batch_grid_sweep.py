"""Measure the batched engine's cost (:mod:`specsim.profile_format.batched_cost`) by running the batched
engine.

Per round, for every batch size B, prompt length and γ: B synthetic ragged prompts through
:func:`calibrate.run.batch_engine.batch_target_decode` and ``batch_speculative_decode``. Each grid point
(pass, rows, B) is, per prompt length, a line in cache width fitted through the passes' ms, stored at the
narrowest and widest width reached, with the 95% half-width of the fitted value.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from calibrate.models.loaded_model import LoadedModel, token_id_limit
from calibrate.run.batch_engine import (
    batch_speculative_decode,
    batch_target_decode,
)
from calibrate.run.proposal import Request
from specsim.profile_format.batched_cost import BatchedCosts
from specsim.profile_format.cost_grid import make_grid
from specsim.profile_format.overhead_grid import OverheadGrid

WARMUP_PROMPT_TOKENS = 8  # the longest prompt of a warm-up batch


@dataclass(frozen=True)
class BatchSweepPlan:
    """What the batched sweep runs: batch sizes B, γ values, the longest prompt of each batch (tokens), new
    tokens per request of an SD run and of a target-only run (longer: one column per step), rounds, and
    whether to time the unpadded target-only step."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    gammas: tuple[int, ...] = (1, 3, 5)
    prompt_tokens: tuple[int, ...] = (32, 96)
    new_tokens: int = 24
    target_new_tokens: int = 64
    rounds: int = 2
    seed: int = 0
    unpadded: bool = True  # also time target-only steps on prompts of one length (no masked column)


def runs_unpadded(prompt_tokens) -> bool:
    """Whether a workload of these prompt lengths (tokens; None: not known) can decode a batch of B > 1
    requests with no masked column, so the unpadded step's timing can serve it: two prompts of one length."""
    return prompt_tokens is None or len(set(prompt_tokens)) < len(prompt_tokens)


def sweep_prompt_lengths(shortest: int, middle: int, longest: int, count: int = 3) -> tuple[int, ...]:
    """The longest prompts a batched sweep runs (its grid's widths span their runs): 1: the middle one,
    2: the shortest and the longest, 3: all three (distinct, increasing)."""
    chosen = {1: (middle,), 2: (shortest, longest), 3: (shortest, middle, longest)}[count]
    return tuple(sorted(set(chosen)))


def ragged_requests(
    loaded: LoadedModel, batch: int, longest: int, generator, *, uniform: bool = False
) -> list[Request]:
    """``batch`` requests of random text ids, the longest ``longest`` tokens, the rest down to half (or all
    ``longest`` tokens: ``uniform``, a batch with no pads)."""
    limit = token_id_limit(loaded)
    lengths = [longest if uniform else max(1, longest - (b * longest) // (2 * batch)) for b in range(batch)]
    return [
        Request(torch.randint(1, limit, (1, n), generator=generator), prompt_id=f"synthetic-{b}")
        for b, n in enumerate(lengths)
    ]


class Samples:
    """(width, ms) samples per grid point and overhead samples per (γ, B)."""

    def __init__(self):
        # (pass, rows, B, prompt length) -> (width, ms) samples
        self.passes: dict[tuple[str, int, int, int], list[tuple[float, float]]] = defaultdict(list)
        self.overhead: dict[tuple[int, int], list[float]] = defaultdict(list)

    def merge(self, other: Samples) -> None:
        """Add ``other``'s samples (another run's rounds) to these."""
        for key, points in other.passes.items():
            self.passes[key].extend(points)
        for key, values in other.overhead.items():
            self.overhead[key].extend(values)

    def add_target(self, result, batch: int, longest: int) -> None:
        for blk in result.blocks[1:]:
            self.passes[("target_decode", 1, batch, longest)].append((blk.target_columns, blk.verify_ms))
            self.overhead[(0, batch)].append(blk.block_ms - blk.verify_ms)

    def add_unpadded(self, result, batch: int, longest: int) -> None:
        for blk in result.blocks[1:]:
            key = ("target_decode_unpadded", 1, batch, longest)
            self.passes[key].append((blk.target_columns, blk.verify_ms))

    def add_sd(self, result, batch: int, longest: int) -> None:
        for blk in result.blocks[1:]:
            g = blk.gamma
            self.passes[("target_verify", g + 1, batch, longest)].append((blk.target_columns, blk.verify_ms))
            for i, ms in enumerate(blk.draft_step_ms):
                key = ("draft_first_step" if i == 0 else "draft_step", 1, batch, longest)
                self.passes[key].append((blk.draft_columns + i, ms))
            self.overhead[(g, batch)].append(blk.block_ms - blk.draft_ms - blk.verify_ms)


def run_rounds(
    models: dict[str, LoadedModel], plan: BatchSweepPlan, on_run: Callable[[], None] | None = None
):
    """Every round: each B × prompt length, target-only then SD at each γ; the collected samples."""
    target, draft = models["target"], models["draft"]
    gen = torch.Generator().manual_seed(plan.seed)
    samples = Samples()
    eos = None  # synthetic requests run to their length: an early EOS would shorten the width range
    with torch.inference_mode():
        for batch in plan.batch_sizes:  # warm-up: first calls at a new shape allocate; thrown away
            # short prompts: a decode pass's matmuls have the batch's shape whatever the prompt, and a long
            # prompt's prefills (B of them, per model, per warm-up run) would cost more than the decode steps
            reqs = ragged_requests(target, batch, min(WARMUP_PROMPT_TOKENS, plan.prompt_tokens[0]), gen)
            batch_target_decode(target.model, reqs, max_new_tokens=4, eos_token_id=eos)
            batch_speculative_decode(
                target.model, draft.model, reqs, gamma=max(plan.gammas), max_new_tokens=4, eos_token_id=eos
            )
        for _ in range(plan.rounds):
            for batch in plan.batch_sizes:
                for longest in plan.prompt_tokens:
                    reqs = ragged_requests(target, batch, longest, gen)
                    kw = {"max_new_tokens": plan.new_tokens, "eos_token_id": eos}
                    base = batch_target_decode(
                        target.model, reqs, max_new_tokens=plan.target_new_tokens, eos_token_id=eos
                    )
                    samples.add_target(base, batch, longest)
                    if plan.unpadded and batch == 1:  # one request has no pads: the same pass
                        samples.add_unpadded(base, batch, longest)
                    elif plan.unpadded:
                        same = ragged_requests(target, batch, longest, gen, uniform=True)
                        plain = batch_target_decode(
                            target.model, same, max_new_tokens=plan.target_new_tokens, eos_token_id=eos
                        )
                        samples.add_unpadded(plain, batch, longest)
                    if on_run:
                        on_run()
                    for g in plan.gammas:
                        res = batch_speculative_decode(target.model, draft.model, reqs, gamma=g, **kw)
                        samples.add_sd(res, batch, longest)
                        if on_run:
                            on_run()
    return samples


def _line(points: list[tuple[float, float]], at: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """A least-squares line ms(width) through ``points``, its value at ``at`` (clipped at > 0) and the 95%
    half-width of that value; one width only: the median and its spread."""
    w = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    n = y.size
    if np.ptp(w) == 0 or n < 3:
        med = float(np.median(y))
        hw = 1.96 * float(np.std(y)) / np.sqrt(max(n, 1))
        return np.full(at.shape, med), np.full(at.shape, hw), n
    # one pass in twenty may be a scheduler hiccup: drop residuals beyond 4 MADs before the final fit
    coef = np.polyfit(w, y, 1)
    res = y - np.polyval(coef, w)
    mad = float(np.median(np.abs(res - np.median(res)))) or float(np.std(res)) or 1.0
    keep = np.abs(res) <= 4 * 1.4826 * mad
    if keep.sum() >= 3:
        w, y = w[keep], y[keep]
    coef = np.polyfit(w, y, 1)
    res = y - np.polyval(coef, w)
    s2 = float(res @ res) / max(w.size - 2, 1)
    se = np.sqrt(s2 * (1 / w.size + (at - w.mean()) ** 2 / max(float(((w - w.mean()) ** 2).sum()), 1e-12)))
    return np.maximum(np.polyval(coef, at), 1e-6), 1.96 * se, int(w.size)


def batched_costs(samples: Samples, batch_sizes, gammas, prompt_tokens) -> BatchedCosts:
    """The :class:`BatchedCosts` of a sweep's samples at the planned γ values (module docstring; the blocks of
    a smaller end-of-request γ are too few to fit and are left out of the grids)."""
    grids = {}
    planned = {"target_decode": [1], "target_verify": [g + 1 for g in gammas], "draft_step": [1]}
    planned |= {"target_decode_unpadded": [1], "draft_first_step": [1]}
    if not any(v for k, v in samples.passes.items() if k[0] == "target_decode_unpadded"):  # not timed
        del planned["target_decode_unpadded"]
    source = {}  # the samples a grid is fitted from, where not its own
    if max(gammas) == 1:  # blocks of one draft step: every step is a first one, stored as draft_step
        del planned["draft_first_step"]
        source = {"draft_step": "draft_first_step"}
    for name, rows in planned.items():
        passes = {
            (r, b, n): samples.passes[(source.get(name, name), r, b, n)]
            for r in rows
            for b in batch_sizes
            for n in prompt_tokens
        }
        # each prompt length's width range over every (rows, B): the grid's widths are their ends
        spans = {}
        for n in prompt_tokens:
            w = [p[0] for r in rows for b in batch_sizes for p in passes[(r, b, n)]]
            spans[n] = (float(min(w)), float(max(w)))
        ctx = np.array(sorted({x for span in spans.values() for x in span}))
        # a width belongs to the prompt length whose range holds it (else the nearest range)
        owner = [min(spans, key=lambda n, c=c: max(spans[n][0] - c, c - spans[n][1], 0.0)) for c in ctx]
        ms = np.zeros((len(rows), ctx.size, len(batch_sizes)))
        hw, count = np.zeros_like(ms), np.zeros(ms.shape, dtype=int)
        for i, r in enumerate(rows):
            for j, b in enumerate(batch_sizes):
                for n in prompt_tokens:
                    at = np.array([k for k, o in enumerate(owner) if o == n])
                    if at.size:
                        ms[i, at, j], hw[i, at, j], count[i, at, j] = _line(passes[(r, b, n)], ctx[at])
        grids[name] = make_grid(rows, ctx, batch_sizes, ms, hw, count)
    over = [[float(np.median(samples.overhead[(g, b)])) for b in batch_sizes] for g in gammas]
    steps = tuple(float(np.median(samples.overhead[(0, b)])) for b in batch_sizes)
    return BatchedCosts(
        **grids,
        overhead_ms_per_block=OverheadGrid(
            tuple(gammas),
            tuple(int(b) for b in batch_sizes),
            tuple(tuple(max(x, 0.0) for x in r) for r in over),
        ),
        overhead_ms_per_target_step=tuple(max(x, 0.0) for x in steps),
    )
