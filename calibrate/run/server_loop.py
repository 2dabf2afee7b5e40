"""A real server loop: requests join and leave the batched engine as they arrive and finish (continuous
batching), decoding with speculative decoding at a fixed γ or target-only, greedy, on the wall clock.

One step, after vLLM V1's engine step (modelled by :mod:`specsim.serve.simulator`): admit arrived requests
while fewer than ``max_num_seqs`` run; one decode pass (an SD block or a target-only step); each admitted
request's prefill at batch 1; leave and join; stamp every token with the step's end. Lossless as the static
batch. Times: seconds from the loop's start (arrivals, stamps), ms (passes). More: ARCHITECTURE.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from calibrate.run.batch_engine import (
    PaddedCache,
    batch_prefill_phase,
    batch_sd_block,
    batch_target_step,
    check_requests,
    draft_prompt_inputs,
    left_pad,
)
from calibrate.run.engine import truncate_at_eos, unwrap
from calibrate.run.proposal import Request
from calibrate.run.synthetic_acceptance import SyntheticAcceptance
from calibrate.run.timing import gc_paused, timed
from specsim.errors import SpecsimError

COMPACT_COLUMNS = 16


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class ServedRequest:
    """One request as the loop served it: arrival, first token and finish (s), every token's stamp (s),
    its tokens and its prompt positions (images included)."""

    arrival_s: float
    first_token_s: float
    finish_s: float
    token_times_s: tuple[float, ...]
    tokens: tuple[int, ...]
    prompt_tokens: int


@dataclass(frozen=True)
class LoopStep:
    """One step: start and end (s), γ (0: target-only), requests decoding and admitted, per decoding request
    the drafts accepted and tokens emitted, the target's cache width before the pass, and ms in prefills,
    draft steps and the target pass, and of the prefills' ms those in the models' forwards (the rest is the
    requests' set-up: inputs, caches, the draft's prompt, the first token)."""

    start_s: float
    end_s: float
    gamma: int
    decoding: int
    admitted: int
    accepted: tuple[int, ...]
    emitted: tuple[int, ...]
    width: int
    prefill_ms: float
    draft_ms: float
    verify_ms: float
    prefill_forward_ms: float = 0.0


@dataclass(frozen=True)
class LoopRun:
    """What the loop served, step by step."""

    requests: tuple[ServedRequest, ...]
    steps: tuple[LoopStep, ...]
    gamma: int
    method: str


# --------------------------------------------------------------------------- the batch's caches
def _pad_columns(x: torch.Tensor, left: int) -> torch.Tensor:
    """``left`` zero columns in front of the sequence axis (-2 of KV [B, H, S, D], -1 of a mask [B, S])."""
    if left == 0:
        return x
    return F.pad(x, (0, 0, left, 0)) if x.ndim == 4 else F.pad(x, (left, 0))


def join_rows(batch: PaddedCache | None, new: PaddedCache) -> PaddedCache:
    """``new``'s rows below ``batch``'s, both left-padded to the wider one's columns (masked pads)."""
    if batch is None:
        return new
    wide = max(batch.columns, new.columns)
    a, b = wide - batch.columns, wide - new.columns
    for la, lb in zip(batch.cache.layers, new.cache.layers, strict=True):
        la.keys = torch.cat([_pad_columns(la.keys, a), _pad_columns(lb.keys, b)], 0)
        la.values = torch.cat([_pad_columns(la.values, a), _pad_columns(lb.values, b)], 0)
    batch.mask = torch.cat([_pad_columns(batch.mask, a), _pad_columns(new.mask, b)], 0)
    batch.pos = torch.cat([batch.pos, new.pos])
    return batch


def keep_rows(cache: PaddedCache, rows: Sequence[int]) -> PaddedCache | None:
    """Only ``rows`` of the batch, in that order (None when none is left)."""
    if not rows:
        return None
    idx = torch.tensor(list(rows), dtype=torch.long, device=cache.mask.device)
    for layer in cache.cache.layers:
        layer.keys, layer.values = layer.keys.index_select(0, idx), layer.values.index_select(0, idx)
    cache.mask, cache.pos = cache.mask.index_select(0, idx), cache.pos.index_select(0, idx)
    return cache


