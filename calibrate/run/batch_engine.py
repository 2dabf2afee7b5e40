"""Speculative decoding of B requests at once (a static batch), greedy, in phase-named steps.

Each block drafts γ tokens per request at draft batch B, one target pass verifies B × (γ+1) rows, and each
request accepts its own prefix (Leviathan et al. 2023). Phases as in :mod:`calibrate.run.engine`:
:func:`batch_prefill_phase`, :func:`batch_draft_phase`, :func:`batch_verify_phase`,
:func:`batch_accept_phase`, :func:`batch_speculative_decode`; :func:`batch_target_decode` is the baseline.
Rows left-padded; rollback per row by *masking* (no cache copy); each request's output is its greedy output
alone. Shapes: ``mask`` [B, cols]; ``pos`` [B]; logits [B, rows, V]. More: ARCHITECTURE.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from calibrate.run.engine import new_cache, truncate_at_eos, unwrap, with_cache
from calibrate.run.proposal import Request
from calibrate.run.synthetic_acceptance import SyntheticAcceptance, scripted_accept
from calibrate.run.timing import timed
from specsim.errors import SpecsimError


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class BatchBlock:
    """One block of the batch: γ, per request the drafts accepted and tokens emitted (0 once finished),
    ms in draft steps and the verify pass, the whole block's ms, and the cache columns (pads and masked
    columns included) each model's first pass of the block ran on."""

    gamma: int
    accepted: tuple[int, ...]
    emitted: tuple[int, ...]
    draft_ms: float
    verify_ms: float
    block_ms: float
    target_columns: int
    draft_columns: int
    draft_step_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class BatchResult:
    """Each request's output tokens, its prompt length, and the batch's blocks (γ = 0: target-only steps)."""

    tokens: tuple[tuple[int, ...], ...]
    prompt_tokens: tuple[int, ...]
    blocks: tuple[BatchBlock, ...]
    method: str

    @property
    def batch_size(self) -> int:
        return len(self.tokens)


# --------------------------------------------------------------------------- one padded model
class PaddedCache:
    """One model's KV cache over B left-padded rows: ``mask`` [B, cols] (1 = a committed token's column),
    ``pos`` [B] the position id of each row's next token."""

    def __init__(self, model, batch: int, device):
        self.model, self.cache = model, new_cache()
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)

    @property
    def columns(self) -> int:
        return self.mask.shape[1]

    @property
    def device(self) -> torch.device:
        return self.mask.device

    def forward(self, live: torch.Tensor, *, keep: int, **inputs) -> torch.Tensor:
        """One pass over new columns whose ``live`` [B, m] (1 = a real token, 0 = a masked pad) say which
        count; the last ``keep`` positions' float logits [B, keep, V]. Live tokens of a row take
        consecutive position ids."""
        pos = self.pos[:, None] + (live.cumsum(1) - live).clamp(min=0)  # [B, m]
        self.mask = torch.cat([self.mask, live], 1)
        out = self.model(
            **inputs,
            attention_mask=self.mask,
            position_ids=pos,
            **with_cache(self.model, self.cache),
            use_cache=True,
            logits_to_keep=keep,
        )
        self.pos = self.pos + live.sum(1)
        return out.logits.float()

    def reject(self, from_column: torch.Tensor) -> None:
        """Mask, per row, every column from ``from_column`` [B] on (a rejected draft's KV), and take those
        positions back."""
        cols = torch.arange(self.columns, device=self.mask.device)[None]  # [1, cols]
        dead = (cols >= from_column[:, None]) & (self.mask > 0)
        self.pos = self.pos - dead.sum(1)
        self.mask = self.mask.masked_fill(dead, 0)


