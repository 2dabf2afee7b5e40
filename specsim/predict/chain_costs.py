"""Price a chain request's forwards, each where it runs, through :mod:`specsim.costs.pass_cost`.

A request's context grows from its prompt P to P + N; each pass is priced at its own rows, context and batch
in the engine's cache convention (a block after t tokens verifies γ+1 rows on P − 1 + t cached positions).
``fused=True`` prices the first pass fused with the prefill, as the engine runs it; ``fused=False`` the
decode phase alone, as if the prompt were cached (the τ / (γ·c + v) convention, Leviathan et al. 2023).
Each block also pays the engine's overhead at its γ, and an engine whose draft catches up over the verified
rows (llama.cpp) that pass in the draft term. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from specsim.costs.pass_cost import CATCHUP, DRAFT, FIRST, PREFILL, TARGET, PassCost
from specsim.draft_shapes.block_plans import BlockPlan


@dataclass(frozen=True)
class RequestCost:
    """Predicted ms of one request (or a sum of requests), by term: ``prefill_ms`` and ``draft_prefill_ms``
    are the first passes over the prompts (fused with the first block), ``draft_ms`` the other draft
    steps, ``verify_ms`` the other target passes, ``overhead_ms`` the engine's work outside the models;
    ``extrapolated`` when a context lies outside the measured grid."""

    tokens: float
    blocks: float
    prefill_ms: float
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    extrapolated: bool = False
    draft_prefill_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.prefill_ms + self.draft_prefill_ms + self.draft_ms + self.verify_ms + self.overhead_ms

    def __add__(self, other: RequestCost) -> RequestCost:
        fields = ("tokens", "blocks", "prefill_ms", "draft_ms", "verify_ms", "overhead_ms")
        return RequestCost(
            *(getattr(self, f) + getattr(other, f) for f in fields),
            extrapolated=self.extrapolated or other.extrapolated,
            draft_prefill_ms=self.draft_prefill_ms + other.draft_prefill_ms,
        )

    def to_json(self) -> dict:
        return asdict(self) | {"total_ms": self.total_ms}


@dataclass(frozen=True)
class BlockMs:
    """Per-block ms of a plan, every pass priced where it runs and none fused with a prefill: the draft's
    first step, its later steps, the verification and the engine's overhead, arrays [blocks]
    (unweighted); ``extrapolated`` when a context lies outside the measured grid."""

    draft_first_ms: np.ndarray
    draft_next_ms: np.ndarray
    verify_ms: np.ndarray
    overhead_ms: np.ndarray
    extrapolated: bool

    @property
    def total_ms(self) -> np.ndarray:
        return self.draft_first_ms + self.draft_next_ms + self.verify_ms + self.overhead_ms


def block_ms(
    cost: PassCost,
    plan: BlockPlan,
    *,
    target_prompt_tokens: float,
    draft_prompt_tokens: float,
    batch: int = 1,
    adaptive: bool = False,
) -> BlockMs:
    """ms of each block of ``plan`` (see the module docstring for where each pass runs), vectorised: the
    blocks of many plans of one prompt can be priced in one call; ``adaptive``: an adaptive ensemble's
    blocks (its weight update is overhead too)."""
    P, D = float(target_prompt_tokens), float(draft_prompt_tokens)
    g, t = plan.drafts, plan.start
    flags = []

    def price(role, rows, ctx, b=1, kind="step"):
        ms, out = cost.pass_ms(role, rows, ctx, b, kind=kind)
        flags.append(bool(np.any(out)))
        return np.asarray(ms, dtype=float)

    has = g > 0
    verify = np.zeros_like(t)
    if has.any():
        verify[has] = price(TARGET, g[has] + 1, P - 1 + t[has])
    if (~has).any():  # a block capped to no drafts verifies one row, like a target-only step
        verify[~has] = price(TARGET, 1, P - 1 + t[~has])
    first = np.zeros_like(t)
    if has.any():
        rows = np.ones(int(has.sum())) if cost.draft_catchup else plan.first_rows[has]
        first[has] = price(DRAFT, rows, D - 1 + t[has] - (rows - 1), batch, FIRST)
    steps = np.maximum(g - 1, 0).astype(np.int64)
    block_of = np.repeat(np.arange(g.size), steps)
    i = np.arange(steps.sum()) - np.repeat(np.cumsum(steps) - steps, steps) + 1
    nxt = np.zeros_like(t)
    if i.size:
        np.add.at(nxt, block_of, price(DRAFT, 1, D - 1 + t[block_of] + i, batch))
    if cost.extra_draft_forwards and has.any():  # the runtime's draft forwards beyond γ, 1 row each
        nxt[has] += cost.extra_draft_forwards * price(DRAFT, 1, D - 1 + t[has], batch)
    if cost.draft_catchup and has.any():  # the draft re-runs the g + 1 verified rows
        nxt[has] += price(DRAFT, g[has] + 1, D - 1 + t[has], batch, CATCHUP)
    overhead = cost.block_overhead_ms(np.maximum(g, 1), batch, P - 1 + t, adaptive=adaptive)
    overhead = overhead + plan.emitted * cost.token_overhead_ms(batch)
    if not cost.first_pass_drafts:  # llama.cpp's loop: a block without drafts is a plain target step
        overhead = np.where(has, overhead, cost.step_overhead_ms(batch))
    return BlockMs(first, nxt, verify, np.broadcast_to(overhead, t.shape), any(flags))


def sd_request_cost(
    cost: PassCost,
    plan: BlockPlan,
    *,
    target_prompt_tokens: float,
    draft_prompt_tokens: float,
    batch: int = 1,
    fused: bool = True,
    adaptive: bool = False,
) -> RequestCost:
    """ms of speculative decoding along ``plan`` (see the module docstring for where each pass runs)."""
    P, D = float(target_prompt_tokens), float(draft_prompt_tokens)
    g, w = plan.drafts, plan.weight
    ms = block_ms(cost, plan, target_prompt_tokens=P, draft_prompt_tokens=D, batch=batch, adaptive=adaptive)
    first, verify = ms.draft_first_ms.copy(), ms.verify_ms.copy()
    flags = [ms.extrapolated]
    prefill = draft_prefill = 0.0
    if fused and g.size:
        value, out = cost.pass_ms(TARGET, P + g[0], 0, 1, kind=PREFILL)
        prefill, verify[0] = float(value), 0.0
        flags.append(bool(np.any(out)))
        if g[0] > 0:
            value, out = cost.pass_ms(DRAFT, D, 0, batch, kind=PREFILL)
            draft_prefill, first[0] = float(value), 0.0
            flags.append(bool(np.any(out)))
    return RequestCost(
        tokens=plan.tokens,
        blocks=plan.blocks,
        prefill_ms=prefill,
        draft_ms=float(np.sum(w * (first + ms.draft_next_ms))),
        verify_ms=float(np.sum(w * verify)),
        overhead_ms=float(np.sum(w * ms.overhead_ms)),
        extrapolated=any(flags),
        draft_prefill_ms=draft_prefill,
    )


def target_request_cost(
    cost: PassCost, *, prompt_tokens: float, new_tokens: float, fused: bool = True
) -> RequestCost:
    """ms of target-only decoding of ``new_tokens`` (a fractional count weighs the last step)."""
    P = float(prompt_tokens)
    count = int(np.ceil(new_tokens - 1e-9))
    w = np.ones(count)
    w[-1] = new_tokens - (count - 1)
    k = np.arange(count, dtype=float)
    ms, out = cost.pass_ms(TARGET, 1, P - 1 + k, 1)
    ms = np.asarray(ms, dtype=float)
    prefill, flag = 0.0, bool(np.any(out))
    if fused:
        prefill, flag0 = cost.pass_ms(TARGET, P, 0, 1, kind=PREFILL)
        ms[0], flag = 0.0, flag or bool(flag0)
    return RequestCost(
        tokens=float(new_tokens),
        blocks=float(new_tokens),
        prefill_ms=float(prefill),
        draft_ms=0.0,
        verify_ms=float(np.sum(w * ms)),
        overhead_ms=float(np.sum(w) * cost.step_overhead_ms()),
        extrapolated=flag,
    )
