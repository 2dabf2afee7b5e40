"""Price B traced requests decoded together by the batched engine, block by block at the batch's composition.

Under greedy decoding a request emits in the batch exactly what it emits alone, so each request's blocks
are its trace's greedy schedule (:func:`specsim.draft_shapes.draft_plans.draft_plan`) and the batch runs
until the longest ends. Every pass is read from :mod:`specsim.profile_format.batched_cost` at its cache
width (rejected drafts stay, masked), B and rows. Decode phase: the first pass left out; speedup =
target-only ms/token ÷ SD ms/token. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import TARGET, UNPADDED, PassCost, draft_steps_ms
from specsim.draft_shapes.draft_plans import draft_plan
from specsim.errors import SpecsimError
from specsim.predict.pricing import RequestSpec
from specsim.profile_format import MethodAcceptance, Profile


@dataclass(frozen=True)
class BatchPriced:
    """Decode-phase ms of one or more batches by term (SD: draft, verify, overhead; target-only: steps and
    their overhead), tokens each side emitted after its first pass, SD blocks, drafts proposed."""

    draft_ms: float
    verify_ms: float
    overhead_ms: float
    sd_tokens: float
    blocks: float
    drafts: float
    target_ms: float
    target_overhead_ms: float
    target_tokens: float
    target_steps: float
    request_blocks: float  # Σ over SD blocks of the requests still running
    extrapolated: bool = False

    @property
    def sd_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.overhead_ms

    @property
    def base_ms(self) -> float:
        return self.target_ms + self.target_overhead_ms

    @property
    def tau(self) -> float:
        """Tokens per block per running request after the first block."""
        return self.sd_tokens / max(self.request_blocks, 1e-12)

    @property
    def target_ms_per_token(self) -> float:
        return self.base_ms / self.target_tokens

    @property
    def sd_ms_per_token(self) -> float:
        return self.sd_ms / self.sd_tokens

    @property
    def decode_speedup(self) -> float:
        return self.target_ms_per_token / self.sd_ms_per_token

    def terms_ms_per_block(self) -> dict[str, float]:
        """ms per SD block by term, and ``target_step``: ms per target-only step (overhead included)."""
        blocks = max(self.blocks, 1e-12)
        return {
            "draft": self.draft_ms / blocks,
            "verify": self.verify_ms / blocks,
            "overhead": self.overhead_ms / blocks,
            "target_step": self.base_ms / max(self.target_steps, 1e-12),
        }

    def __add__(self, other: BatchPriced) -> BatchPriced:
        names = [f for f in self.__dataclass_fields__ if f != "extrapolated"]
        return BatchPriced(
            *(getattr(self, f) + getattr(other, f) for f in names),
            extrapolated=self.extrapolated or other.extrapolated,
        )


def batch_schedule(emitted: list[np.ndarray], gamma: int) -> tuple[np.ndarray, ...]:
    """The batch's blocks from each request's emitted tokens per block: (g per block, tokens emitted per
    block summed over the batch, whether any running request accepted all g drafts, requests running),
    arrays [blocks]."""
    total = [float(e.sum()) for e in emitted]
    n_blocks = max(len(e) for e in emitted)
    done = np.zeros(len(emitted))
    gs, tokens, full = np.zeros(n_blocks, int), np.zeros(n_blocks), np.zeros(n_blocks, bool)
    alive = np.zeros(n_blocks)
    for k in range(n_blocks):
        running = [i for i, e in enumerate(emitted) if k < len(e)]
        alive[k] = len(running)
        gs[k] = int(min(gamma, max(total[i] - done[i] for i in running) - 1))
        for i in running:
            e = emitted[i][k]
            tokens[k] += e
            full[k] |= bool(e - 1 == gs[k] and gs[k] > 0 and k + 1 < len(emitted[i]))
            done[i] += e
    return gs, tokens, full, alive


def price_batch(
    cost: PassCost, gamma: int, emitted: list[np.ndarray], prompt_tokens, draft_prompt_tokens
) -> BatchPriced:
    """Decode-phase costs of one static batch (module docstring): each request's emitted tokens per block,
    prompt lengths (target, draft)."""
    B = len(emitted)
    cost.check_batch(B)
    gs, tokens, full, alive = batch_schedule(emitted, gamma)
    P, D = float(max(prompt_tokens)), float(max(draft_prompt_tokens))
    # cache widths before each block's passes (module docstring)
    t_width = P + gs[0] + np.concatenate([[0.0], np.cumsum(gs[1:-1] + 1)]) if gs.size > 1 else np.zeros(0)
    fed = np.where(full[:-1], 2, 1) + gs[1:] - 1
    d_width = D + gs[0] - 1 + np.concatenate([[0.0], np.cumsum(fed[:-1])]) if gs.size > 1 else np.zeros(0)
    g = gs[1:]
    out = False
    draft_ms = 0.0
    if g.size and g.max() > 0:
        steps = np.arange(int(g.max()))[None, :]  # [1, max g]
        live = steps < g[:, None]
        ms, ext = draft_steps_ms(cost, d_width[:, None] + steps, B)
        draft_ms, out = float(np.sum(np.where(live, ms, 0.0))), bool(np.any(ext & live))
    verify = np.zeros(g.size)
    if np.any(g > 0):
        # an end-of-batch block's smaller g may lie below the measured rows: the nearest measured, flagged
        rows = g[g > 0] + 1
        measured = cost.measured_rows(TARGET)
        if measured is not None:
            rows = np.clip(rows, measured[0], measured[-1])
        ms, ext = cost.pass_ms(TARGET, rows, t_width[g > 0], B)
        clipped = bool(np.any(rows != g[g > 0] + 1))
        verify[g > 0], out = ms, out or bool(np.any(ext)) or clipped
    if np.any(g == 0):  # a block with no drafts is a target step
        ms, ext = cost.pass_ms(TARGET, 1, t_width[g == 0], B)
        verify[g == 0], out = ms, out or bool(np.any(ext))
    overhead = cost.block_overhead_ms(np.maximum(g, 1), B) if g.size else np.zeros(0)
    n_tokens = max(float(e.sum()) for e in emitted)
    s = np.arange(1, int(n_tokens))
    # no masked column while every prompt has one length and no request has finished (module docstring)
    unpadded = (min(prompt_tokens) == max(prompt_tokens)) & (s < min(float(e.sum()) for e in emitted))
    base, ext = cost.pass_ms(TARGET, 1, P + s - 1, B)
    if np.any(unpadded):
        fast, ext_fast = cost.pass_ms(TARGET, 1, P + s - 1, B, kind=UNPADDED)
        base, ext = np.where(unpadded, fast, base), np.where(unpadded, ext_fast, ext)
    return BatchPriced(
        draft_ms=draft_ms,
        verify_ms=float(np.sum(verify)),
        overhead_ms=float(np.sum(overhead)),
        sd_tokens=float(tokens[1:].sum()),
        blocks=float(g.size),
        drafts=float(g.sum()),
        target_ms=float(np.sum(base)),
        target_overhead_ms=cost.step_overhead_ms(B) * s.size,
        target_tokens=float(sum(e.sum() - 1 for e in emitted)),
        target_steps=float(s.size),
        request_blocks=float(alive[1:].sum()),
        extrapolated=out or bool(np.any(ext)),
    )


def price_batches(
    profile: Profile, entry: MethodAcceptance, gamma: int, batches: list[list[RequestSpec]]
) -> BatchPriced:
    """Decode-phase costs of ``batches`` of traced requests of ``entry`` at a fixed γ, summed."""
    cost = GridPassCost.batch(
        profile.latency,
        "latency.cost_model.batched: not measured in this profile (calibrate latency --request-batches)",
    )
    total = None
    for reqs in batches:
        if any(r.trace is None for r in reqs):
            raise SpecsimError(f"method {entry.method!r}: a batched prediction replays greedy traces")
        emitted = [np.asarray(draft_plan(gamma, r.trace, r.max_new_tokens).emitted, float) for r in reqs]
        priced = price_batch(
            cost, gamma, emitted, [r.prompt_tokens for r in reqs], [r.draft_prompt_tokens for r in reqs]
        )
        total = priced if total is None else total + priced
    if total is None:
        raise SpecsimError(f"method {entry.method!r}: no batches to price")
    return total
