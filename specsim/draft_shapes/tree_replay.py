"""Exact greedy replay of token trees from top-k traces, and per-rank acceptance estimated from them.

``draft_rank[t]`` is the rank of the target's token in the draft's greedy distribution at output position t
(teacher-forced). A block starting at t accepts its depth-1 node of rank R[t] if the root has one, then that
node's child of rank R[t+1], and so on: every context on the path is the teacher-forced one, so the walk is
exact. As in the engine, no block accepts the request's last token as a draft, so "chain:γ" matches
:mod:`specsim.acceptance.replay`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.acceptance.replay import trace_arrays
from specsim.draft_shapes.trees import TreeSpec, rank_acceptance_iid
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class ReplayBlock:
    """One replayed block: output position it starts at, drafts proposed (tree nodes after the
    end-of-request cut, or γ), drafts accepted, and tokens emitted (accepted + 1)."""

    start: int
    proposed: int
    accepted: int

    @property
    def emitted(self) -> int:
        return self.accepted + 1


def _as_ranks(r, where: str) -> np.ndarray:
    r = np.asarray(r)
    if r.ndim != 1 or (r.size and (r.dtype.kind not in "iu" or r.min() < 0)):
        raise SpecsimError(f"{where}: expected a 1-D array of integers >= 0")
    return r.astype(np.int64)


def rank_arrays(traces) -> list[np.ndarray]:
    """``draft_rank`` arrays of ``Trace`` objects (or plain integer sequences), validated."""
    return trace_arrays(
        traces,
        "draft_rank",
        _as_ranks,
        "no draft_rank (run 'specsim calibrate acceptance --top-k K' for tree replay)",
    )


def accepted_from_each_start(ranks: np.ndarray, tree: TreeSpec, *, with_nodes: bool = False):
    """a[t] = drafts a block starting at output position t accepts (before the end-of-request cut
    a[t] ≤ N-1-t, which this includes), for all t at once; with ``with_nodes`` also the node each walk
    ends on (0 = the root: nothing accepted)."""
    n_pos = ranks.size
    table = tree.child_table()
    last_col = table.shape[1] - 1
    t = np.arange(n_pos)
    node = np.zeros(n_pos, dtype=np.int64)
    alive = np.ones(n_pos, dtype=bool)
    accepted = np.zeros(n_pos, dtype=np.int64)
    for d in range(tree.depth):
        pos = t + d
        inside = pos <= n_pos - 2  # the last token of the request always comes from the target
        r = np.minimum(ranks[np.minimum(pos, n_pos - 1)], last_col)
        child = table[node, r]
        alive &= inside & (child >= 0)
        node = np.where(alive, child, node)
        accepted += alive
        if not alive.any():
            break
    return (accepted, node) if with_nodes else accepted


def replay_tree_blocks(ranks, tree: TreeSpec) -> list[ReplayBlock]:
    """The blocks greedy tree decoding spends on one prompt's trace, in order."""
    r = rank_arrays([ranks])[0]
    acc = accepted_from_each_start(r, tree)
    depths = tree.depths
    blocks, t = [], 0
    while t < r.size:
        cut = r.size - 1 - t  # tokens left − 1: the engine's depth bound for this block
        proposed = int(np.count_nonzero((depths > 0) & (depths <= cut)))
        blocks.append(ReplayBlock(start=t, proposed=proposed, accepted=int(acc[t])))
        t += int(acc[t]) + 1
    return blocks


def replay_tree_blocks_per_prompt(traces, tree: TreeSpec) -> np.ndarray:
    """Blocks greedy decoding with ``tree`` spends on each prompt (int array, one per trace)."""
    return np.array([len(replay_tree_blocks(r, tree)) for r in rank_arrays(traces)], dtype=np.int64)


def replay_tree_tau(traces, tree: TreeSpec) -> float:
    """τ of ``tree`` over all prompts = tokens emitted / blocks."""
    ranks = rank_arrays(traces)
    tokens = sum(r.size for r in ranks)
    if tokens == 0:
        raise SpecsimError("traces: expected at least one position, got only empty traces")
    return tokens / float(replay_tree_blocks_per_prompt(ranks, tree).sum())


def rank_acceptance(traces, k: int) -> np.ndarray:
    """Per-rank acceptance (1, k) pooled over all positions: row[r] = share of positions whose target
    token has draft rank r (Sequoia's positional acceptance vector, measured teacher-forced). Depth
    is not separated: the context of each position is the target's own, whatever the tree."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SpecsimError(f"k: expected an integer >= 1, got {k!r}")
    ranks = np.concatenate(rank_arrays(traces))
    if ranks.size == 0:
        raise SpecsimError("traces: expected at least one position, got only empty traces")
    return (np.bincount(np.minimum(ranks, k), minlength=k + 1)[:k] / ranks.size)[None, :]


# --------------------------------------------------------------------------- per-rank acceptance of a method
@dataclass(frozen=True)
class TreeMethod:
    """A drafting method for the tree planner (:mod:`specsim.hardware.tree_plan`): per-rank acceptance
    (D, K), its draft batch (ensemble members) and where the acceptance came from."""

    method: str
    acceptance: np.ndarray
    draft_batch_size: int = 1
    source: str = ""


def tree_methods(entries, *, alpha: float | None = None, ranks: int = 8) -> list[TreeMethod]:
    """Per-rank acceptance of each method for ``ranks`` ranks: i.i.d. geometric ranks from ``alpha`` when
    given (:func:`~specsim.draft_shapes.trees.rank_acceptance_iid`), else each profile entry's from its
    top-k traces (:func:`rank_acceptance`)."""
    if alpha is not None:
        return [TreeMethod("user", rank_acceptance_iid(alpha, ranks), 1, f"iid ranks, alpha={alpha:g}")]
    out = []
    for e in entries:
        traces = [t for t in e.traces if t.draft_rank is not None]
        if not traces:
            raise SpecsimError(
                f"--trees: method {e.method!r} ({e.scenario}) has no top-k traces (run 'specsim "
                "calibrate acceptance --top-k K'), or pass --alpha for i.i.d. ranks"
            )
        out.append(
            TreeMethod(
                e.method,
                rank_acceptance(traces, ranks),
                e.draft_batch_size,
                f"per-rank acceptance of {len(traces)} traces ({e.scenario})",
            )
        )
    return out
