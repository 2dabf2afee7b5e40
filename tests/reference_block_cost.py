"""A second, deliberately plain pricing of replayed blocks, for tests only: each block summed from
``target_ms(rows, context)`` and ``draft_ms(rows, context)`` callables (one forward pass's ms), no grids,
no pass-cost interface. The package prices through :mod:`specsim.costs.pass_cost`; these check it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specsim.draft_shapes.policies import replay_policy_blocks
from specsim.draft_shapes.tree_replay import rank_arrays, replay_tree_blocks
from specsim.draft_shapes.trees import TreeSpec, chain_tree, draft_pass_rows

CostFn = Callable[[int, float], float]  # (rows, context_tokens) -> ms of one forward pass


def tree_block_ms(tree: TreeSpec, *, target_ms: CostFn, draft_ms: CostFn, context_tokens: float) -> float:
    """One block of ``tree``: Σ_ℓ draft_ms(rows_ℓ, ctx + fed before ℓ) + target_ms(n+1, ctx), ms."""
    rows = draft_pass_rows(tree)
    fed = np.concatenate([[0], np.cumsum(rows)[:-1]])
    draft = sum(float(draft_ms(r, context_tokens + f)) for r, f in zip(rows, fed))
    return draft + float(target_ms(tree.n + 1, context_tokens))


def chain_block_ms(gamma: int, *, target_ms: CostFn, draft_ms: CostFn, context_tokens: float) -> float:
    """One chain block of γ drafts, Σ_{i<γ} draft_ms(1, ctx+i) + target_ms(γ+1, ctx); γ = 0: a target step."""
    if gamma == 0:
        return float(target_ms(1, context_tokens))
    return tree_block_ms(
        chain_tree(gamma), target_ms=target_ms, draft_ms=draft_ms, context_tokens=context_tokens
    )


def replay_tree_decode_ms(traces, tree: TreeSpec, *, target_ms: CostFn, draft_ms: CostFn, prompt_tokens):
    """Decode-phase ms of each prompt under greedy ``tree`` decoding, the tree cut at the request's end."""
    ranks = rank_arrays(traces)
    prompts = np.broadcast_to(np.asarray(prompt_tokens, dtype=float), (len(ranks),))
    out = np.zeros(len(ranks))
    for j, r in enumerate(ranks):
        for b in replay_tree_blocks(r, tree):
            cut = tree.truncated(r.size - 1 - b.start)
            ctx = prompts[j] + b.start
            if cut is None:
                out[j] += float(target_ms(1, ctx))
            else:
                out[j] += tree_block_ms(cut, target_ms=target_ms, draft_ms=draft_ms, context_tokens=ctx)
    return out


def replay_policy_decode_ms(traces, policy, *, target_ms: CostFn, draft_ms: CostFn, prompt_tokens):
    """Decode-phase ms of each prompt under ``policy``: Σ over replayed blocks of :func:`chain_block_ms`."""
    prompts = np.broadcast_to(np.asarray(prompt_tokens, dtype=float), (len(traces),))
    return np.array(
        [
            sum(
                chain_block_ms(
                    b.proposed, target_ms=target_ms, draft_ms=draft_ms, context_tokens=prompts[j] + b.start
                )
                for b in replay_policy_blocks(t, policy)
            )
            for j, t in enumerate(traces)
        ]
    )