def left_pad(rows: list[torch.Tensor], fill=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [L_b, ...] (token ids, or embeddings [L_b, H]) -> one left-padded batch [B, L, ...] with ``fill``
    on the pads, and the mask [B, L] (long, 1 on real positions)."""
    length = max(r.shape[0] for r in rows)
    out = rows[0].new_full((len(rows), length, *rows[0].shape[1:]), fill)
    mask = torch.zeros(len(rows), length, dtype=torch.long, device=rows[0].device)
    for b, r in enumerate(rows):
        if r.shape[0]:
            out[b, length - r.shape[0] :] = r
            mask[b, length - r.shape[0] :] = 1
    return out, mask


def check_requests(requests: list[Request], max_new_tokens: int) -> None:
    if not requests:
        raise SpecsimError("batch: expected at least one request, got none")
    if max_new_tokens < 1:
        raise SpecsimError(f"max_new_tokens: expected an integer >= 1, got {max_new_tokens!r}")
    for r in requests:
        if r.input_ids.ndim != 2 or r.input_ids.shape[0] != 1 or r.input_ids.shape[1] < 1:
            raise SpecsimError(
                f"input_ids of {r.prompt_id or 'a request'}: expected shape [1, S] with S >= 1, "
                f"got {tuple(r.input_ids.shape)}"
            )


# --------------------------------------------------------------------------- phases
def batch_prefill_phase(model, requests: list[Request], pad_id: int) -> tuple[dict, torch.Tensor]:
    """The target's first-pass inputs: left-padded prompt ids [B, S], their mask, and the images of every
    request in batch order (``pixel_values`` concatenated: a LLaVA-style model scatters them over its
    image tokens row by row)."""
    extra = sorted({k for r in requests for k in r.target_kwargs} - {"pixel_values"})
    if extra:
        raise SpecsimError(f"batch: target inputs {extra} cannot be batched yet (pixel_values only)")
    ids, live = left_pad([r.input_ids[0].cpu() for r in requests], pad_id)
    inputs = {"input_ids": ids.to(model.device)}
    pixels = [r.target_kwargs["pixel_values"] for r in requests if "pixel_values" in r.target_kwargs]
    if pixels:
        inputs["pixel_values"] = torch.cat(pixels, 0)
    return inputs, live.to(model.device)


def batch_draft_phase(draft: PaddedCache, first: tuple, g: int) -> tuple[torch.Tensor, list[float]]:
    """g greedy draft steps for every row: the first feeds ``first`` (inputs and live mask of the rows'
    unfed tokens, the whole draft prompt in a request's first block), each later step the previous draft;
    drafts [B, g] and the ms of each step."""
    inputs, live = first
    drafts, steps = [], []
    for _ in range(g):
        with timed(draft.device) as t:
            logits = draft.forward(live, keep=1, **inputs)  # [B, 1, V]
        steps.append(t.ms)
        tok = torch.argmax(logits[:, -1], -1)  # [B]
        drafts.append(tok)
        inputs, live = {"input_ids": tok[:, None]}, torch.ones_like(tok)[:, None]
    if not drafts:
        return torch.zeros(live.shape[0], 0, dtype=torch.long, device=draft.device), steps
    return torch.stack(drafts, 1), steps


def batch_verify_phase(
    target: PaddedCache, pending: tuple, drafts: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """One target pass over [pending, d_1..d_g] for every row; logits [B, g+1, V] and its ms."""
    inputs, live = pending
    g = drafts.shape[1]
    if g:
        inputs = {**inputs, "input_ids": torch.cat([inputs["input_ids"], drafts], 1)}
        live = torch.cat([live, torch.ones_like(drafts)], 1)
    with timed(target.device) as t:
        logits = target.forward(live, keep=g + 1, **inputs)
    return logits, t.ms


def batch_accept_phase(logits: torch.Tensor, drafts: torch.Tensor, forced=None):
    """Greedy acceptance per row: (n accepted [B], the target's next token [B]); ``forced``: the drafts a
    synthetic-acceptance schedule accepts per row (:mod:`calibrate.run.synthetic_acceptance`)."""
    if forced is not None:
        return scripted_accept(logits, forced)
    best = torch.argmax(logits, -1)  # [B, g+1]
    g = drafts.shape[1]
    n = torch.cumprod((best[:, :g] == drafts).long(), 1).sum(1) if g else torch.zeros_like(best[:, 0])
    return n, best.gather(1, n[:, None])[:, 0]


def batch_sd_block(t_cache: PaddedCache, d_cache: PaddedCache, pending: tuple, tail: tuple, g, forced=None):
    """One SD block over the batch: draft g, verify, accept per row (``forced``: as a synthetic schedule
    says), and mask each row's rejected drafts in both caches; (drafts [B, g], accepted n [B], the target's
    next token [B], draft step ms, verify ms). ``pending``/``tail``: the target's and the draft's unfed inputs
    and live masks."""
    drafts, steps = batch_draft_phase(d_cache, tail, g)
    d_fed = d_cache.columns  # draft columns after feeding d_1..d_{g-1}
    t_start = t_cache.columns + pending[1].shape[1]  # the target's first draft column
    logits, verify_ms = batch_verify_phase(t_cache, pending, drafts)
    n, nxt = batch_accept_phase(logits, drafts, forced)
    t_cache.reject(t_start + n)  # the KV of each row's rejected drafts goes dark
    if g:
        d_cache.reject(d_fed - (g - 1) + torch.clamp(n, max=g - 1))
    return drafts, n, nxt, steps, verify_ms


def batch_target_step(cache: PaddedCache, inputs: dict, live: torch.Tensor) -> tuple[torch.Tensor, float]:
    """One target-only step over the batch: each row's next token [B] and the pass's ms."""
    with timed(cache.device) as t:
        logits = cache.forward(live, keep=1, **inputs)
    return torch.argmax(logits[:, -1], -1), t.ms


# --------------------------------------------------------------------------- loops
def draft_prompt_inputs(draft_model, members, requests: list[Request], device) -> tuple[dict, torch.Tensor]:
    """The draft's first-pass inputs: each request's draft context (its drafting method's embeddings),
    left-padded into one batch."""
    if members is None:  # a plain text draft reads the target's prompt
        ids, live = left_pad([r.input_ids[0].cpu() for r in requests], 0)
        return {"input_ids": ids.to(draft_model.device)}, live.to(draft_model.device)
    (member,) = members
    embeds = [member.build(r, draft_model, {}, device).embeds for r in requests]
    padded, live = left_pad(embeds)
    return {"inputs_embeds": padded}, live


@torch.inference_mode()
def batch_speculative_decode(
    target,
    draft,
    requests: list[Request],
    *,
    gamma: int,
    max_new_tokens: int,
    members=None,
    pad_id: int = 0,
    eos_token_id=None,
    device="cpu",
    method: str = "plain",
    acceptance: SyntheticAcceptance | None = None,
) -> BatchResult:
    """Greedy speculative decoding of ``requests`` as one static batch at a fixed γ (module docstring).
    ``members``: the drafting method's one context member (None: the draft reads the target's prompt);
    ``acceptance``: a synthetic schedule each row's blocks accept by (not lossless)."""
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise SpecsimError(f"gamma: expected an integer >= 1, got {gamma!r}")
    check_requests(requests, max_new_tokens)
    if members is not None and len(members) != 1:
        raise SpecsimError(f"batch: expected a drafting method of one context, got {len(members)} members")
    tm, dm = unwrap(target), unwrap(draft)
    B = len(requests)
    t_cache, d_cache = PaddedCache(tm, B, tm.device), PaddedCache(dm, B, dm.device)
    pending = batch_prefill_phase(tm, requests, pad_id)
    tail = draft_prompt_inputs(dm, members, requests, device)
    out: list[list[int]] = [[] for _ in requests]
    running = torch.ones(B, dtype=torch.bool)
    blocks = []
    while bool(running.any()):
        t0 = time.perf_counter()
        left = torch.tensor([max_new_tokens - len(o) for o in out])
        g = int(min(gamma, int(left[running].max()) - 1))
        t_cols, d_cols = t_cache.columns, d_cache.columns
        forced = acceptance and acceptance.accepted_rows([r.prompt_id for r in requests], [*map(len, out)], g)
        drafts, n, nxt, steps, verify_ms = batch_sd_block(t_cache, d_cache, pending, tail, g, forced)
        accepted, emitted = [], []
        for b in range(B):
            if not running[b]:
                accepted.append(0), emitted.append(0)
                continue
            kept = drafts[b, : int(n[b])].tolist() + [int(nxt[b])]
            new, done = truncate_at_eos(kept, max_new_tokens - len(out[b]), eos_token_id)
            out[b].extend(new)
            running[b] = not done
            accepted.append(len(new) - 1), emitted.append(len(new))
        live = running.long()[:, None].to(tm.device)  # a finished row feeds masked pads from now on
        pending = ({"input_ids": nxt[:, None]}, live)
        tail = _draft_tail(drafts, n, nxt, g, live)
        blocks.append(
            BatchBlock(
                gamma=g,
                accepted=tuple(accepted),
                emitted=tuple(emitted),
                draft_ms=float(sum(steps)),
                verify_ms=verify_ms,
                block_ms=(time.perf_counter() - t0) * 1e3,
                target_columns=t_cols,
                draft_columns=d_cols,
                draft_step_ms=tuple(steps),
            )
        )
    return BatchResult(
        tokens=tuple(tuple(o) for o in out),
        prompt_tokens=tuple(int(r.input_ids.shape[1]) for r in requests),
        blocks=tuple(blocks),
        method=method,
    )


def _draft_tail(drafts: torch.Tensor, n: torch.Tensor, nxt: torch.Tensor, g: int, live: torch.Tensor):
    """The draft's unfed committed tokens per row: [d_g, next] after a block that accepted all g drafts
    (d_g was never fed), else [next]; one masked pad column in front where a row has one."""
    if g == 0:
        return {"input_ids": nxt[:, None]}, live
    full = (n == g).long()[:, None] * live  # [B, 1]; a finished row's acceptance is of pads: never full
    ids = torch.stack([drafts[:, g - 1], nxt], 1)  # [B, 2]
    if not bool(full.any()):
        return {"input_ids": nxt[:, None]}, live
    return {"input_ids": ids}, torch.cat([full, live], 1)


@torch.inference_mode()
def batch_target_decode(
    target, requests: list[Request], *, max_new_tokens: int, pad_id: int = 0, eos_token_id=None
) -> BatchResult:
    """Greedy target-only decoding of ``requests`` as one static batch, through the same padded forward."""
    check_requests(requests, max_new_tokens)
    tm = unwrap(target)
    B = len(requests)
    cache = PaddedCache(tm, B, tm.device)
    inputs, live = batch_prefill_phase(tm, requests, pad_id)
    out: list[list[int]] = [[] for _ in requests]
    running = torch.ones(B, dtype=torch.bool)
    blocks = []
    while bool(running.any()):
        t0, cols = time.perf_counter(), cache.columns
        nxt, step_ms = batch_target_step(cache, inputs, live)  # [B]
        emitted = []
        for b in range(B):
            if running[b]:
                new, done = truncate_at_eos([int(nxt[b])], max_new_tokens - len(out[b]), eos_token_id)
                out[b].extend(new)
                running[b] = not done
                emitted.append(len(new))
            else:
                emitted.append(0)
        inputs, live = {"input_ids": nxt[:, None]}, running.long()[:, None].to(tm.device)
        blocks.append(
            BatchBlock(
                gamma=0,
                accepted=(0,) * B,
                emitted=tuple(emitted),
                draft_ms=0.0,
                verify_ms=step_ms,
                block_ms=(time.perf_counter() - t0) * 1e3,
                target_columns=cols,
                draft_columns=0,
            )
        )
    return BatchResult(
        tokens=tuple(tuple(o) for o in out),
        prompt_tokens=tuple(int(r.input_ids.shape[1]) for r in requests),
        blocks=tuple(blocks),
        method="target",
    )
