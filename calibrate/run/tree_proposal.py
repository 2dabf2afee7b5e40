"""What the tree engine needs of a tree drafter: a drafted tree (:class:`TreeProposal`), the
:class:`TreeDrafter` protocol it drafts and commits through, and the two cache operations both sides share
(a 4-D additive tree mask, keeping the accepted columns). Drafting implements it:
:func:`calibrate.drafting.tree_drafter.tree_drafting`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specsim.draft_shapes.trees import TreeSpec
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class TreeProposal:
    """A drafted tree: ``tokens`` [n+1] (node 0 = the pending token), the q rows [F, V] the children of
    each ``expanded`` node were drawn from (None when greedy), draft model ms and rows per draft pass.

    For the cost model: ``pass_ms`` per draft pass; the root pass fed ``root_rows`` tokens (the draft
    prompt in a request's first block, then 1, or 2 after a block that ended on an unfed leaf) on a draft
    KV cache of ``context_tokens`` positions (padded columns for a batch of contexts)."""

    tree: TreeSpec
    tokens: torch.Tensor
    q_probs: torch.Tensor | None
    expanded: tuple[int, ...]
    model_ms: float
    pass_rows: tuple[int, ...]
    pass_ms: tuple[float, ...] = ()
    root_rows: int = 1
    context_tokens: int = 0


def additive_mask(prefix: torch.Tensor, allowed: torch.Tensor, dtype) -> torch.Tensor:
    """4-D mask [rows, 1, m, C + F] from ``prefix`` [rows, C] (1 = attend: the committed columns) and
    ``allowed`` [m, F] (bool: the block's columns each query may see): 0 where attended, dtype min
    elsewhere."""
    rows, m = prefix.shape[0], allowed.shape[0]
    see = torch.cat(
        [prefix.bool()[:, None, :].expand(rows, m, -1), allowed.to(prefix.device)[None].expand(rows, -1, -1)],
        dim=-1,
    )  # [rows, m, C+F]
    mask = torch.zeros(see.shape, dtype=dtype, device=prefix.device)
    mask.masked_fill_(~see, torch.finfo(dtype).min)
    return mask[:, None]


def keep_cache(cache, index: torch.Tensor) -> None:
    """Keep only the sequence positions ``index`` (ascending) of every layer of a DynamicCache."""
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            raise SpecsimError("tree decoding: sliding-window KV caches are not supported")
        if layer.is_initialized and layer.keys.numel():
            idx = index.to(layer.keys.device)
            layer.keys = layer.keys.index_select(-2, idx)
            layer.values = layer.values.index_select(-2, idx)


# --------------------------------------------------------------------------- per-drafter adapters


class TreeDrafter(Protocol):
    """A drafter that proposes token trees: the chain drafter's ``method``, ``prefill`` and ``accept`` (a
    block with no tree), plus a tree and its accepted path."""

    method: str

    def prefill(self, request) -> dict: ...

    def accept(self, n_accepted: int, next_token: int) -> None: ...

    def propose_tree(self, tree: TreeSpec, *, temperature: float, generator, device) -> TreeProposal: ...

    def accept_path(self, proposal: TreeProposal, path: list[int], next_token: int) -> None: ...
