"""Token trees and draft-length policies next to the fixed-γ chain: predicted decode-phase speedups
(``specsim predict --tree/--policy/--best-tree``, ``specsim sweep --tree/--policy``).

Every row walks the cost model over each traced request's exact greedy schedule, as a fixed γ is walked;
speedup = target-only ms / speculative ms over the same tokens. :func:`best_tree_for` is Sequoia's
hardware-aware choice (Chen et al. 2024): the most expected tokens per ms among the optimal trees of each
size, assuming acceptance independent across depths; its row reports the exact replayed τ.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import TARGET, TREE
from specsim.draft_shapes.draft_plans import Draft
from specsim.draft_shapes.trees import TreeSpec
from specsim.errors import SpecsimError
from specsim.predict.prediction import Prediction, predict_entry
from specsim.predict.pricing import request_specs
from specsim.predict.tree_costs import tree_block_ms
from specsim.profile_format import MethodAcceptance, Profile
from specsim.report import fmt, format_table

BEST_TREE_MAX_DEPTH = 10  # draft passes per block searched; deeper trees cost more passes than they gain
BEST_TREE_RANKS = 8  # children per node searched (the draft's top 8 candidates)
UNPRICEABLE_MS = 1e18  # a tree the grids cannot price (a level wider than measured) is never the best


def predict_draft(
    profile: Profile, entry: MethodAcceptance, draft: Draft, *, context_tokens=None, max_new_tokens=None
) -> Prediction:
    """The decode-phase prediction of one fixed γ, tree or policy
    (:func:`specsim.predict.prediction.predict_entry`); a row whose speedup is None carries the reason in
    ``note``."""
    return predict_entry(profile, entry, draft, context_tokens=context_tokens, max_new_tokens=max_new_tokens)


def best_tree_for(
    profile: Profile,
    entry: MethodAcceptance,
    *,
    n_max: int | None = None,
    max_depth: int = BEST_TREE_MAX_DEPTH,
    ranks: int = BEST_TREE_RANKS,
    context_tokens=None,
):
    """(the :class:`specsim.draft_shapes.tree_search.TreeChoice` with the most τ per block ms, its
    :class:`Prediction`)."""
    from specsim.draft_shapes.tree_replay import rank_acceptance
    from specsim.draft_shapes.tree_search import best_tree

    cost = GridPassCost.request(profile.latency)
    measured = cost.measured_rows(TARGET, TREE)  # n + 1 rows per measured tree verification
    specs = request_specs(entry, context_tokens=context_tokens)
    if any(r.trace is None for r in specs):
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: trees and policies are "
            "replayed from greedy traces, and this entry has none"
        )
    for r in specs:
        if r.trace.draft_rank is None:
            raise SpecsimError(
                f"method {entry.method!r}: the best tree needs top-k traces ('specsim calibrate "
                "acceptance --top-k K')"
            )
    n_max = min(measured[-1] - 1, 64) if n_max is None else int(n_max)
    half = float(np.mean([len(r.trace.match) for r in specs])) / 2
    target_ctx = float(np.mean([r.prompt_tokens for r in specs])) - 1 + half
    draft_ctx = float(np.mean([r.draft_prompt_tokens for r in specs])) - 1 + half

    def block_ms(tree: TreeSpec) -> float:
        try:
            return tree_block_ms(
                cost, tree, target_context=target_ctx, draft_context=draft_ctx, batch=entry.draft_batch_size
            )
        except SpecsimError:
            return UNPRICEABLE_MS

    acc = rank_acceptance([r.trace for r in specs], ranks)
    choice = best_tree(acc, n_max, block_ms, max_depth=min(max_depth, n_max))
    if choice.block_ms >= UNPRICEABLE_MS:
        raise SpecsimError(f"best tree: no tree of <= {n_max} nodes fits the measured tree grids")
    pred = predict_draft(profile, entry, choice.tree, context_tokens=context_tokens)
    return choice, replace(
        pred,
        draft="best " + pred.draft,
        note=pred.note + f"; searched n <= {n_max}, depth <= {min(max_depth, n_max)}, "
        f"{ranks} candidates per node, at context {target_ctx:.0f}",
    )


# --------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Comparison:
    """One method × scenario: the best fixed γ of ``gammas``, each tree and policy asked for, the best
    tree."""

    method: str
    scenario: str
    images_per_prompt: int
    best_chain: Prediction | None
    drafts: tuple[Prediction, ...]
    best_tree: Prediction | None
    best_tree_note: str = ""
    gammas: tuple[int, ...] = ()  # the γs best_chain is the best of (those with a speedup)

    def to_json(self) -> dict:
        row = lambda p: None if p is None else p.to_json()  # noqa: E731
        return {
            "method": self.method,
            "scenario": self.scenario,
            "images_per_prompt": self.images_per_prompt,
            "best_chain": row(self.best_chain),
            "gammas": list(self.gammas),
            "drafts": [row(p) for p in self.drafts],
            "best_tree": row(self.best_tree),
            "best_tree_note": self.best_tree_note,
        }


def compare(
    profile: Profile,
    entries: list[MethodAcceptance],
    gammas,
    drafts: list,
    *,
    best_tree: bool = False,
    context_tokens=None,
    max_new_tokens=None,
) -> list[Comparison]:
    """Per entry: the best of ``gammas`` (each walked as ``specsim predict`` does), every tree and policy of
    ``drafts``, and (``best_tree``) the best tree for the profile's acceptance and tree grids."""
    out = []
    for e in entries:
        kw = {"context_tokens": context_tokens, "max_new_tokens": max_new_tokens}
        chains = [predict_entry(profile, e, int(g), **kw) for g in gammas]
        known = [p for p in chains if p.speedup is not None]
        rows = tuple(predict_draft(profile, e, d, **kw) for d in drafts)
        best, note = None, ""
        if best_tree:
            try:
                best = best_tree_for(profile, e, context_tokens=context_tokens)[1]
            except SpecsimError as err:
                note = str(err)
        out.append(
            Comparison(
                e.method,
                e.scenario,
                e.images_per_prompt,
                max(known, key=lambda p: p.speedup) if known else None,
                rows,
                best,
                note,
                tuple(p.gamma for p in known),
            )
        )
    return out


