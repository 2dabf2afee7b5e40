"""Token-tree speculative decoding (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024) on the
primitives of :mod:`calibrate.run.engine`: same forward, truncation and records.

The target's prefill over prompt[:-1] runs apart (``target_prefill_ms``); each block verifies the pending
token plus a tree cut to depth ≤ tokens left − 1 (:func:`verify_tree`, 4-D tree mask) and walks it from the
root (:func:`accept_greedy`: the target's greedy output; :func:`accept_sampled`: SpecInfer's multi-step
speculative sampling, lossless by its Theorem 4.2). Caches keep the accepted path only (an index gather).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from calibrate.run.decode_records import BlockRecord, DecodeResult
from calibrate.run.engine import (
    Request,
    accept_phase,
    check_args,
    empty_proposal,
    forward,
    probs_of,
    start_request,
    truncate_at_eos,
    verify_phase,
    with_cache,
)
from calibrate.run.timing import timed
from calibrate.run.tree_proposal import TreeDrafter, TreeProposal, additive_mask, keep_cache
from specsim.draft_shapes.trees import TreeSpec, parse_tree
from specsim.errors import SpecsimError


@dataclass(frozen=True)
class TreeBlockRecord(BlockRecord):
    """A tree block: ``gamma`` = tree nodes drafted (after the end-of-request cut), ``depth`` = that
    tree's depth; ``draft_passes`` = draft forwards (one per expanded level)."""

    depth: int = 0
    draft_passes: int = 0

    def to_json(self) -> dict:
        return super().to_json() | {"depth": self.depth, "draft_passes": self.draft_passes}


@dataclass(frozen=True)
class TreeDecodeResult(DecodeResult):
    """A request decoded with a token tree: ``tree`` is its spec string, ``gamma`` its node count."""

    tree: str = ""

    def to_json(self) -> dict:
        return super().to_json() | {"tree": self.tree}

    @classmethod
    def from_json(cls, d: dict) -> TreeDecodeResult:
        base = DecodeResult.from_json(
            {k: v for k, v in d.items() if k not in ("tree", "blocks")} | {"blocks": []}
        )
        blocks = tuple(TreeBlockRecord.from_json(b) for b in d["blocks"])
        return cls(
            **{f: getattr(base, f) for f in DecodeResult.__dataclass_fields__}
            | {"blocks": blocks, "tree": str(d["tree"])}
        )


# --------------------------------------------------------------------------- phases
def verify_tree(
    model, cache, pending: int, proposal: TreeProposal, device="cpu"
) -> tuple[torch.Tensor, float]:
    """One target forward over [pending, node_1..node_n] with the tree mask: logits [n+1, V] and its ms."""
    tree = proposal.tree
    past = cache.get_seq_length()
    ids = proposal.tokens.clone()
    ids[0] = pending
    ids = ids.to(model.device)[None]  # [1, n+1]
    pos = torch.as_tensor(past + tree.depths, device=model.device)[None]  # [1, n+1]
    prefix = torch.ones(1, past, dtype=torch.long, device=model.device)
    mask = additive_mask(prefix, torch.as_tensor(tree.ancestors()), model.dtype)  # [1, 1, n+1, past+n+1]
    with timed(device) as t:
        logits = forward(model, ids, cache, attention_mask=mask, position_ids=pos)
    return logits, t.ms


def accept_greedy(logits: torch.Tensor, proposal: TreeProposal) -> tuple[list[int], int]:
    """(accepted nodes root→leaf, next token): follow the target's argmax while a child carries it."""
    best = torch.argmax(logits, dim=-1).tolist()  # [n+1]
    kids = proposal.tree.children()
    tokens = proposal.tokens.tolist()
    path, u = [], 0
    while True:
        nxt = next((c for c in kids[u] if tokens[c] == best[u]), None)
        if nxt is None:
            return path, int(best[u])
        path.append(nxt)
        u = nxt


def accept_sampled(
    logits: torch.Tensor, proposal: TreeProposal, temperature: float, generator: torch.Generator | None
) -> tuple[list[int], int]:
    """(accepted nodes, next token) by multi-step speculative sampling (see the module docstring)."""
    p_all = probs_of(logits, temperature).double()  # [n+1, V]
    row = {u: i for i, u in enumerate(proposal.expanded)}
    kids = proposal.tree.children()
    tokens = proposal.tokens.tolist()
    uniform = torch.rand(len(tokens), generator=generator, dtype=torch.float64).tolist()  # one per node
    path, u = [], 0
    while kids[u]:
        p, q = p_all[u], proposal.q_probs[row[u]].double()
        for c in kids[u]:
            x = tokens[c]
            if uniform[c] * q[x].item() < p[x].item():  # accept with probability min(1, p/q)
                path.append(c)
                u = c
                break
            residual = torch.clamp(p - q, min=0)
            total = float(residual.sum())
            p = residual / total if total > 0 else p  # p == q: a rejection had probability 0
        else:
            return path, int(torch.multinomial(p, 1, generator=generator))
    return path, int(torch.multinomial(p_all[u], 1, generator=generator))


