"""Price requests decoded with a token tree or a draft-length policy, every forward through the pass cost
(:mod:`specsim.costs.pass_cost`) in the engines' cache conventions.

Trees (target prompt P, draft prompt D): the target's prefill over P − 1 tokens runs apart; a block after t
tokens verifies n + 1 rows (``tree.verify``) on P − 1 + t; the draft runs its root pass, then one level pass
per depth (``tree.draft``); each block pays the tree engine's overhead at its n and depth. ``fused=False``
prices the decode phase alone. Policies are chain blocks of varying γ
(:func:`specsim.predict.chain_costs.sd_request_cost`). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from specsim.costs.pass_cost import DRAFT, FIRST, PREFILL, STEP, TARGET, TREE, PassCost
from specsim.draft_shapes.block_plans import BlockPlan
from specsim.draft_shapes.draft_plans import TreeBlockPlan, TreePlan
from specsim.draft_shapes.trees import TreeSpec, draft_pass_rows
from specsim.predict.chain_costs import RequestCost, sd_request_cost


class _Forwards:
    """Forwards to price, collected per (role, kind) and term, then priced with one call per kind."""

    def __init__(self):
        self.queries: dict[tuple[str, str], list[tuple[float, float, float, str]]] = defaultdict(list)

    def add(self, role: str, kind: str, rows: float, context: float, batch: float, term: str) -> None:
        self.queries[role, kind].append((rows, context, batch, term))

    def price(self, cost: PassCost) -> tuple[dict[str, float], bool]:
        terms: dict[str, float] = defaultdict(float)
        outside = False
        for (role, kind), items in self.queries.items():
            rows, ctx, batch, labels = zip(*items)
            ms, out = cost.pass_ms(role, np.array(rows), np.array(ctx), np.array(batch), kind=kind)
            outside |= bool(np.any(out))
            for term, value in zip(labels, np.atleast_1d(ms)):
                terms[term] += float(value)
        return terms, outside


def tree_request_cost(
    cost: PassCost,
    plan: TreePlan,
    *,
    target_prompt_tokens: float,
    draft_prompt_tokens: float,
    batch: int = 1,
    fused: bool = True,
) -> RequestCost:
    """ms of tree decoding along ``plan`` (see the module docstring for where each pass runs)."""
    cost.measured_rows(TARGET, TREE)  # a source without token-tree passes says so before anything is priced
    P, D = float(target_prompt_tokens), float(draft_prompt_tokens)
    f = _Forwards()
    overhead = 0.0
    if fused and P > 1:
        f.add(TARGET, PREFILL, P - 1, 0, 1, "prefill_ms")
    for k, b in enumerate(plan.steps):
        if b.tree is None:
            f.add(TARGET, STEP, 1, P - 1 + b.start, 1, "verify_ms")
            overhead += cost.step_overhead_ms()
            continue
        if fused and k == 0:
            f.add(DRAFT, PREFILL, D, 0, batch, "draft_prefill_ms")
        else:
            f.add(DRAFT, FIRST, b.root_rows, D + b.start - b.root_rows, batch, "draft_ms")
        fed = D + b.start
        for m in draft_pass_rows(b.tree)[1:]:
            f.add(DRAFT, TREE, m, fed, batch, "draft_ms")
            fed += m
        f.add(TARGET, TREE, b.tree.n + 1, P - 1 + b.start, 1, "verify_ms")
        overhead += cost.tree_overhead_ms(b.tree, batch, P - 1 + b.start)
    terms, outside = f.price(cost)
    return RequestCost(
        tokens=plan.tokens,
        blocks=plan.blocks,
        prefill_ms=terms["prefill_ms"],
        draft_ms=terms["draft_ms"],
        verify_ms=terms["verify_ms"],
        overhead_ms=overhead,
        extrapolated=outside,
        draft_prefill_ms=terms["draft_prefill_ms"],
    )


def plan_cost(
    cost: PassCost,
    plan: BlockPlan | TreePlan,
    *,
    target_prompt_tokens: float,
    draft_prompt_tokens: float,
    batch: int = 1,
    fused: bool = True,
    adaptive: bool = False,
) -> RequestCost:
    """ms of a chain or policy plan (:func:`specsim.predict.chain_costs.sd_request_cost`; ``adaptive``: an
    adaptive ensemble's) or a tree plan (:func:`tree_request_cost`)."""
    kw = {
        "target_prompt_tokens": target_prompt_tokens,
        "draft_prompt_tokens": draft_prompt_tokens,
        "batch": batch,
        "fused": fused,
    }
    if isinstance(plan, TreePlan):
        return tree_request_cost(cost, plan, **kw)
    return sd_request_cost(cost, plan, adaptive=adaptive, **kw)


def tree_block_ms(
    cost: PassCost, tree: TreeSpec, *, target_context: float, draft_context: float, batch: int = 1
) -> float:
    """ms of one decode-phase block of ``tree`` (root pass of 1 row, level passes, verification, overhead)
    whose target cache holds ``target_context`` positions and the draft's ``draft_context`` before the
    root."""
    plan = TreePlan((TreeBlockPlan(start=0, tree=tree, emitted=1, root_rows=1),))
    return tree_request_cost(
        cost,
        plan,
        target_prompt_tokens=target_context + 1,
        draft_prompt_tokens=draft_context + 1,
        batch=batch,
        fused=False,
    ).total_ms
