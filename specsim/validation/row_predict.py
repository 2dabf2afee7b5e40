"""Predicted value of a published row under a runtime: a reference implementation and a vectorised one.

For an ``sd`` row: Tp = decode(target, tp GPUs), Tq = decode(draft, draft_tp GPUs, its own cached
context), Tv = verify(target, γ+1 rows), block = (γ + e)·Tq + Tv + runtime.overhead_ms_per_block with
e = the draft forwards a block runs beyond its γ drafts (the row's ``extra_draft_forwards_per_block``, else
the runtime's); speedup = τ·Tp / block and SD ms per token = block / τ. A ``decode`` row compares Tp with the
published ms per token, a ``pass`` row one target forward over its ``pass_new_tokens`` new positions with the
published ms. A ``speedup_ratio`` row compares its speedup over its reference row's (same pair, context and
γ, another batch size): (Tp/block)(row) / (Tp/block)(ref), τ cancelling.
Textbook (Leviathan et al. 2023): speedup = τ / (γ·c + 1) with c = draft weight bytes / target weight bytes
and v = 1; ms per token (and per pass) from bytes / peak bandwidth with no overhead; a speedup ratio of 1 (no
batch dependence).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import block_speedup, sd_block_ms
from specsim.costs.pass_cost import DRAFT, TARGET
from specsim.hardware.device import Device, load_device
from specsim.hardware.roofline import forward_bytes
from specsim.hardware.roofline_pass_cost import PassTable, RooflinePassCost, terms_table
from specsim.hardware.runtime import block_overhead_ms
from specsim.validation.published_set import PublishedSet, Row


@functools.lru_cache(maxsize=64)
def device(name: str) -> Device:
    return load_device(name)


@functools.lru_cache(maxsize=256)
def _spec(ps_key: int, ps: PublishedSet, name: str, dtype: str, kv_dtype: str):
    """ModelSpecs are rebuilt many times by a fit: cache them per set (``ps_key`` = id of the set)."""
    return ps.model(name, dtype, kv_dtype)


def models(ps: PublishedSet, row: Row):
    """(target, draft or None) ModelSpecs of a row."""
    target = _spec(id(ps), ps, row.target, row.weights_dtype, row.kv_dtype)
    draft = None if row.draft is None else _spec(id(ps), ps, row.draft, row.draft_weights_dtype, row.kv_dtype)
    return target, draft


def _reference(ps: PublishedSet, row: Row) -> Row:
    return next(r for r in ps.rows if r.id == row.ratio_to)


def extra_forwards(row: Row, rt) -> float:
    """Draft forwards per block beyond γ: the row's own figure when it gives one, else the runtime's."""
    own = row.extra_draft_forwards_per_block
    return float(rt.extra_draft_forwards_per_block if own is None else own)


def pass_cost(ps: PublishedSet, row: Row, rt) -> RooflinePassCost:
    """The row's passes under runtime ``rt``: its target over ``tp`` GPUs, its draft over ``draft_tp``."""
    target, draft = models(ps, row)
    return RooflinePassCost(target, draft, device(row.device), rt, row.tp, row.draft_tp)


def _tp_over_block(ps: PublishedSet, row: Row, rt) -> tuple[float, float]:
    """(Tp, block) of an sd row in ms, pass by pass (reference implementation)."""
    cost = pass_cost(ps, row, rt)
    ctx = row.target_context_tokens
    tp = cost.pass_ms(TARGET, 1, ctx, row.batch).ms
    d_ctx = ctx if row.draft_context_tokens is None else row.draft_context_tokens
    tq = cost.pass_ms(DRAFT, 1, d_ctx, row.batch).ms
    tv = cost.pass_ms(TARGET, row.gamma + 1, ctx, row.batch).ms
    forwards = row.gamma + extra_forwards(row, rt)
    return float(tp), float(sd_block_ms(forwards, tq, tv, cost.block_overhead_ms(row.gamma, row.batch)))


def _new_tokens(row: Row) -> int:
    """New positions per sequence in the pass a ``decode`` or ``pass`` row measures."""
    return row.pass_new_tokens if row.kind == "pass" else 1


def predict_row(ps: PublishedSet, row: Row, rt) -> float:
    """specsim's prediction of the row's observable under runtime ``rt`` (reference implementation)."""
    if row.kind in ("pass", "decode"):
        cost = pass_cost(ps, row, rt)
        return float(cost.pass_ms(TARGET, _new_tokens(row), row.target_context_tokens, row.batch).ms)
    tp, block = _tp_over_block(ps, row, rt)
    if row.observable == "speedup_ratio":
        tp_ref, block_ref = _tp_over_block(ps, _reference(ps, row), rt)
        return (tp / block) / (tp_ref / block_ref)
    return block_speedup(row.tau, tp, block) if row.observable == "speedup" else float(block / row.tau)


