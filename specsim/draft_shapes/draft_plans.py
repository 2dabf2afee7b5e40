"""The blocks of one traced request for a fixed γ, a token tree or a draft-length policy: the engines' exact
greedy schedules (:func:`draft_plan`), each block's drafting capped at the request's max new tokens.

Chains and policies give a :class:`specsim.draft_shapes.block_plans.BlockPlan` (adaptive ensembles: weights
re-run block by block, :mod:`specsim.draft_shapes.adaptive`); trees a :class:`TreePlan` of
:class:`TreeBlockPlan` (boundaries from :func:`specsim.draft_shapes.tree_replay.accepted_from_each_start`).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.draft_shapes.adaptive import adaptive_plan
from specsim.draft_shapes.block_plans import BlockPlan, greedy_plan, plan_of_blocks, token_budget
from specsim.draft_shapes.policies import GammaPolicy, as_policy, parse_policy, replay_policy_blocks
from specsim.draft_shapes.tree_replay import accepted_from_each_start, rank_arrays
from specsim.draft_shapes.trees import TreeSpec, parse_tree
from specsim.errors import SpecsimError
from specsim.jsonio import show

Draft = int | TreeSpec | GammaPolicy  # a fixed γ, a token tree or a draft-length policy


def parse_drafts(trees, policies) -> list:
    """The token trees of --tree and the draft-length policies of --policy (texts), each once: a repeat,
    however spelt, is one run (it was priced, or run, twice). Errors name the option."""
    drafts = []
    for option, parse, texts in (("--tree", parse_tree, trees), ("--policy", parse_policy, policies)):
        for text in texts or []:
            try:
                drafts.append(parse(text))
            except SpecsimError as err:  # named by its option once (a policy's error names it already)
                said = str(err)
                raise SpecsimError(
                    said if said.startswith(option) else f"{option} {show(text)}: {said}"
                ) from None
    return list(dict.fromkeys(drafts))


def draft_label(draft: Draft) -> str:
    """ "γ=3", "tree:4,2,1" or "policy:heuristic:5" (how tables and check rows name a run)."""
    if isinstance(draft, TreeSpec):
        return f"tree:{draft}"
    if isinstance(draft, GammaPolicy):
        return f"policy:{draft}"
    return f"γ={int(draft)}"


def draft_gamma(draft: Draft) -> int:
    """The γ a check or prediction row carries: the fixed γ, a tree's node count, a policy's starting γ (≥
    1)."""
    if isinstance(draft, TreeSpec):
        return draft.n
    return max(1, int(getattr(draft, "gamma", draft)))


# --------------------------------------------------------------------------- plans
@dataclass(frozen=True)
class TreeBlockPlan:
    """One tree block: tokens emitted before it, its tree after the end-of-request cut (None: one target
    step), tokens it emits, and the rows of the draft's root pass."""

    start: int
    tree: TreeSpec | None
    emitted: int
    root_rows: int


@dataclass(frozen=True)
class TreePlan:
    """The blocks of one request decoded with a token tree (``steps``; ``tokens``, ``blocks`` and
    ``draft_tokens`` as :class:`specsim.draft_shapes.block_plans.BlockPlan` has them)."""

    steps: tuple[TreeBlockPlan, ...]

    @property
    def tokens(self) -> float:
        return float(sum(b.emitted for b in self.steps))

    @property
    def blocks(self) -> float:
        return float(len(self.steps))

    @property
    def draft_tokens(self) -> float:
        """Tree nodes drafted over the plan."""
        return float(sum(b.tree.n for b in self.steps if b.tree is not None))

    def after_first(self) -> TreePlan:
        return TreePlan(self.steps[1:])


def tree_plan(ranks, tree: TreeSpec, max_new_tokens: int | None = None) -> TreePlan:
    """The tree engine's blocks for one greedy top-k trace (its ``draft_rank``): block boundaries from
    :func:`specsim.draft_shapes.tree_replay.accepted_from_each_start`, each block's tree cut to depth
    ≤ max_new − 1 − t."""
    r = rank_arrays([ranks])[0]
    n = r.size
    budget = token_budget(n, max_new_tokens)
    accepted, node = accepted_from_each_start(r, tree, with_nodes=True)
    has_kids = np.array([bool(k) for k in tree.children()])
    depths = tree.depths
    blocks, t, root = [], 0, 1
    while t < n:
        cut = budget - 1 - t
        sub = tree if cut >= tree.depth else tree.truncated(cut)
        a = int(accepted[t]) if sub is not None else 0
        blocks.append(TreeBlockPlan(start=t, tree=sub, emitted=min(a + 1, n - t), root_rows=root))
        u = int(node[t])
        root = 2 if a > 0 and (not has_kids[u] or depths[u] >= cut) else 1  # the path ended on an unfed leaf
        t += a + 1
    return TreePlan(tuple(blocks))


def policy_plan(trace, policy, max_new_tokens: int | None = None) -> BlockPlan:
    """The chain engine's blocks under a draft-length policy
    (:func:`specsim.draft_shapes.policies.replay_policy_blocks`), in
    :func:`specsim.draft_shapes.block_plans.greedy_plan`'s form: the draft's first step feeds 2 rows after a
    block
    that accepted every draft it proposed."""
    n = len(getattr(trace, "match", trace))
    blocks = replay_policy_blocks(trace, as_policy(policy), max_new_tokens)  # it checks the budget
    return plan_of_blocks(((b.start, b.proposed, b.accepted) for b in blocks), n)


def draft_plan(draft: Draft, trace, max_new_tokens: int | None = None) -> BlockPlan | TreePlan:
    """The engine's exact greedy schedule of one traced request for a fixed γ, a tree or a policy (an
    adaptive ensemble's chains and policies from its :class:`specsim.draft_shapes.adaptive.AdaptiveTrace`; its
    trees
    from the per-token ``match``, an approximation)."""
    if isinstance(draft, TreeSpec):
        return tree_plan(trace, draft, max_new_tokens)
    if getattr(trace, "adaptive", None) is not None:  # an adaptive ensemble: its weights re-run per block
        return adaptive_plan(trace.adaptive, draft, max_new_tokens)
    if isinstance(draft, GammaPolicy):
        return policy_plan(trace, draft, max_new_tokens)
    match = getattr(trace, "match", trace)
    if match is None:
        raise SpecsimError("trace: expected a greedy trace with 'match' (0/1 per position)")
    return greedy_plan(match, int(draft), max_new_tokens)
