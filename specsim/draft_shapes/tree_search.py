"""The best token tree of each size for a given acceptance, and the best tree for a measured cost
(Sequoia, Chen et al. 2024, §3.1: dynamic programming over subtree sizes; hardware-aware by tokens per ms).

V[e][m] = the most expected accepted nodes below an accepted node at depth e with m nodes below it; its
child of rank r with s nodes adds acc[e, r]·(1 + V[e+1][s-1]), and splitting m over ranks is a max-plus
convolution, one (m × s) array per (depth, rank). τ*(n) = 1 + V[0][n] for every n ≤ n_max at once.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import as_acceptance
from specsim.bounds import RANGES
from specsim.draft_shapes.trees import TreeSpec, expected_tokens
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class TreeChoice:
    """A tree with its expected tokens per block ``tau`` and, when a cost was given, its block ms."""

    tree: TreeSpec
    tau: float
    block_ms: float | None = None

    @property
    def tokens_per_ms(self) -> float | None:
        return None if self.block_ms is None else self.tau / self.block_ms

    def to_json(self) -> dict:
        return {
            "tree": str(self.tree),
            "n": self.tree.n,
            "depth": self.tree.depth,
            "tau": self.tau,
            "block_ms": self.block_ms,
        }


def _acceptance_2d(acceptance) -> np.ndarray:
    a = as_acceptance(acceptance)
    if a.ndim != 2:
        raise SpecsimError(f"acceptance: expected one (depth, rank) table here, got shape {a.shape}")
    return a


def _split_over_ranks(acc_row: np.ndarray, gain: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """W_0[k] and the choice table s[r, k] (nodes given to the child of rank r) for k = 0..n."""
    k_max = acc_row.size
    ks = np.arange(n + 1)[:, None]
    ss = np.arange(1, n + 1)[None, :]
    valid = ss <= ks
    w = np.full(n + 1, -np.inf)
    w[0] = 0.0  # past the last rank only an empty allocation is possible
    choice = np.zeros((k_max, n + 1), dtype=np.int64)
    for r in range(k_max - 1, -1, -1):
        finite = np.isfinite(gain)  # 0·(−inf) would be nan where a rank has zero acceptance
        child = np.where(finite, acc_row[r] * np.where(finite, gain, 0.0), -np.inf)  # child[s-1] for s = 1..n
        vals = np.where(valid, child[ss - 1] + w[np.clip(ks - ss, 0, None)], -np.inf)  # (k, s)
        best = np.argmax(vals, axis=1)
        new_w = vals[np.arange(n + 1), best]
        new_w[0] = 0.0  # k = 0: stop here, no child of rank r
        choice[r] = np.where(np.arange(n + 1) > 0, best + 1, 0)
        w = new_w
    return w, choice


def _dp(acc: np.ndarray, n: int, max_depth: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """V [max_depth+1, n+1] and the choice table of every depth (see the module docstring)."""
    depth_rows = acc.shape[0]
    v = np.full((max_depth + 1, n + 1), -np.inf)
    v[max_depth, 0] = 0.0
    choices: list[np.ndarray] = [np.zeros((acc.shape[1], n + 1), dtype=np.int64)] * (max_depth + 1)
    for e in range(max_depth - 1, -1, -1):
        row = acc[min(e + 1, depth_rows) - 1]
        gain = 1.0 + v[e + 1, :n]  # gain[s-1] = 1 + V[e+1][s-1]
        v[e], choices[e] = _split_over_ranks(row, gain, n)
    return v, choices


def _build(choices: list[np.ndarray], n: int) -> TreeSpec:
    """The tree the choice tables pick for n nodes, numbered breadth-first."""
    parents: list[int] = []
    queue = [(0, 0, n)]  # (node, depth, nodes below it)
    while queue:
        nxt = []
        for node, depth, below in queue:
            r, k = 0, below
            while k > 0:
                s = int(choices[depth][r, k])
                parents.append(node)
                nxt.append((len(parents), depth + 1, s - 1))
                k -= s
                r += 1
        queue = nxt
    return TreeSpec(tuple(parents))


def _check_sizes(n_max, max_depth) -> int:
    """The depth bound (default n_max) after checking both."""
    lo, hi = RANGES["tree_nodes"]
    if isinstance(n_max, bool) or not isinstance(n_max, (int, np.integer)) or not lo <= n_max <= hi:
        raise SpecsimError(f"n_max: expected an integer in {lo}..{hi}, got {n_max!r}")
    depth = n_max if max_depth is None else max_depth
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise SpecsimError(f"max_depth: expected an integer >= 1, got {max_depth!r}")
    return int(depth)


def _optimal(acc: np.ndarray, n_max: int, depth: int) -> list[TreeChoice | None]:
    """Best tree per size n = 1..n_max within ``depth`` (None where no tree fits: n > K + K² + ... +
    K^depth)."""
    v, choices = _dp(acc, n_max, depth)
    out: list[TreeChoice | None] = []
    for n in range(1, n_max + 1):
        tree = _build(choices, n) if np.isfinite(v[0, n]) else None
        out.append(None if tree is None else TreeChoice(tree=tree, tau=float(expected_tokens(tree, acc))))
    return out


def optimal_trees(acceptance, n_max: int, *, max_depth: int | None = None) -> list[TreeChoice]:
    """The tree of n nodes with the most expected tokens per block, for n = 1..n_max (item n-1).

    ``acceptance``: (D, K) or (K,) per-depth, per-rank acceptance (:mod:`specsim.draft_shapes.trees`); a node
    has at most K children. ``max_depth`` bounds the depth (draft passes per block); default n_max.
    """
    depth = _check_sizes(n_max, max_depth)
    acc = _acceptance_2d(acceptance)
    out = _optimal(acc, int(n_max), depth)
    if out[-1] is None:
        raise SpecsimError(
            f"n_max: no tree of {n_max} nodes has depth <= {depth} with at most {acc.shape[1]} "
            "children per node (acceptance gives that many ranks)"
        )
    return out


def best_tree(
    acceptance, n_max: int, block_ms: Callable[[TreeSpec], float], *, max_depth: int | None = None
) -> TreeChoice:
    """The tree with the most tokens per ms, τ(tree) / block_ms(tree), over the optimal trees of every
    size n ≤ n_max and every depth bound ≤ max_depth (Sequoia's hardware-aware choice).

    ``block_ms(tree)`` is the block cost (:func:`specsim.predict.tree_costs.tree_block_ms` through a pass
    cost); draft passes grow with depth, so depth is searched too.
    """
    top = min(_check_sizes(n_max, max_depth), int(n_max))
    seen: dict[tuple[int, ...], TreeChoice] = {}
    acc = _acceptance_2d(acceptance)
    for depth in range(1, top + 1):
        for choice in _optimal(acc, int(n_max), depth):
            if choice is not None and choice.tree.parents not in seen:
                ms = float(block_ms(choice.tree))
                if not np.isfinite(ms) or ms <= 0:
                    raise SpecsimError(
                        f"block_ms: expected a positive finite ms for tree {choice.tree}, got {ms}"
                    )
                seen[choice.tree.parents] = TreeChoice(choice.tree, choice.tau, ms)
    return max(seen.values(), key=lambda c: (c.tokens_per_ms, -c.tree.n))
