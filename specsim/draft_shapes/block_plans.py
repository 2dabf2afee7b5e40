"""The blocks of one request: which block starts where, how many drafts it proposes and how many tokens it
emits (a :class:`BlockPlan`), from an exact greedy trace (:func:`greedy_plan`, the engine's schedule) or from
τ alone (:func:`expected_plan`).

The greedy plan is the same schedule :mod:`specsim.acceptance.replay` counts, with γ capped at tokens-left − 1
as the engine caps it; trees, policies and adaptive ensembles build their plans in the other modules of
this package. Pricing a plan is :mod:`specsim.predict`'s work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError


@dataclass(frozen=True)
class BlockPlan:
    """The blocks of one request: tokens emitted before each (``start``), drafts ``g``, tokens it emits,
    rows of the draft's first step (1, or 2 after a fully accepted block; an expectation in expected
    plans; 0 in a block without drafts) and a weight (1; a fraction for the last block of an expected
    plan)."""

    start: np.ndarray
    drafts: np.ndarray
    emitted: np.ndarray
    first_rows: np.ndarray
    weight: np.ndarray

    @property
    def tokens(self) -> float:
        return float(np.sum(self.emitted * self.weight))

    @property
    def blocks(self) -> float:
        return float(np.sum(self.weight))

    @property
    def draft_tokens(self) -> float:
        """Drafts proposed over the plan."""
        return float(np.sum(self.drafts * self.weight))

    def after_first(self) -> BlockPlan:
        """The plan without its first block (the decode phase of a fused request)."""
        return BlockPlan(
            *(a[1:] for a in (self.start, self.drafts, self.emitted, self.first_rows, self.weight))
        )


def token_budget(n_tokens: int, max_new_tokens: int | None) -> int:
    """The request's max new tokens (default: the trace's ``n_tokens``); SpecsimError when below the trace."""
    budget = n_tokens if max_new_tokens is None else int(max_new_tokens)
    if budget < n_tokens:
        raise SpecsimError(f"max_new_tokens: expected >= the trace's {n_tokens} tokens, got {budget}")
    return budget


def refuse_short_budget(traces, max_new_tokens: int | None, option: str = "--max-new-tokens") -> None:
    """SpecsimError, naming ``option``, when ``max_new_tokens`` is below a greedy trace's length (new tokens):
    that request was decoded under a larger cap, so no run under this one can replay it."""
    longest = max((len(t.match) for t in traces if t.match is not None), default=0)
    if max_new_tokens is not None and max_new_tokens < longest:
        raise SpecsimError(
            f"{option}: expected >= {longest} (the longest traced request's new tokens), got {max_new_tokens}"
        )


def plan_of_blocks(blocks, n_tokens: int) -> BlockPlan:
    """The :class:`BlockPlan` of a replayed trace of ``n_tokens`` positions from its blocks' (start, drafts,
    accepted): each emits its accepted drafts and the target's token (capped at the trace's end); the
    draft's first step feeds 2 rows after a block that accepted every draft it proposed, 0 without drafts."""
    rows, full = [], False
    for start, drafts, accepted in blocks:
        rows.append((start, drafts, min(accepted + 1, n_tokens - start), (2 if full else 1) if drafts else 0))
        full = accepted == drafts
    a = np.asarray(rows, dtype=float).reshape(-1, 4)
    return BlockPlan(a[:, 0], a[:, 1], a[:, 2], a[:, 3], np.ones(len(rows)))


def match_runs(match) -> np.ndarray:
    """run[t] = consecutive matches starting at t of a greedy trace's 0/1 ``match``."""
    m = np.asarray(match, dtype=bool)
    run = np.zeros(m.size + 1, dtype=np.int64)
    for t in range(m.size - 1, -1, -1):  # one pass; traces are short (≤ a few thousand positions)
        run[t] = run[t + 1] + 1 if m[t] else 0
    return run[:-1]


def greedy_plan(match, gamma: int, max_new_tokens: int | None = None) -> BlockPlan:
    """The engine's blocks for one greedy trace at γ: a block starting at t drafts g = min(γ, max_new − t −
    1), accepts the run of matches from t (capped at g), and emits that run plus the target's token."""
    m = np.asarray(match, dtype=bool)
    n = m.size
    max_new = token_budget(n, max_new_tokens)
    run = match_runs(m)
    blocks, t = [], 0
    while t < n:
        g = max(0, min(gamma, max_new - t - 1))
        accepted = min(int(run[t]), g, n - t)
        blocks.append((t, g, accepted))
        t += min(accepted + 1, n - t)
    return plan_of_blocks(blocks, n)


def expected_plan(tau: float, gamma: int, new_tokens: int, full_rate: float = 0.0) -> BlockPlan:
    """N tokens in blocks of τ: block k starts at k·τ; the last block carries the fractional remainder, and
    N < τ tokens are one block that emits N (a request has a block at least). ``full_rate`` = P(a block
    accepts all γ drafts), the expected share of 2-row first draft steps."""
    if not 1.0 <= tau <= gamma + 1 + 1e-9:
        raise SpecsimError(f"tau: expected 1 <= tau <= gamma+1 = {gamma + 1}, got {tau}")
    if 0 < new_tokens < tau:  # a fraction of a τ-block would price a fraction of its passes
        one = np.ones(1)
        return BlockPlan(0 * one, gamma * one, new_tokens * one, (1.0 + float(full_rate)) * one, one)
    blocks = new_tokens / tau
    count = int(np.ceil(blocks - 1e-9))
    weight = np.ones(count)
    weight[-1] = blocks - (count - 1)
    start = np.arange(count) * tau
    first = np.full(count, 1.0 + float(full_rate))
    return BlockPlan(start, np.full(count, float(gamma)), np.full(count, tau), first, weight)
