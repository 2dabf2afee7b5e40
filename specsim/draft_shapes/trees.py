"""Token trees: the spec format, expected tokens per block from per-depth, per-rank acceptance, and
the block cost of a tree.

A tree (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024) has a root, the pending token, and n draft
nodes; a node's r-th child is the draft's r-th candidate. One target pass verifies n+1 positions, so
"chain:γ" is the tree with n = γ. Specs (:func:`parse_tree`): ``"4,2,1"``, ``"chain:5"``,
``"parents:0,0,1,1,3"``. With acc[d-1, r] = P(the depth-d token is the r-th candidate | parent accepted),
τ(tree) = 1 + Σ_u Π_{v on root→u} acc[depth(v)-1, rank(v)]. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import as_acceptance
from specsim.errors import SpecsimError
from specsim.jsonio import check_schema_version, show

SCHEMA_VERSION = 1
MAX_NODES = 1024  # a bigger tree is a typo ("8,8,8,8,8" has 37448 nodes), not a plan


@dataclass(frozen=True)
class TreeSpec:
    """A token tree as the parent of each draft node: ``parents[i-1]`` is node i's parent (root 0).

    Nodes are numbered in a topological order (a parent before its children); the engine feeds
    them to the target in this order after the pending token.
    """

    parents: tuple[int, ...]

    def __post_init__(self):
        ps = self.parents
        if not isinstance(ps, tuple) or not ps or len(ps) > MAX_NODES:
            raise SpecsimError(
                f"tree: expected 1..{MAX_NODES} nodes, got {len(ps) if isinstance(ps, tuple) else ps!r}"
            )
        for i, p in enumerate(ps, start=1):
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < i:
                raise SpecsimError(f"tree: node {i}'s parent must be an earlier node 0..{i - 1}, got {p!r}")

    # ------------------------------------------------------------------ structure
    @property
    def n(self) -> int:
        """Draft nodes (the root, the pending token, not counted)."""
        return len(self.parents)

    @property
    def parent_array(self) -> np.ndarray:
        """Parent of every node, root included (root's parent is -1), shape (n+1,)."""
        return np.array((-1, *self.parents), dtype=np.int64)

    @property
    def depths(self) -> np.ndarray:
        """Depth of every node (root 0), shape (n+1,)."""
        d = np.zeros(self.n + 1, dtype=np.int64)
        for i, p in enumerate(self.parents, start=1):
            d[i] = d[p] + 1
        return d

    @property
    def ranks(self) -> np.ndarray:
        """Rank of every node among its siblings (root 0), shape (n+1,)."""
        r = np.zeros(self.n + 1, dtype=np.int64)
        count = np.zeros(self.n + 1, dtype=np.int64)
        for i, p in enumerate(self.parents, start=1):
            r[i] = count[p]
            count[p] += 1
        return r

    @property
    def depth(self) -> int:
        """Depth of the deepest node: the most drafts a block can accept."""
        return int(self.depths.max())

    def children(self) -> list[list[int]]:
        """Children of every node in rank order, root included."""
        out: list[list[int]] = [[] for _ in range(self.n + 1)]
        for i, p in enumerate(self.parents, start=1):
            out[p].append(i)
        return out

    def child_table(self) -> np.ndarray:
        """child[u, r] = the node of rank r under u, or -1; shape (n+1, max branching + 1), the last
        column all -1 (a rank past the widest node)."""
        kids = self.children()
        table = np.full((self.n + 1, max(len(k) for k in kids) + 1), -1, dtype=np.int64)
        for u, k in enumerate(kids):
            table[u, : len(k)] = k
        return table

    def ancestors(self) -> np.ndarray:
        """anc[i, j] = node j is node i or one of its ancestors; bool (n+1, n+1), the tree attention mask."""
        anc = np.eye(self.n + 1, dtype=bool)
        for i, p in enumerate(self.parents, start=1):
            anc[i] |= anc[p]
        return anc

    def expanded_levels(self) -> list[list[int]]:
        """Per depth ℓ = 0..depth-1, the nodes at ℓ that have children, in node order: the draft feeds
        these in pass ℓ to get their children's candidates (pass 0 is the root)."""
        kids = self.children()
        d = self.depths
        levels: list[list[int]] = [[] for _ in range(self.depth)]
        for u in range(self.n + 1):
            if kids[u]:
                levels[d[u]].append(u)
        return levels

    def truncated(self, max_depth: int) -> TreeSpec | None:
        """The subtree of nodes at depth ≤ ``max_depth`` (None when that leaves no node)."""
        keep = np.flatnonzero(self.depths <= max_depth)
        if keep.size <= 1:
            return None
        if keep.size == self.n + 1:
            return self
        new_index = {int(u): i for i, u in enumerate(keep)}
        return TreeSpec(tuple(new_index[self.parents[u - 1]] for u in keep[1:].tolist()))

    # ------------------------------------------------------------------ text
    def __str__(self) -> str:
        b = self.branching()
        if b is not None:
            return f"chain:{len(b)}" if all(x == 1 for x in b) else ",".join(map(str, b))
        return "parents:" + ",".join(map(str, self.parents))

    def branching(self) -> tuple[int, ...] | None:
        """(b_1, ..., b_L) when every node at depth ℓ-1 has b_ℓ children and the numbering is
        breadth-first (the tree :func:`parse_tree` builds from "b_1,...,b_L"); else None."""
        kids = self.children()
        d = self.depths
        b = []
        for level in range(self.depth):
            sizes = {len(kids[u]) for u in range(self.n + 1) if d[u] == level}
            if len(sizes) != 1 or 0 in sizes:
                return None
            b.append(sizes.pop())
        return tuple(b) if self == branching_tree(b) else None

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "spec": str(self), "parents": list(self.parents)}

    @classmethod
    def from_json(cls, d: dict, where: str = "tree") -> TreeSpec:
        check_schema_version(d, SCHEMA_VERSION, where)
        parents = d.get("parents")
        if not isinstance(parents, list):
            raise SpecsimError(f"{where}.parents: expected a list of integers, got {parents!r}")
        return cls(tuple(parents))