def compact(cache: PaddedCache | None, at_least: int) -> None:
    """Drop the cache columns masked in every row, once there are ``at_least`` of them (their KV is never
    read; position ids are per row, so the rest keep theirs)."""
    if cache is None:
        return
    alive = cache.mask.any(0)
    if int((~alive).sum()) < at_least:
        return
    idx = torch.nonzero(alive)[:, 0]
    for layer in cache.cache.layers:
        layer.keys, layer.values = layer.keys.index_select(2, idx), layer.values.index_select(2, idx)
    cache.mask = cache.mask.index_select(1, idx)


# --------------------------------------------------------------------------- phases of a step
def prefill_request(tm, dm, request: Request, *, members, pad_id: int, device):
    """One request's prefill at batch 1: (its first token, the target's cache row, the draft's cache row or
    None without a draft, ms in the two models' forwards)."""
    t_row = PaddedCache(tm, 1, tm.device)
    inputs, live = batch_prefill_phase(tm, [request], pad_id)
    with timed(tm.device) as t_pass:
        logits = t_row.forward(live, keep=1, **inputs)
    first = int(torch.argmax(logits[0, -1]))
    if dm is None:
        return first, t_row, None, t_pass.ms
    d_row = PaddedCache(dm, 1, dm.device)
    d_inputs, d_live = draft_prompt_inputs(dm, members, [request], device)
    with timed(dm.device) as d_pass:
        d_row.forward(d_live, keep=1, **d_inputs)  # the draft's prompt into its cache; its logits are unused
    return first, t_row, d_row, t_pass.ms + d_pass.ms


def sd_step(t_cache: PaddedCache, d_cache: PaddedCache, last: list[int], tails: list[list[int]], gamma: int,
            forced=None):  # fmt: skip
    """One SD block over the batch (:func:`calibrate.run.batch_engine.batch_sd_block`): (accepted drafts [B],
    each row's kept tokens, its next draft tail, draft ms, verify ms). ``last``: each row's last emitted token
    (the target's pending one); ``tails``: the draft's unfed tokens per row (1 or 2); ``forced``: the drafts a
    synthetic schedule accepts per row."""
    ids, live = left_pad([torch.tensor(t, device=d_cache.device) for t in tails], 0)
    pending = torch.tensor(last, device=t_cache.device)[:, None]
    drafts, n, nxt, steps, verify_ms = batch_sd_block(
        t_cache,
        d_cache,
        ({"input_ids": pending}, torch.ones_like(pending)),
        ({"input_ids": ids}, live),
        gamma,
        forced,
    )
    kept, new_tails = [], []
    for b in range(len(last)):
        nb = int(n[b])
        kept.append(drafts[b, :nb].tolist() + [int(nxt[b])])
        new_tails.append([int(drafts[b, gamma - 1]), int(nxt[b])] if nb == gamma else [int(nxt[b])])
    return n.tolist(), kept, new_tails, float(sum(steps)), verify_ms


def loop_target_step(t_cache: PaddedCache, last: list[int]) -> tuple[list[list[int]], float]:
    """One target-only step over the batch (:func:`calibrate.run.batch_engine.batch_target_step`): each row's
    next token, and the pass's ms."""
    pending = torch.tensor(last, device=t_cache.device)[:, None]
    nxt, ms = batch_target_step(t_cache, {"input_ids": pending}, torch.ones_like(pending))
    return [[int(x)] for x in nxt], ms


