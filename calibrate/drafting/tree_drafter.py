"""Tree drafting: the draft expands a token tree level by level with a 4-D tree attention mask, and
keeps only the accepted path in its KV cache afterwards.

:func:`propose_tree`: pass 0 feeds the unfed tail (1 token, or 2 after a leaf), pass ℓ ≥ 1 the depth-ℓ nodes
that have children; children are the top-k (greedy) or k i.i.d. draws (SpecInfer, Miao et al. 2024).
:func:`accept_path` keeps the committed and accepted-path columns (an index gather). Drafters:
:class:`~calibrate.drafting.text_drafter.TextDrafter`, :class:`~calibrate.drafting.ensemble.EnsembleDrafter`
(adaptive ensembles refused). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from calibrate.drafting.ensemble import AdaptiveEnsembleDrafter, EnsembleDrafter
from calibrate.drafting.text_drafter import TextDrafter
from calibrate.run.engine import forward, with_cache
from calibrate.run.timing import timed
from calibrate.run.tree_proposal import TreeProposal, additive_mask, keep_cache
from specsim.draft_shapes.trees import TreeSpec
from specsim.errors import SpecsimError


class _TextTree:
    """Tree passes over a TextDrafter's state (cache holds ids[:cached]; positions are indices)."""

    def __init__(self, d: TextDrafter):
        self.d = d

    def root(self) -> torch.Tensor:
        d = self.d
        x = torch.tensor([d.ids[d.cached :]], dtype=torch.long, device=d.model.device)  # [1, 1 or 2]
        self.base = len(d.ids)  # cache columns after this pass: the committed sequence
        self.context, self.rows = d.cached, x.shape[1]
        return forward(d.model, x, d.cache, last_only=True)  # [1, V]

    def feed(self, tokens: list[int], depths: np.ndarray, allowed: torch.Tensor) -> torch.Tensor:
        d = self.d
        x = torch.tensor([tokens], dtype=torch.long, device=d.model.device)  # [1, m]
        pos = torch.as_tensor(self.base - 1 + depths, device=d.model.device)[None]  # [1, m]
        prefix = torch.ones(1, self.base, dtype=torch.long, device=d.model.device)
        mask = additive_mask(prefix, allowed, d.model.dtype)
        return forward(d.model, x, d.cache, attention_mask=mask, position_ids=pos)  # [m, V]

    def commit(self, path_tokens: list[int], kept_fed: list[int], next_token: int) -> None:
        d = self.d
        keep_cache(d.cache, torch.tensor(list(range(self.base)) + [self.base + i for i in kept_fed]))
        d.ids.extend(path_tokens)
        d.ids.append(int(next_token))
        d.cached = self.base + len(kept_fed)
        d._drafts = []


class _EnsembleTree:
    """Tree passes over an EnsembleDrafter's batch of k contexts (left-padded rows, per-row positions)."""

    def __init__(self, d):
        self.d = d

    def root(self) -> torch.Tensor:
        d = self.d
        self.context = d.mask.shape[1]
        self.rows = d._prompt[1].shape[1] if d._prompt is not None else d.tail.shape[1]
        # the request's first pass feeds the padded prompt (the prefill is fused with it), later ones the tail
        logits = d._step_prompt() if d._prompt is not None else d.step(d.tail)  # [k, V]
        d._drafts = None
        self.base = d.mask.shape[1]
        return logits[:, None]  # [k, 1, V]

    def feed(self, tokens: list[int], depths: np.ndarray, allowed: torch.Tensor) -> torch.Tensor:
        d = self.d
        k = d.mask.shape[0]
        x = torch.tensor([tokens], dtype=torch.long, device=d.model.device).expand(k, -1)  # [k, m]
        pos = d.pos[:, None] + torch.as_tensor(depths - 1, device=d.pos.device)[None]  # [k, m]
        mask = additive_mask(d.mask, allowed, d.model.dtype)
        out = d.model(
            input_ids=x, attention_mask=mask, position_ids=pos, **with_cache(d.model, d.cache), use_cache=True
        )
        return out.logits.float()  # [k, m, V]

    def commit(self, path_tokens: list[int], kept_fed: list[int], next_token: int) -> None:
        d = self.d
        k = d.mask.shape[0]
        keep_cache(d.cache, torch.tensor(list(range(self.base)) + [self.base + i for i in kept_fed]))
        d.mask = torch.cat(
            [d.mask, torch.ones(k, len(kept_fed), dtype=d.mask.dtype, device=d.mask.device)], 1
        )
        d.pos = d.pos + len(kept_fed)
        tail = path_tokens[len(kept_fed) :] + [int(next_token)]  # the last path node, if a leaf, is unfed
        d.tail = torch.tensor([tail], dtype=torch.long, device=d.model.device).expand(k, -1).clone()