def branching_tree(branching) -> TreeSpec:
    """The breadth-first tree where every node at depth ℓ-1 has ``branching[ℓ-1]`` children."""
    parents: list[int] = []
    level = [0]
    for b in branching:
        if (
            len(parents) + len(level) * b > MAX_NODES
        ):  # checked before building: "1000000" is a typo, not a plan
            raise SpecsimError(
                f"tree: expected at most {MAX_NODES} nodes, got more from branching {show(list(branching))}"
            )
        nxt = []
        for u in level:
            for _ in range(b):
                parents.append(u)
                nxt.append(len(parents))
        level = nxt
    return TreeSpec(tuple(parents))


def chain_tree(gamma: int) -> TreeSpec:
    """The chain of γ drafts as a tree (n = γ)."""
    if not 1 <= int(gamma) <= MAX_NODES:
        raise SpecsimError(f"tree: expected a chain of 1..{MAX_NODES} drafts, got {gamma!r}")
    return TreeSpec(tuple(range(int(gamma))))


def parse_tree(text: str) -> TreeSpec:
    """A tree from "4,2,1" (branching per depth), "chain:5" or "parents:0,0,1,1,3" (see the module
    docstring)."""
    raw = str(text).strip()
    expected = "expected a tree like '4,2,1' (branching per depth), 'chain:5' or 'parents:0,0,1'"
    kind, _, body = raw.rpartition(":")
    try:
        values = [int(x) for x in body.split(",")]
    except ValueError:
        raise SpecsimError(f"tree: {expected}, got {show(raw)}") from None
    if kind == "chain" and len(values) == 1 and values[0] >= 1:
        return chain_tree(values[0])
    if kind == "parents":
        return TreeSpec(tuple(values))
    if kind == "" and values and all(v >= 1 for v in values):
        return branching_tree(values)
    raise SpecsimError(f"tree: {expected}, got {show(raw)}")


# --------------------------------------------------------------------------- expected tokens


def node_probabilities(tree: TreeSpec, acceptance) -> np.ndarray:
    """P(node u accepted) for every node (root = 1), shape (..., n+1); batch axes from ``acceptance``."""
    a = as_acceptance(acceptance)
    depth_rows, k = a.shape[-2:]
    ranks, depths, parents = tree.ranks, tree.depths, tree.parent_array
    if ranks.max() >= k:
        raise SpecsimError(
            f"acceptance: tree {tree} has a node of rank {int(ranks.max())} but acceptance gives "
            f"ranks 0..{k - 1} only"
        )
    per_node = a[..., np.minimum(depths, depth_rows) - 1, ranks]  # (..., n+1); the root's column is unused
    prob = np.ones(a.shape[:-2] + (tree.n + 1,))
    for level in range(1, tree.depth + 1):  # a parent is one level up, so it is final before its children
        nodes = np.flatnonzero(depths == level)
        prob[..., nodes] = prob[..., parents[nodes]] * per_node[..., nodes]
    return prob


def expected_tokens(tree: TreeSpec, acceptance):
    """τ(tree) = 1 + Σ_u P(u accepted): tokens per block, bonus included (vectorised over acceptance
    batches)."""
    out = node_probabilities(tree, acceptance).sum(axis=-1)
    return out if np.ndim(out) else float(out)


def rank_acceptance_iid(alpha, k: int) -> np.ndarray:
    """A one-row acceptance where the target's token is rank r with probability (1-α)^r·α, r < k
    (geometric ranks; rank 0 is the chain's α). For synthetic checks and what-ifs."""
    a = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > 1) or k < 1:
        raise SpecsimError(f"alpha and k: expected 0 <= alpha <= 1 and k >= 1, got {alpha!r}, {k!r}")
    r = np.arange(k)
    return (a[..., None] * (1 - a[..., None]) ** r)[..., None, :]


# --------------------------------------------------------------------------- cost
def draft_pass_rows(tree: TreeSpec) -> list[int]:
    """Rows of each draft pass of a block: pass ℓ feeds the nodes at depth ℓ that have children
    (pass 0 feeds the pending token); the leaves are never fed, as the chain's last draft is not."""
    return [len(level) for level in tree.expanded_levels()]