def _check_loop(requests, arrival_s, gamma, max_new_tokens, max_num_seqs) -> None:
    """The batch engine's checks of the requests and ``max_new_tokens``, then the loop's own arguments."""
    check_requests(requests, max_new_tokens)
    if len(arrival_s) != len(requests):
        raise SpecsimError(
            f"arrival_s: expected {len(requests)} times (one per request), got {len(arrival_s)}"
        )
    if any(b < a for a, b in zip(arrival_s, arrival_s[1:])) or min(arrival_s) < 0:
        raise SpecsimError("arrival_s: expected times >= 0 in arrival order")
    for name, value, lo in (("gamma", gamma, 0), ("max_num_seqs", max_num_seqs, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise SpecsimError(f"{name}: expected an integer >= {lo}, got {value!r}")


# --------------------------------------------------------------------------- the loop
@gc_paused()  # a timed run: no collector pause inside it (calibrate.run.timing.gc_paused)
@torch.inference_mode()
def serve_loop(
    target,
    draft,
    requests: list[Request],
    arrival_s: Sequence[float],
    *,
    gamma: int,
    max_new_tokens: int,
    max_num_seqs: int = 8,
    members=None,
    pad_id: int = 0,
    eos_token_id=None,
    device="cpu",
    method: str = "target",
    compact_columns: int = COMPACT_COLUMNS,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    acceptance: SyntheticAcceptance | None = None,
) -> LoopRun:
    """Serve ``requests`` arriving at ``arrival_s`` (s from the start) to completion (module docstring);
    ``gamma`` 0 is target-only (``draft`` unused); ``acceptance``: a synthetic schedule the blocks follow."""
    _check_loop(requests, list(arrival_s), gamma, max_new_tokens, max_num_seqs)
    tm, dm = unwrap(target), (unwrap(draft) if gamma else None)
    n = len(requests)
    out: list[list[int]] = [[] for _ in range(n)]
    stamps: list[list[float]] = [[] for _ in range(n)]
    first_s, finish_s = [float("nan")] * n, [float("nan")] * n
    running: list[int] = []  # request ids in cache row order
    tails: list[list[int]] = []  # the draft's unfed tokens per running row
    t_cache = d_cache = None
    steps: list[LoopStep] = []
    arrived = done = 0
    t0 = clock()
    while done < n:
        now = clock() - t0
        if not running and arrived < n and arrival_s[arrived] > now:
            sleep(arrival_s[arrived] - now)
            continue
        admit = []
        while arrived < n and arrival_s[arrived] <= now and len(running) + len(admit) < max_num_seqs:
            admit.append(arrived)
            arrived += 1
        width = t_cache.columns if t_cache is not None else 0
        accepted, kept, draft_ms, verify_ms = [], [], 0.0, 0.0
        if running:
            last = [out[r][-1] for r in running]
            if gamma:
                ids = [requests[r].prompt_id for r in running]
                forced = acceptance and acceptance.accepted_rows(ids, [len(out[r]) for r in running], gamma)
                accepted, kept, tails, draft_ms, verify_ms = sd_step(
                    t_cache, d_cache, last, tails, gamma, forced
                )
            else:
                kept, verify_ms = loop_target_step(t_cache, last)
        emitted, still, finished, decoded = [], [], [], list(running)
        for i, r in enumerate(running):
            new, stop = truncate_at_eos(kept[i], max_new_tokens - len(out[r]), eos_token_id)
            out[r].extend(new)
            emitted.append(len(new))
            if stop:
                finished.append(r)
            else:
                still.append(i)
        with timed(tm.device) as prefill:
            joined = [
                prefill_request(tm, dm, requests[r], members=members, pad_id=pad_id, device=device)
                for r in admit
            ]
        if len(still) < len(running):
            t_cache = keep_rows(t_cache, still)
            d_cache = keep_rows(d_cache, still) if d_cache is not None else None
            running, tails = [running[i] for i in still], [tails[i] for i in still] if gamma else []
        for r, (tok, t_row, d_row, _) in zip(admit, joined):
            out[r].append(tok)
            _, stop = truncate_at_eos([tok], max_new_tokens, eos_token_id)
            if stop:
                finished.append(r)
                continue
            t_cache = join_rows(t_cache, t_row)
            if gamma:
                d_cache = join_rows(d_cache, d_row)
                tails.append([tok])
            running.append(r)
        compact(t_cache, compact_columns)
        compact(d_cache, compact_columns)
        end = clock() - t0
        for r in decoded + admit:  # decoded: the step's decoding requests, in row order
            stamps[r].extend([end] * (len(out[r]) - len(stamps[r])))
        for r in admit:
            first_s[r] = end
        for r in finished:
            finish_s[r] = end
        done += len(finished)
        steps.append(
            LoopStep(
                now,
                end,
                gamma,
                len(emitted),
                len(admit),
                tuple(accepted),
                tuple(emitted),
                width,
                prefill.ms,
                draft_ms,
                verify_ms,
                sum(j[3] for j in joined),
            )
        )
    served = tuple(
        ServedRequest(
            float(arrival_s[r]),
            first_s[r],
            finish_s[r],
            tuple(stamps[r]),
            tuple(out[r]),
            int(requests[r].input_ids.shape[1]),
        )
        for r in range(n)
    )
    return LoopRun(served, tuple(steps), gamma, method if gamma else "target")
