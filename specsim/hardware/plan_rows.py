"""A plan's blocks priced through the pass-cost seam, with the overhead as named terms.

For batch B, context L and γ (arrays broadcast [B, L, G]): Tp, Tq (0 for a lookup kind; batch B·k for a
k-member ensemble) and Tv(γ) from :class:`~specsim.hardware.roofline_pass_cost.RooflinePassCost`; the
target-only step T = Tp + its step terms; the block = γ·Tq + Tv + Σ o-terms, the o-terms being the extra
draft forwards (e·Tq) and the engine's block terms (:mod:`specsim.hardware.engine_terms`). Then
c = Tq/T, v = Tv/T, o = Σ o-terms / T and speedup = τ·T / block = τ / (γ·c + v + o) exactly. Given a
request's prompt and output lengths, :func:`end_to_end_speedup` adds both prefills to both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.costs.pass_cost import DRAFT, PREFILL, TARGET
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.predict.acceptance_source import MethodTau


@dataclass(frozen=True)
class PricedBlocks:
    """Every (batch, context, γ) of a plan: ms of the passes and named terms, and the speedup."""

    target_forward_ms: np.ndarray  # Tp [B, L, 1]
    step_ms: np.ndarray  # T [B, L, 1]
    draft_ms: np.ndarray  # Tq [B, L, 1]
    verify_ms: np.ndarray  # Tv [B, L, G]
    terms_ms: dict[str, np.ndarray]  # o-terms [B, L, G]
    block_ms: np.ndarray  # [B, L, G]
    speedup: np.ndarray  # [B, L, G]


def price_blocks(cost: RooflinePassCost, mt: MethodTau, batches, contexts) -> PricedBlocks:
    """The blocks of ``mt`` at every batch × context × γ (module docstring); batches may be fractional."""
    b = np.asarray(batches, dtype=float)[:, None, None]
    ctx = np.asarray(contexts, dtype=float)[None, :, None]
    g = np.asarray(mt.gammas, dtype=float)[None, None, :]
    tp = cost.pass_ms(TARGET, 1, ctx, b).ms
    tq = np.broadcast_to(cost.pass_ms(DRAFT, 1, ctx, b * mt.draft_batch_size).ms, np.shape(tp))
    tv = cost.pass_ms(TARGET, g + 1, ctx, b).ms
    step = tp + cost.step_overhead_ms(b, gpu_ms=tp)
    e = cost.extra_draft_forwards
    gpu = (g + e) * tq + tv
    terms = {"extra_draft_forwards": e * tq + 0.0 * g, **cost.block_terms_ms(g, b, gpu_ms=gpu)}
    terms = {k: np.broadcast_to(np.asarray(v, dtype=float), np.shape(gpu)) for k, v in terms.items()}
    block = g * tq + tv + sum(terms.values())
    tau = np.asarray(mt.tau, dtype=float)[None, None, :]
    return PricedBlocks(tp, step, tq, tv, terms, block, tau * step / block)


def best_speedup_at(cost: RooflinePassCost, mt: MethodTau, batches, context: float) -> np.ndarray:
    """The best-γ speedup at each (possibly fractional) batch, at one context."""
    return price_blocks(cost, mt, batches, [context]).speedup.max(axis=-1)[:, 0]


def request_prefills_ms(cost: RooflinePassCost, prompt_tokens: int, batches) -> tuple[np.ndarray, np.ndarray]:
    """(target, draft) prefill of ``prompt_tokens`` per sequence for each batch (ms; the draft's 0 for a
    lookup kind)."""
    b = np.asarray(batches, dtype=float)
    target = cost.pass_ms(TARGET, prompt_tokens, 0, b, kind=PREFILL).ms
    if cost.draft is None:
        return np.asarray(target, dtype=float), np.zeros_like(b)
    draft = cost.pass_ms(DRAFT, prompt_tokens, 0, b, kind=PREFILL).ms
    return np.asarray(target, dtype=float), np.asarray(draft, dtype=float)


def end_to_end_speedup(step_ms, block_ms, tau, target_prefill_ms, draft_prefill_ms, output_tokens: int):
    """A request's whole time target-only over SD: (prefill + n·T) / (prefill + draft prefill + n/τ·block),
    n = N − 1 decoded tokens: the prefill emits the first of the N (a 1-token request gains nothing)."""
    n = float(output_tokens) - 1.0
    return (target_prefill_ms + n * step_ms) / (target_prefill_ms + draft_prefill_ms + n / tau * block_ms)
