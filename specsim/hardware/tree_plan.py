"""Hardware planning for token trees: the best tree per device, batch and context (Sequoia, Chen et al. 2024:
the best tree depends on the hardware through the cost of verifying n tokens).

A tree block is priced as :mod:`specsim.hardware.plan_rows` prices a chain's (draft passes under the drafting
kind, Tv(n) over n+1 rows, the block terms); τ(tree) from per-rank acceptance; candidates: the optimal trees
of every size n ≤ n_max and depth ≤ max_depth, chains included; speedup = τ·T / block, T the target step.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from specsim.costs.pass_cost import DRAFT, FIRST, TARGET, TREE
from specsim.draft_shapes.tree_replay import TreeMethod
from specsim.draft_shapes.trees import TreeSpec, chain_tree, draft_pass_rows, expected_tokens
from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.roofline import Efficiency
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.report import format_table


@dataclass(frozen=True)
class TreePlanRow:
    """The best tree and the best chain on one device at one (method, batch, context)."""

    device: str
    method: str
    batch_size: int
    context_tokens: int
    best_tree: str
    nodes: int
    depth: int
    tau: float
    speedup: float
    chain_gamma: int
    chain_tau: float
    chain_speedup: float
    target_ms_per_step: float

    def to_json(self) -> dict:
        return asdict(self)


def candidate_trees(acceptance, n_max: int = 64, max_depth: int = 10, gamma_max: int = 8) -> list[TreeSpec]:
    """The optimal trees of every size ≤ ``n_max`` for every depth bound ≤ ``max_depth`` (sizes up to what
    K candidates per node allow at that depth), and the chains of γ ≤ ``gamma_max``; distinct, chains
    first."""
    from specsim.draft_shapes.tree_search import optimal_trees

    k = np.asarray(acceptance).shape[-1]
    seen = {chain_tree(g).parents: chain_tree(g) for g in range(1, gamma_max + 1)}
    for depth in range(1, min(max_depth, n_max) + 1):
        fits = min(n_max, sum(k**level for level in range(1, depth + 1)))
        for choice in optimal_trees(acceptance, fits, max_depth=depth):
            seen.setdefault(choice.tree.parents, choice.tree)
    return list(seen.values())


def _tree_arrays(trees: list[TreeSpec]):
    """Verify rows (T,), and for every draft pass: its rows, context offset and tree index (P,)."""
    nodes = np.array([t.n for t in trees], dtype=float)
    rows, offset, owner = [], [], []
    for i, t in enumerate(trees):
        fed = 0
        for r in draft_pass_rows(t):
            rows.append(r)
            offset.append(fed)
            owner.append(i)
            fed += r
    return nodes, np.array(rows, dtype=float), np.array(offset, dtype=float), np.array(owner)


def plan_trees(
    target: ModelSpec,
    draft: ModelSpec,
    devices: list[Device],
    methods: list[TreeMethod],
    *,
    efficiency=None,
    batches=(1,),
    contexts=(1024,),
    n_max: int = 64,
    max_depth: int = 10,
    gamma_max: int = 8,
    draft_kind: str = "model",
    chain_gamma: int | None = None,
) -> list[TreePlanRow]:
    """The best tree and chain for every device × method × batch × context (module docstring).

    ``efficiency``: an Efficiency or Runtime for every device, or a dict device name -> one of them;
    ``draft_kind``: how the draft drafts (:mod:`specsim.draft_kinds`: a head's per-forward floor, ...);
    ``chain_gamma``: the chain beside the tree (--gamma); None: the best chain of γ ≤ ``gamma_max``.
    """
    if not devices or not methods:
        raise SpecsimError("tree plan: need at least one device and one method")
    effs = (
        efficiency if isinstance(efficiency, dict) else {d.name: efficiency or Efficiency() for d in devices}
    )
    b = np.asarray(sorted({int(x) for x in batches}), dtype=float)[:, None, None]
    ctx = np.asarray(sorted({int(x) for x in contexts}), dtype=float)[None, :, None]
    out = []
    for mt in methods:
        trees = candidate_trees(mt.acceptance, n_max, max_depth, max(gamma_max, chain_gamma or 0))
        tau = np.array([expected_tokens(t, mt.acceptance) for t in trees])
        nodes, rows, offset, owner = _tree_arrays(trees)
        chains = np.array(
            [t.depth == t.n and (t.n == chain_gamma if chain_gamma else t.n <= gamma_max) for t in trees]
        )
        members = np.zeros((len(trees), rows.size))
        members[owner, np.arange(rows.size)] = 1.0
        for dev in devices:
            cost = RooflinePassCost(
                target, draft, dev, effs.get(dev.name, Efficiency()), draft_kind=draft_kind
            )
            k = b * mt.draft_batch_size
            tp = cost.pass_ms(TARGET, 1, ctx, b).ms  # [B, L, 1]
            step = tp + cost.step_overhead_ms(b, gpu_ms=tp)
            passes = cost.pass_ms(DRAFT, rows, ctx + offset, k, kind=TREE).ms  # [B, L, P]
            catch_up = cost.extra_draft_forwards * cost.pass_ms(DRAFT, 1, ctx, k).ms
            gpu = passes @ members.T + catch_up + cost.pass_ms(TARGET, nodes + 1, ctx, b, kind=TREE).ms
            block = gpu + cost.block_overhead_ms(nodes, b, gpu_ms=gpu)
            speedups = tau * step / block  # [B, L, T]: τ·T / block, as plan_rows.price_blocks
            within = (nodes <= n_max) & _in_window(target, ctx[0], nodes)  # [L, T]
            out += _rows(dev.name, mt.method, trees, tau, speedups, step, chains, b, ctx, within)
    return out


def _in_window(target: ModelSpec, contexts, nodes) -> np.ndarray:
    """Whether a tree of ``nodes`` verifies within the target's window after each context: its verify pass
    writes n + 1 positions (a chain's γ + 1), as :func:`specsim.hardware.model.check_block_positions`."""
    window = target.max_positions
    return (
        np.ones(np.broadcast(contexts, nodes).shape, bool)
        if window is None
        else contexts + nodes + 1 <= window
    )


def _rows(device: str, method: str, trees, tau, speedups, tp, chains, b, ctx, within) -> list[TreePlanRow]:
    """One row per batch × context: the best of the trees ``within`` the node bound and the window there
    (``within``: [context, tree]; the chains beside them may be longer), and the chain's."""
    rows = []
    chain_idx = np.flatnonzero(chains)
    for i, j in np.ndindex(speedups.shape[:2]):
        tree_idx = np.flatnonzero(within[j])
        k = int(tree_idx[np.argmax(speedups[i, j, tree_idx])])
        c = int(chain_idx[np.argmax(speedups[i, j, chain_idx])])
        rows.append(
            TreePlanRow(
                device=device,
                method=method,
                batch_size=int(b[i, 0, 0]),
                context_tokens=int(ctx[0, j, 0]),
                best_tree=str(trees[k]),
                nodes=trees[k].n,
                depth=trees[k].depth,
                tau=float(tau[k]),
                speedup=float(speedups[i, j, k]),
                chain_gamma=trees[c].n,
                chain_tau=float(tau[c]),
                chain_speedup=float(speedups[i, j, c]),
                target_ms_per_step=float(tp[i, j, 0]),
            )
        )
    return rows


# --------------------------------------------------------------------------- text
def tree_plan_text(rows: list[TreePlanRow], chain_gamma: int | None = None) -> str:
    """Per method and context: for each device and batch, the best tree (n nodes / depth) and its speedup,
    with the chain's beside it (the best chain, or the one at ``chain_gamma``)."""
    chain = "best chain" if chain_gamma is None else f"chain at --gamma {chain_gamma}"
    lines = []
    batches = sorted({r.batch_size for r in rows})
    for method in dict.fromkeys(r.method for r in rows):
        for ctx in sorted({r.context_tokens for r in rows if r.method == method}):
            table = []
            for dev in dict.fromkeys(r.device for r in rows):
                by_b = {
                    r.batch_size: r
                    for r in rows
                    if (r.method, r.context_tokens, r.device) == (method, ctx, dev)
                }
                table.append(
                    [dev]
                    + [
                        f"{by_b[b].speedup:.2f} n={by_b[b].nodes}/d={by_b[b].depth} "
                        f"(chain γ={by_b[b].chain_gamma} {by_b[b].chain_speedup:.2f})"
                        for b in batches
                    ]
                )
            lines.append(f"  method {method}, context {ctx}: best tree speedup, n nodes / depth ({chain})")
            lines.append(format_table(["device"] + [f"B={b}" for b in batches], table, indent="    "))
    return "\n".join(lines)


# --------------------------------------------------------------------------- replayed schedules on a device
def _block_ms(cost: RooflinePassCost, plan, batch: int, context: float, k: int) -> float:
    """Σ over a plan's blocks of its roofline ms (see :func:`replay_speedup`)."""
    from specsim.draft_shapes.draft_plans import TreePlan

    tp = float(cost.pass_ms(TARGET, 1, context, batch).ms)
    tq = float(cost.pass_ms(DRAFT, 1, context, batch * k).ms)
    overhead = cost.block_overhead_ms(1, batch)
    if not isinstance(plan, TreePlan):  # chain or policy blocks: g draft steps and Tv(g), or one target step
        g = np.asarray(plan.drafts, dtype=float)
        tv = np.where(g > 0, cost.pass_ms(TARGET, np.maximum(g, 1) + 1, context, batch).ms, tp)
        forwards = np.where(g > 0, g + cost.extra_draft_forwards, 0.0)
        return float(np.sum(plan.weight * (forwards * tq + tv + overhead)))
    total = 0.0
    for step in plan.steps:
        if step.tree is None:
            total += tp + overhead
            continue
        levels = np.array(draft_pass_rows(step.tree)[1:], dtype=float)
        total += float(cost.pass_ms(DRAFT, step.root_rows, context, batch * k, kind=FIRST).ms)
        total += cost.extra_draft_forwards * tq
        if levels.size:  # a level pass keeps the logits of every fed node: their children come from them
            fed = step.root_rows + np.concatenate([[0.0], np.cumsum(levels)[:-1]])
            total += float(np.sum(cost.pass_ms(DRAFT, levels, context + fed, batch * k, kind=TREE).ms))
        tv = cost.pass_ms(TARGET, step.tree.n + 1, context, batch, kind=TREE).ms
        total += float(tv + cost.tree_overhead_ms(step.tree, batch))
    return total


def replay_speedup(
    target: ModelSpec,
    draft: ModelSpec,
    dev: Device,
    eff,
    plans: list,
    *,
    batch: int = 1,
    context: float = 1024,
    draft_batch_size: int = 1,
) -> float:
    """Decode-phase speedup on a device of replayed schedules (chain or policy
    :class:`specsim.draft_shapes.block_plans.BlockPlan`, tree
    :class:`specsim.draft_shapes.draft_plans.TreePlan`) at one context: tokens·Tp / Σ blocks, a block being
    its draft passes (the root over its 1 or 2 rows, each level pass over its m rows with their logits), its
    verification Tv over its drafts + 1 rows and the runtime's
    per-block overhead."""
    cost = RooflinePassCost(target, draft, dev, eff)
    tp = float(cost.pass_ms(TARGET, 1, context, batch).ms)
    tokens = sum(p.tokens for p in plans)
    spent = sum(_block_ms(cost, p, batch, context, draft_batch_size) for p in plans)
    if not spent > 0:
        raise SpecsimError("replay_speedup: expected at least one block")
    return float(tokens * tp / spent)