def _adapter(drafter):
    if isinstance(drafter, AdaptiveEnsembleDrafter):
        raise SpecsimError(
            f"tree decoding: adaptive ensembles ({drafter.method}) are not supported; use the static ensemble"
        )
    if isinstance(drafter, EnsembleDrafter):
        return _EnsembleTree(drafter)
    if isinstance(drafter, TextDrafter):
        return _TextTree(drafter)
    raise SpecsimError(
        f"tree decoding: expected a TextDrafter or an EnsembleDrafter, got {type(drafter).__name__}"
    )


def _distribution(drafter, logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """q rows [m, V] the children are drawn from: softmax at T (T = 1 when greedy), mixed over ensemble
    rows; ``logits`` [m, V] from a text drafter, [k, m, V] from an ensemble."""
    t = temperature if temperature > 0 else 1.0
    if logits.ndim == 2:  # text drafter: [m, V]
        return torch.softmax(logits.float() / t, -1)
    w = drafter.weights.to(torch.float32).to(logits.device)  # ensemble: logits [k, m, V]
    return (w[:, None, None] * torch.softmax(logits.float() / t, -1)).sum(0)


def _children(q: torch.Tensor, k: int, temperature: float, generator) -> list[int]:
    if temperature == 0:
        return torch.topk(q, k).indices.tolist()
    return torch.multinomial(q, k, replacement=True, generator=generator).tolist()


@torch.inference_mode()
def propose_tree(
    drafter,
    tree: TreeSpec,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    device="cpu",
) -> TreeProposal:
    """Draft ``tree`` from the drafter's committed sequence (see the module docstring)."""
    ad = _adapter(drafter)
    kids, depths, anc = tree.children(), tree.depths, torch.as_tensor(tree.ancestors())
    levels = tree.expanded_levels()
    tokens = [0] * (tree.n + 1)
    fed: list[int] = []  # tree columns appended to the cache this block, in order
    qs = []
    with timed(device) as t:
        root_logits = ad.root()
    pass_ms = [t.ms]
    q = _distribution(drafter, root_logits, temperature)  # [1, V]
    for level_index, level in enumerate(levels):
        if level_index > 0:
            allowed = anc[level][
                :, [*fed, *level]
            ]  # [m, F+m]: ancestors among the block's fed nodes, and self
            with timed(device) as t:
                logits = ad.feed([tokens[u] for u in level], depths[level], allowed)
            pass_ms.append(t.ms)
            q = _distribution(drafter, logits, temperature)
            fed.extend(level)
        for u, q_u in zip(level, q.reshape(len(level), -1)):
            for c, tok in zip(kids[u], _children(q_u, len(kids[u]), temperature, generator)):
                tokens[c] = tok
            qs.append(q_u)
    tokens[0] = -1  # the pending token is the engine's; never read from here
    expanded = tuple(u for level in levels for u in level)
    return TreeProposal(
        tree=tree,
        tokens=torch.tensor(tokens, dtype=torch.long),
        expanded=expanded,
        q_probs=None if temperature == 0 else torch.stack(qs),
        model_ms=float(sum(pass_ms)),
        pass_rows=tuple(len(level) for level in levels),
        pass_ms=tuple(pass_ms),
        root_rows=int(ad.rows),
        context_tokens=int(ad.context),
    )


def accept_path(drafter, proposal: TreeProposal, path: list[int], next_token: int) -> None:
    """Commit the accepted nodes ``path`` (root excluded, in depth order) and ``next_token``; the cache
    keeps the committed context plus the fed nodes of the path."""
    ad = _adapter(drafter)
    ad.base = _base(drafter)
    fed_order = {u: i for i, u in enumerate(proposal.expanded[1:])}  # column of each fed node after the base
    kept = [fed_order[u] for u in path if u in fed_order]
    ad.commit([int(proposal.tokens[u]) for u in path], kept, next_token)


def _base(drafter) -> int:
    """Cache columns before this block's tree nodes: the committed context (root pass included)."""
    if isinstance(drafter, TextDrafter):
        return len(drafter.ids)
    return drafter.mask.shape[1]


@dataclass(frozen=True)
class TreeDrafting:
    """A chain drafter that also drafts trees (:class:`calibrate.run.tree_proposal.TreeDrafter`)."""

    drafter: object

    @property
    def method(self) -> str:
        return self.drafter.method

    def prefill(self, request) -> dict:
        return self.drafter.prefill(request)

    def accept(self, n_accepted: int, next_token: int) -> None:
        self.drafter.accept(n_accepted, next_token)

    def propose_tree(self, tree: TreeSpec, **kw) -> TreeProposal:
        return propose_tree(self.drafter, tree, **kw)

    def accept_path(self, proposal: TreeProposal, path: list[int], next_token: int) -> None:
        accept_path(self.drafter, proposal, path, next_token)


def tree_drafting(drafter) -> TreeDrafting:
    """``drafter`` as a tree drafter; SpecsimError for one that cannot draft trees."""
    _adapter(drafter)
    return drafter if isinstance(drafter, TreeDrafting) else TreeDrafting(drafter)