def textbook_row(ps: PublishedSet, row: Row) -> float:
    """The textbook prediction: v = 1, c = weight-bytes ratio; ms from bytes / peak bandwidth; ratio 1."""
    if row.observable == "speedup_ratio":
        return 1.0
    target, draft = models(ps, row)
    dev = device(row.device)
    ideal_tp = float(
        forward_bytes(target, row.batch, row.target_context_tokens, _new_tokens(row))
        / row.tp
        / dev.memory_bandwidth_bytes_per_s
        * 1e3
    )
    if row.kind in ("decode", "pass"):
        return ideal_tp
    c = draft.weight_bytes / target.weight_bytes
    speedup = block_speedup(row.tau, 1.0, row.gamma * c + 1.0)  # v = 1; γ may be a mean (not whole)
    return speedup if row.observable == "speedup" else ideal_tp / speedup


_KINDS = {"target_ms_per_token": 0, "pass_ms": 0, "speedup": 1, "sd_ms_per_token": 2, "speedup_ratio": 3}


@dataclass(frozen=True)
class RowModel:
    """Rows of one runtime as index arrays into a PassTable, priced under a runtime in one vectorised step."""

    rows: tuple[Row, ...]
    table: PassTable
    kind: np.ndarray  # _KINDS code per row
    tp: np.ndarray  # pass index of Tp (the row's, then its reference's for ratio rows)
    tq: np.ndarray
    tv: np.ndarray
    ref_tp: np.ndarray
    ref_tq: np.ndarray
    ref_tv: np.ndarray
    gamma: np.ndarray
    ref_gamma: np.ndarray
    tau: np.ndarray
    measured: np.ndarray
    extra: np.ndarray  # the row's extra draft forwards per block; NaN: the runtime's
    ref_extra: np.ndarray
    batch: np.ndarray
    ref_batch: np.ndarray

    def predict(self, rt) -> np.ndarray:
        """Every row's observable under runtime ``rt`` (same values as :func:`predict_row`)."""
        t = self.table.ms(rt)
        per_block, ref_per_block = block_overhead_ms(rt, self.batch), block_overhead_ms(rt, self.ref_batch)
        extra, ref_extra = (
            np.where(np.isnan(e), rt.extra_draft_forwards_per_block, e) for e in (self.extra, self.ref_extra)
        )
        # tokens per block ms in units of the target's: the speedup of a block that emits one token
        rate = block_speedup(
            1.0, t[self.tp], sd_block_ms(self.gamma + extra, t[self.tq], t[self.tv], per_block)
        )
        ref = block_speedup(
            1.0,
            t[self.ref_tp],
            sd_block_ms(self.ref_gamma + ref_extra, t[self.ref_tq], t[self.ref_tv], ref_per_block),
        )
        out = np.select(
            [self.kind == 0, self.kind == 1, self.kind == 2],
            [t[self.tp], self.tau * rate, t[self.tp] / (self.tau * rate)],
            rate / ref,
        )
        return out


def _sd_passes(ps: PublishedSet, row: Row, entries: list[dict]) -> tuple[int, int, int]:
    """Append the Tp, Tq, Tv passes of an sd row; return their indices."""
    cost = pass_cost(ps, row, None)
    ctx, b = row.target_context_tokens, row.batch
    d_ctx = ctx if row.draft_context_tokens is None else row.draft_context_tokens
    start = len(entries)
    entries += [
        cost.terms(TARGET, 1, ctx, b),
        cost.terms(DRAFT, 1, d_ctx, b),
        cost.terms(TARGET, row.gamma + 1, ctx, b),
    ]
    return start, start + 1, start + 2


def _own_extra(row: Row) -> float:
    """The row's extra draft forwards per block, NaN where the runtime's apply."""
    return np.nan if row.extra_draft_forwards_per_block is None else float(row.extra_draft_forwards_per_block)


def row_model(ps: PublishedSet, rows: list[Row]) -> RowModel:
    """The RowModel of ``rows`` (predictable rows of the set)."""
    entries: list[dict] = []
    keys = (
        "kind",
        "tp",
        "tq",
        "tv",
        "ref_tp",
        "ref_tq",
        "ref_tv",
        "gamma",
        "ref_gamma",
        "tau",
        "extra",
        "ref_extra",
        "batch",
        "ref_batch",
    )
    cols: dict[str, list] = {k: [] for k in keys}
    for row in rows:
        if row.kind in ("decode", "pass"):
            cost = pass_cost(ps, row, None)
            entries.append(cost.terms(TARGET, _new_tokens(row), row.target_context_tokens, row.batch))
            idx = (len(entries) - 1,) * 3
            gamma = 0.0
        else:
            idx = _sd_passes(ps, row, entries)
            gamma = row.gamma
        ref = _reference(ps, row) if row.observable == "speedup_ratio" else row
        ref_idx, ref_gamma = (idx, gamma) if ref is row else (_sd_passes(ps, ref, entries), ref.gamma)
        for key, value in zip(
            keys,
            (
                _KINDS[row.observable],
                *idx,
                *ref_idx,
                gamma,
                ref_gamma,
                row.tau or 1.0,
                _own_extra(row),
                _own_extra(ref),
                row.batch,
                ref.batch,
            ),
        ):
            cols[key].append(value)
    ints = {k: np.array(cols[k], dtype=int) for k in keys[:7]}
    floats = {k: np.array(cols[k], dtype=float) for k in keys[7:]}
    return RowModel(
        tuple(rows),
        terms_table(entries),
        measured=np.array([r.measured for r in rows], dtype=float),
        **ints,
        **floats,
    )
