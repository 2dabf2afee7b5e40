"""Measure the forward-cost model (:mod:`specsim.profile_format.cost_model`) by running the engine's own
phases.

At each context c, round-robin: target-only steps (:func:`calibrate.run.engine.target_step`) and speculative
blocks (:func:`calibrate.run.engine.sd_block`) for every γ and draft batch, on random KV caches cropped back
to c after each; a block's wall time minus its model time is the engine's overhead. Draft steps i ≥ 1 are
carried to c + 1 (``draft_next``) along a line fitted through their per-step medians.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch

from calibrate.models.loaded_model import LoadedModel, random_kv_cache, token_id_limit
from calibrate.run import engine as E
from calibrate.run.timing import Timing, summarize


def grid_key(grid: str, rows: int, context: int, batch: int) -> str:
    """Partial-file key of one grid point."""
    return f"{grid}.r={rows}.c={context}.b={batch}"


SENTINEL_START, SENTINEL_END = "sentinel.start", "sentinel.end"


def overhead_prefix(gamma: int, batch: int) -> str:
    """Key prefix of the engine's per-block overhead at γ (0: a target-only step) and draft batch."""
    return f"overhead.g={gamma}.b={batch}.c="


def overhead_key(gamma: int, batch: int, context: int) -> str:
    """Key of the engine's per-block overhead at γ, draft batch and context."""
    return f"{overhead_prefix(gamma, batch)}{context}"


def adaptive_prefix(gamma: int, batch: int) -> str:
    """Key prefix of what an adaptive ensemble's weight update adds to a block at γ and draft batch (its
    keys start with "overhead", so, like the overhead, they never hold a sweep back from converging)."""
    return f"overhead-adaptive.g={gamma}.b={batch}.c="


def _drafter(draft: LoadedModel, batch: int, ensemble: bool, device):
    """The drafter the engine runs for this pair: the text drafter, or an in-batch ensemble of ``batch`` rows.

    The members' contexts are never built: the sweep starts every block from a random KV cache."""
    from calibrate.drafting import EnsembleDrafter, TextDrafter
    from calibrate.drafting.contexts import TextOnlyContext

    if not ensemble and batch == 1:
        return TextDrafter(draft.model, device=device)
    return EnsembleDrafter(
        draft.model, [TextOnlyContext() for _ in range(batch)], device=device, method=f"batch-{batch}"
    )


def restart_draft(drafter, cache, context: int, first_rows: int, ids: list[int], device) -> None:
    """Put ``drafter`` on ``cache`` cropped to ``context`` positions with ``first_rows`` tokens pending."""
    E.crop_cache(cache, context)
    if hasattr(drafter, "ids"):  # text drafter: committed ids = cached + pending
        drafter.start_from_cache(ids[: context + first_rows], cache, context)
        return
    k = drafter.draft_batch_size
    mask = torch.ones(k, context, dtype=torch.long, device=device)
    mask[1:, :1] = 0  # rows after the first are left-padded, so the padded-mask path is the one timed
    tail = torch.tensor([ids[context : context + first_rows]] * k, dtype=torch.long, device=device)
    drafter.start_from_cache(cache, mask, tail)


class Sweep:
    """Engine-shaped cycles at one context; ``samples[key]`` collects ms, ``next_steps[(c, b)]``
    (context, ms)."""

    def __init__(self, models: dict[str, LoadedModel], context: int, batch_sizes, ensemble: bool, generator):
        self.target, self.draft = models["target"], models["draft"]
        self.model = self.target.model
        self.device = self.target.device
        self.context = context
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.next_steps: dict[int, list[tuple[int, float]]] = defaultdict(list)
        self.cache = random_kv_cache(self.target, 1, context, generator)
        limit = min(token_id_limit(self.target), token_id_limit(self.draft))
        self.ids = torch.randint(0, limit, (context + 2,), generator=generator).tolist()
        self.drafters = {
            b: (
                _drafter(self.draft, b, ensemble, self.device),
                random_kv_cache(self.draft, b, context, generator),
            )
            for b in batch_sizes
        }

    def target_cycle(self, record: bool = True) -> None:
        """One target-only step as :func:`calibrate.run.engine.target_decode` runs it (kept when
        ``record``)."""
        pending = torch.tensor([[self.ids[self.context]]], dtype=torch.long, device=self.model.device)
        t0 = time.perf_counter()
        nxt, ms = E.target_step(
            self.model, self.cache, pending, temperature=0.0, generator=None, device=self.device
        )
        E.truncate_at_eos([nxt], 1 << 30, None)
        torch.tensor([[nxt]], dtype=torch.long, device=self.model.device)
        block_ms = (time.perf_counter() - t0) * 1e3
        E.crop_cache(self.cache, self.context)
        if record:
            self.samples[grid_key("target_decode", 1, self.context, 1)].append(ms)
            self.samples[overhead_key(0, 1, self.context)].append(block_ms - ms)

    def sd_cycle(self, gamma: int, batch: int, first_rows: int) -> None:
        """One block of γ drafts as :func:`calibrate.run.engine.speculative_decode` runs it."""
        drafter, dcache = self.drafters[batch]
        restart_draft(drafter, dcache, self.context, first_rows, self.ids, self.device)
        pending = torch.tensor([[self.ids[self.context]]], dtype=torch.long, device=self.model.device)
        t0 = time.perf_counter()
        kept, proposal, verify_ms = E.sd_block(
            self.model,
            self.cache,
            drafter,
            pending,
            gamma,
            temperature=0.0,
            generator=None,
            device=self.device,
        )
        new, _ = E.truncate_at_eos(kept, 1 << 30, None)
        torch.tensor([[new[-1]]], dtype=torch.long, device=self.model.device)
        block_ms = (time.perf_counter() - t0) * 1e3
        E.crop_cache(self.cache, self.context)
        c = self.context
        self.samples[grid_key("target_verify", gamma + 1, c, 1)].append(verify_ms)
        self.samples[grid_key("draft_first", first_rows, c, batch)].append(proposal.step_ms[0])
        for i, ms in enumerate(proposal.step_ms[1:], start=1):
            self.next_steps[batch].append((c + first_rows - 1 + i, ms))
        self.samples[overhead_key(gamma, batch, c)].append(block_ms - proposal.model_ms - verify_ms)
        if (
            getattr(drafter, "member_probs", None) is not None
        ):  # an ensemble: what the adaptive rule would add
            self.samples[f"{adaptive_prefix(gamma, batch)}{c}"].append(
                _adaptive_update_ms(drafter, proposal, new)
            )