def _beating_best_tree(c: Comparison) -> list[str]:
    """The runs of ``c`` whose walked speedup beats its best tree's (the search prices trees otherwise)."""
    best = c.best_tree.speedup if c.best_tree is not None else None
    if best is None:
        return []
    runs = [p for p in (c.best_chain, *c.drafts) if p is not None and p.speedup is not None]
    return [p.draft or f"γ = {p.gamma}" for p in runs if p.speedup > best]


def comparison_table(rows: list[Comparison]) -> str:
    """Per scenario: one line per method and run (best γ, trees, policies, best tree) with τ, speedup,
    tokens/s and the block's cost in units of Tp."""
    lines, notes = [], {}
    for scen in dict.fromkeys((c.scenario, c.images_per_prompt) for c in rows):
        table = []
        for c in (c for c in rows if (c.scenario, c.images_per_prompt) == scen):
            chain = "best γ" if len(c.gammas) > 1 else "γ"  # the best of one γ is that γ
            runs = [(chain, c.best_chain)] + [("", p) for p in c.drafts] + [("", c.best_tree)]
            for label, p in runs:
                if p is None:
                    continue
                name = f"{label} = {p.gamma}" if label else p.draft
                table.append(
                    [
                        c.method,
                        name,
                        fmt(p.block_tau),
                        fmt(p.speedup, 2) if p.speedup is not None else "n/a",
                        fmt(p.tokens_per_s, 1),
                        fmt(p.gamma_c_plus_v),
                    ]
                )
                if p.speedup is None:
                    notes[p.note] = None
            if c.best_tree_note:
                notes[f"best tree ({c.method}): {c.best_tree_note}"] = None
            if beaten := _beating_best_tree(c):
                notes[
                    f"best tree ({c.method}, {c.scenario}): the search's pick by per-rank acceptance at the "
                    f"mean context; walked through the traces, {', '.join(beaten)} price higher"
                ] = None
        lines.append(f"\nscenario {scen[0]} ({scen[1]} image{'s' if scen[1] != 1 else ''})")
        lines.append(format_table(["method", "run", "tau", "speedup", "tok/s", "block/Tp"], table))
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