def keep_path(cache, past: int, path: list[int]) -> None:
    """Target cache after a block: the ``past`` committed positions, the pending token, the accepted nodes."""
    keep_cache(cache, torch.tensor(list(range(past + 1)) + [past + u for u in path]))


def _prefill(model, cache, request: Request, device, kwargs) -> tuple[int, float]:
    """Target prefill over prompt[:-1], apart from the first block (the tree mask assumes one pending
    token): (the pending last prompt token, ms)."""
    ids = request.input_ids[:, :-1].to(model.device)  # [1, S-1]
    ms = 0.0
    if ids.shape[1]:
        with timed(device) as t:
            model(input_ids=ids, **with_cache(model, cache), use_cache=True, logits_to_keep=1, **kwargs)
        ms = t.ms
    return int(request.input_ids[0, -1]), ms


def _record(
    sub: TreeSpec | None,
    proposal: TreeProposal | None,
    new: list[int],
    verify_ms: float,
    t0: float,
    past: int,
) -> TreeBlockRecord:
    """The block's record; where each forward ran (target cache ``past``, rows n+1; the draft's root pass
    and the ms of every draft pass) is kept for the cost model, as the chain engine keeps it."""
    drafted = (
        {}
        if proposal is None
        else {
            "draft_ms": proposal.model_ms,
            "draft_passes": len(proposal.pass_rows),
            "draft_context_tokens": proposal.context_tokens,
            "draft_first_rows": proposal.root_rows,
            "draft_step_ms": proposal.pass_ms,
        }
    )
    return TreeBlockRecord(
        gamma=sub.n if sub else 0,
        depth=sub.depth if sub else 0,
        accepted=len(new) - 1,
        emitted=len(new),
        verify_ms=verify_ms,
        block_ms=(time.perf_counter() - t0) * 1e3,
        target_context_tokens=past,
        target_rows=sub.n + 1 if sub else 1,
        **({"draft_ms": 0.0, "draft_first_rows": 0} | drafted),
    )


# --------------------------------------------------------------------------- loop
@torch.inference_mode()
def tree_decode(
    target,
    drafter: TreeDrafter,
    request: Request,
    *,
    tree: TreeSpec | str,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_token_id=None,
    device="cpu",
) -> TreeDecodeResult:
    """Speculative decoding of one request with a token tree drafted by ``drafter`` (module docstring)."""
    tree = parse_tree(tree) if isinstance(tree, str) else tree
    if not isinstance(tree, TreeSpec):
        raise SpecsimError(f"tree: expected a TreeSpec or a spec string, got {tree!r}")
    check_args(0, max_new_tokens, temperature, request)
    model, cache, setup, kwargs, _ = start_request(target, request, device)
    pending, setup["target_prefill_ms"] = _prefill(model, cache, request, device, kwargs)
    setup.update(drafter.prefill(request))
    out: list[int] = []
    blocks: list[TreeBlockRecord] = []
    done = False
    while not done:
        t0 = time.perf_counter()
        left = max_new_tokens - len(out)
        sub = tree.truncated(left - 1)
        past = cache.get_seq_length()
        if sub is None:  # the request's last token: one target step, as the chain engine's γ = 0 block
            pending_ids = torch.tensor([[pending]], dtype=torch.long, device=model.device)
            logits, verify_ms = verify_phase(model, cache, pending_ids, empty_proposal(model).tokens, device)
            _, nxt = accept_phase(logits, empty_proposal(model), temperature, generator)
            drafter.accept(0, nxt)
            path, proposal = [], None
        else:
            proposal = drafter.propose_tree(sub, temperature=temperature, generator=generator, device=device)
            logits, verify_ms = verify_tree(model, cache, pending, proposal, device)
            path, nxt = (
                accept_greedy(logits, proposal)
                if temperature == 0
                else accept_sampled(logits, proposal, temperature, generator)
            )
            keep_path(cache, past, path)
            drafter.accept_path(proposal, path, nxt)
        path_tokens = [int(proposal.tokens[u]) for u in path] if proposal else []
        new, done = truncate_at_eos(path_tokens + [nxt], left, eos_token_id)
        out.extend(new)
        pending = out[-1]
        blocks.append(_record(sub, proposal, new, verify_ms, t0, past))
    return TreeDecodeResult(
        tokens=tuple(out),
        prompt_tokens=request.input_ids.shape[1],
        gamma=tree.n,
        method=drafter.method,
        setup_ms=setup,
        blocks=tuple(blocks),
        prompt_id=request.prompt_id,
        tree=str(tree),
    )