def _adaptive_update_ms(drafter, proposal, kept: list[int]) -> float:
    """ms of the adaptive weight update (:func:`calibrate.drafting.ensemble.adaptive_weights`) after the
    block the ensemble ``drafter`` just ran, on that block's member distributions and outcome."""
    from calibrate.drafting.ensemble import adaptive_weights

    t0 = time.perf_counter()
    adaptive_weights(
        drafter.weights,
        drafter.prior,
        drafter.member_probs,
        proposal.tokens.tolist(),
        len(kept) - 1,
        kept[-1],
    )
    return (time.perf_counter() - t0) * 1e3


def next_step_timings(steps: list[tuple[int, float]], at_context: int) -> Timing:
    """The later draft steps of a block, carried to ``at_context`` along a line fitted through the
    median ms at each context (exact when the cost is linear in context), summarised."""
    ctx = np.array([c for c, _ in steps], dtype=float)
    ms = np.array([m for _, m in steps], dtype=float)
    levels = np.unique(ctx)
    slope = 0.0
    if levels.size > 1:
        med = np.array([np.median(ms[ctx == c]) for c in levels])
        slope = float(np.polyfit(levels, med, 1)[0])
    # A noisy slope on a tiny model can carry a fast sample below zero; a time is never negative.
    return summarize(list(np.maximum(ms - slope * (ctx - at_context), 0.0)))


def sweep_context(
    models: dict[str, LoadedModel],
    context: int,
    *,
    gammas,
    batch_sizes,
    ensemble: bool,
    warmup: int,
    min_rounds: int,
    max_rounds: int,
    target_rel_halfwidth: float,
    max_seconds: float | None,
    generator,
    on_round: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Round-robin engine cycles at ``context`` until every grid point's 95% CI half-width is within
    ``target_rel_halfwidth`` of its median (after ``min_rounds``), ``max_rounds`` or ``max_seconds``.

    Returns grid and overhead keys -> Timing; ``draft_next`` points sit at context + 1."""
    sweep = Sweep(models, context, batch_sizes, ensemble, generator)
    if gammas:  # the draft's first step alternates 1 and 2 fed tokens by round: both need samples
        min_rounds, max_rounds = max(min_rounds, 2), max(max_rounds, 2)
    target_steps = max(1, len(gammas) // 2)  # one sample per round would converge last

    def cycle(r: int) -> None:
        for b in batch_sizes:
            for g in gammas:
                sweep.sd_cycle(g, b, 1 + (r % 2))
        # Target-only decoding runs its steps back to back, so a step there follows a target step: the
        # first one after the blocks above (caches full of the draft) is run but not kept.
        for i in range(target_steps + 1):
            sweep.target_cycle(record=i > 0)

    def reset() -> None:
        sweep.samples.clear()
        sweep.next_steps.clear()

    return rounds_until_precise(
        cycle,
        reset,
        lambda: _summaries(sweep, context),
        overhead_prefix="overhead",
        warmup=warmup,
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        target_rel_halfwidth=target_rel_halfwidth,
        max_seconds=max_seconds,
        on_round=on_round,
    )


def rounds_until_precise(
    cycle: Callable[[int], None],
    reset: Callable[[], None],
    summaries: Callable[[], dict[str, Timing]],
    *,
    overhead_prefix: str,
    warmup: int,
    min_rounds: int,
    max_rounds: int,
    target_rel_halfwidth: float,
    max_seconds: float | None,
    on_round: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Run ``cycle(round)`` (``reset()`` after ``warmup`` rounds) until every grid point of ``summaries()``
    (overhead keys aside) has a 95% CI half-width within ``target_rel_halfwidth`` of its median, after at
    least ``min_rounds``; or ``max_rounds`` or ``max_seconds`` are reached. Returns the final summaries."""
    t_start = time.perf_counter()
    with torch.inference_mode():
        for r in range(warmup + max_rounds):
            if r == warmup:
                reset()
            cycle(r)
            if on_round is not None:
                on_round()
            if r + 1 - warmup < min_rounds:
                continue
            grid = [t for k, t in summaries().items() if not k.startswith(overhead_prefix)]
            if all(t.halfwidth_ms <= target_rel_halfwidth * t.median_ms for t in grid):
                break
            if max_seconds is not None and time.perf_counter() - t_start > max_seconds:
                break
    return summaries()


def _summaries(sweep: Sweep, context: int) -> dict[str, Timing]:
    out = {key: summarize(xs) for key, xs in sweep.samples.items() if xs}
    for b, steps in sweep.next_steps.items():
        if steps:
            out[grid_key("draft_next", 1, context + 1, b)] = next_step_timings(steps, context + 1)
    return out
