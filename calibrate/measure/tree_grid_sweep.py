"""Measure the token-tree grids of the cost model (:class:`specsim.profile_format.cost_model.TreeCosts`) by
running the tree engine's own phases on random KV caches, as :mod:`calibrate.measure.request_grid_sweep` does
for chains.

At each context c, round-robin over the plan's trees and draft batches, one tree block as
:func:`calibrate.run.tree_engine.tree_decode` runs it. Stored: ``tree_verify`` (rows n+1, on c),
``tree_draft`` (level passes by rows m_ℓ, carried to c + 1) and the overhead per block by n and batch.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from calibrate.drafting import accept_path, propose_tree
from calibrate.measure.request_grid_sweep import (
    Sweep,
    grid_key,
    next_step_timings,
    restart_draft,
    rounds_until_precise,
)
from calibrate.models.loaded_model import LoadedModel
from calibrate.run import engine as E
from calibrate.run.timing import Timing, summarize
from calibrate.run.tree_engine import accept_greedy, keep_path, verify_tree
from specsim.draft_shapes.trees import TreeSpec, chain_tree, draft_pass_rows, parse_tree
from specsim.errors import SpecsimError

MAX_SWEEP_NODES = 256  # Tv(n) up to 64 is the use; beyond a few hundred rows a tree is a typo


def sweep_tree(n: int) -> TreeSpec:
    """The tree swept for size n: the root has ⌈n/2⌉ children and the first ⌊n/2⌋ of them one child each,
    so its one level pass feeds ⌊n/2⌋ rows (sizes 2, 4, ..., 64 cover level passes of 1..32 rows)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SWEEP_NODES:
        raise SpecsimError(f"--tree-sizes: expected integers in 1..{MAX_SWEEP_NODES}, got {n!r}")
    wide = (n + 1) // 2
    return TreeSpec((0,) * wide + tuple(range(1, n - wide + 1)))


def sweep_trees(sizes=(), specs=()) -> tuple[str, ...]:
    """The spec strings a tree sweep runs: ``specs``, :func:`sweep_tree` of each size, and "chain:1";
    sorted by n, duplicates dropped. Empty when neither is given."""
    trees = [parse_tree(s) for s in specs] + [sweep_tree(n) for n in sizes]
    if not trees:
        return ()
    for t in trees:
        if t.n > MAX_SWEEP_NODES:
            raise SpecsimError(f"--tree: expected at most {MAX_SWEEP_NODES} nodes, got {t.n} in {t}")
    unique = {t.parents: t for t in [chain_tree(1), *trees]}
    return tuple(str(t) for t in sorted(unique.values(), key=lambda t: (t.n, t.parents)))


def overhead_prefix(n: int, batch: int) -> str:
    """Key prefix of the tree engine's per-block overhead at n nodes and draft batch."""
    return f"tree_overhead.n={n}.b={batch}.c="


def level_rows(trees: list[TreeSpec]) -> tuple[int, ...]:
    """Rows of the level passes ℓ ≥ 1 of ``trees`` (the ``tree_draft`` grid's rows axis)."""
    return tuple(sorted({r for t in trees for r in draft_pass_rows(t)[1:]}))


class TreeSweep(Sweep):
    """Tree-engine blocks at one context; ``level_steps[(rows, batch)]`` collects (context, ms) of level
    passes."""

    def __init__(self, models: dict[str, LoadedModel], context: int, batch_sizes, ensemble: bool, generator):
        super().__init__(models, context, batch_sizes, ensemble, generator)
        self.level_steps: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)

    def tree_cycle(self, tree: TreeSpec, batch: int) -> None:
        """One block of ``tree`` as :func:`calibrate.run.tree_engine.tree_decode` runs it."""
        drafter, dcache = self.drafters[batch]
        c = self.context
        restart_draft(drafter, dcache, c, 1, self.ids, self.device)
        t0 = time.perf_counter()
        sub = tree.truncated(1 << 30)
        proposal = propose_tree(drafter, sub, device=self.device)
        logits, verify_ms = verify_tree(self.model, self.cache, self.ids[c], proposal, self.device)
        path, nxt = accept_greedy(logits, proposal)
        keep_path(self.cache, c, path)
        accept_path(drafter, proposal, path, nxt)
        E.truncate_at_eos([int(proposal.tokens[u]) for u in path] + [nxt], 1 << 30, None)
        block_ms = (time.perf_counter() - t0) * 1e3
        E.crop_cache(self.cache, c)
        self.samples[grid_key("tree_verify", tree.n + 1, c, 1)].append(verify_ms)
        fed = c + proposal.root_rows
        for rows, ms in zip(proposal.pass_rows[1:], proposal.pass_ms[1:]):
            self.level_steps[(rows, batch)].append((fed, ms))
            fed += rows
        self.samples[overhead_prefix(tree.n, batch) + str(c)].append(block_ms - proposal.model_ms - verify_ms)


def _summaries(sweep: TreeSweep) -> dict[str, Timing]:
    out = {key: summarize(xs) for key, xs in sweep.samples.items() if xs}
    at = sweep.context + 1
    for (rows, batch), steps in sweep.level_steps.items():
        out[grid_key("tree_draft", rows, at, batch)] = next_step_timings(steps, at)
    return out


def tree_sweep_context(
    models: dict[str, LoadedModel],
    context: int,
    *,
    trees: list[TreeSpec],
    batch_sizes,
    ensemble: bool,
    warmup: int,
    min_rounds: int,
    max_rounds: int,
    target_rel_halfwidth: float,
    max_seconds: float | None,
    generator,
    on_round: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Round-robin tree blocks at ``context`` until every grid point's 95% CI half-width is within
    ``target_rel_halfwidth`` of its median (after ``min_rounds``), ``max_rounds`` or ``max_seconds``."""
    sweep = TreeSweep(models, context, batch_sizes, ensemble, generator)

    def cycle(r: int) -> None:
        for b in batch_sizes:
            for tree in trees:
                sweep.tree_cycle(tree, b)

    def reset() -> None:
        sweep.samples.clear()
        sweep.level_steps.clear()

    return rounds_until_precise(
        cycle,
        reset,
        lambda: _summaries(sweep),
        overhead_prefix="tree_overhead",
        warmup=warmup,
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        target_rel_halfwidth=target_rel_halfwidth,
        max_seconds=max_seconds,
        on_round=on_round,
    )
