"""Predicted value of a published row under a runtime: a reference implementation and a vectorised one.

``sd`` row: block = (γ + e)·Tq + Tv + the engine's block terms (e = ``extra_draft_forwards_per_block``),
target step T = Tp + its step terms (:mod:`specsim.hardware.engine_terms`); speedup = τ·T / block, SD ms per
token = block / τ. A ``decode`` row compares T, a ``pass`` row one target forward, a ``speedup_ratio`` row
its speedup over its reference row's.
Textbook (Leviathan et al. 2023): speedup = τ / (γ·c + 1), c = draft weight bytes / target weight bytes.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import block_speedup
from specsim.costs.pass_cost import DRAFT, TARGET
from specsim.draft_kinds.registry import draft_kind
from specsim.hardware.device import Device, load_device
from specsim.hardware.draft_heads import head_spec, mtp_head
from specsim.hardware.engine_terms import block_terms_ms, draft_pass_ms, step_terms_ms
from specsim.hardware.model_resolution import model_config
from specsim.hardware.roofline import forward_bytes
from specsim.hardware.roofline_pass_cost import PassTable, RooflinePassCost, terms_table
from specsim.validation.published_set import PublishedSet, Row


@functools.lru_cache(maxsize=64)
def device(name: str) -> Device:
    return load_device(name)


@functools.lru_cache(maxsize=256)
def _spec(ps_key: int, ps: PublishedSet, name: str, dtype: str, kv_dtype: str):
    """ModelSpecs are rebuilt many times by a fit: cache them per set (``ps_key`` = id of the set)."""
    return ps.model(name, dtype, kv_dtype)


def models(ps: PublishedSet, row: Row):
    """(target, draft side or None) ModelSpecs of a row: a head kind's draft as the kind runs it
    (:mod:`specsim.hardware.draft_heads`), None for a lookup kind."""
    target = _spec(id(ps), ps, row.target, row.weights_dtype, row.kv_dtype)
    kind = draft_kind(row.draft_kind)
    if not kind.has_model:
        return target, None
    if row.draft is None:  # an MTP row without a head config: one layer of the target's
        return target, mtp_head(target)
    draft = _spec(id(ps), ps, row.draft, row.draft_weights_dtype, row.kv_dtype)
    if kind.is_head:
        config = ps.models.get(row.draft) or model_config(row.draft)
        draft = head_spec(kind, draft, target, config)
    return target, draft


def _reference(ps: PublishedSet, row: Row) -> Row:
    return next(r for r in ps.rows if r.id == row.ratio_to)


def extra_forwards(row: Row, rt) -> float:
    """Draft forwards per block beyond γ: the row's own figure when it gives one, else the runtime's (none
    for a lookup kind)."""
    if not draft_kind(row.draft_kind).has_model:
        return 0.0
    own = row.extra_draft_forwards_per_block
    return float(rt.extra_draft_forwards_per_block if own is None else own)


def pass_cost(ps: PublishedSet, row: Row, rt) -> RooflinePassCost:
    """The row's passes under runtime ``rt``: its target over ``tp`` GPUs, its draft over ``draft_tp``."""
    target, draft = models(ps, row)
    return RooflinePassCost(target, draft, device(row.device), rt, row.tp, row.draft_tp, row.draft_kind)


def _draft_context(row: Row) -> float:
    return row.target_context_tokens if row.draft_context_tokens is None else row.draft_context_tokens


def _step_over_block(ps: PublishedSet, row: Row, rt) -> tuple[float, float]:
    """(target-only step T, SD block) of an sd row in ms, pass by pass (reference implementation)."""
    cost = pass_cost(ps, row, rt)
    ctx, b = row.target_context_tokens, row.batch
    tp = float(cost.pass_ms(TARGET, 1, ctx, b).ms)
    tq = float(cost.pass_ms(DRAFT, 1, _draft_context(row), b).ms)
    tv = float(cost.pass_ms(TARGET, row.gamma + 1, ctx, b).ms)
    gpu = (row.gamma + extra_forwards(row, rt)) * tq + tv
    step = tp + float(cost.step_overhead_ms(b, gpu_ms=tp))
    return step, gpu + float(cost.block_overhead_ms(row.gamma, b, gpu_ms=gpu))


def _new_tokens(row: Row) -> int:
    """New positions per sequence in the pass a ``decode`` or ``pass`` row measures."""
    return row.pass_new_tokens if row.kind == "pass" else 1


def predict_row(ps: PublishedSet, row: Row, rt) -> float:
    """specsim's prediction of the row's observable under runtime ``rt`` (reference implementation)."""
    if row.kind in ("pass", "decode"):
        cost = pass_cost(ps, row, rt)
        ms = float(cost.pass_ms(TARGET, _new_tokens(row), row.target_context_tokens, row.batch).ms)
        return ms if row.kind == "pass" else ms + float(cost.step_overhead_ms(row.batch, gpu_ms=ms))
    step, block = _step_over_block(ps, row, rt)
    if row.observable == "speedup_ratio":
        step_ref, block_ref = _step_over_block(ps, _reference(ps, row), rt)
        return (step / block) / (step_ref / block_ref)
    return block_speedup(row.tau, step, block) if row.observable == "speedup" else float(block / row.tau)


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
    c = 0.0 if draft is None else draft.weight_bytes / target.weight_bytes
    speedup = block_speedup(row.tau, 1.0, row.gamma * c + 1.0)  # v = 1; γ may be a mean (not whole)
    return speedup if row.observable == "speedup" else ideal_tp / speedup


_KINDS = {"target_ms_per_token": 0, "pass_ms": 0, "speedup": 1, "sd_ms_per_token": 2, "speedup_ratio": 3}


@dataclass(frozen=True)
class _Blocks:
    """The sd passes of a set of rows (the rows', or their references'), as indices into a PassTable."""

    tp: np.ndarray
    tq: np.ndarray
    tv: np.ndarray
    gamma: np.ndarray
    extra: np.ndarray  # the row's extra draft forwards per block; NaN: the runtime's
    batch: np.ndarray
    head: np.ndarray  # bool: the draft is a head (its floor is the head's)
    lookup: np.ndarray  # bool: no draft forward, a host lookup

    def step_and_block(self, t: np.ndarray, rt) -> tuple[np.ndarray, np.ndarray]:
        """(target-only step T, SD block) in ms of every row, as :func:`_step_over_block`."""
        tq = np.where(self.lookup, 0.0, draft_pass_ms(rt, t[self.tq], head=self.head))
        own = np.where(np.isnan(self.extra), rt.extra_draft_forwards_per_block, self.extra)
        extra = np.where(self.lookup, 0.0, own)
        gpu = (self.gamma + extra) * tq + t[self.tv]
        terms = block_terms_ms(rt, self.gamma, self.batch, gpu, lookup=self.lookup, head=self.head)
        step = t[self.tp] + sum(step_terms_ms(rt, self.batch, t[self.tp]).values())
        return step, gpu + sum(terms.values())


@dataclass(frozen=True)
class RowModel:
    """Rows of one runtime as index arrays into a PassTable, priced under a runtime in one vectorised step."""

    rows: tuple[Row, ...]
    table: PassTable
    kind: np.ndarray  # _KINDS code per row
    own: _Blocks
    ref: _Blocks  # a ratio row's reference row (the row itself otherwise)
    tau: np.ndarray
    measured: np.ndarray
    is_pass: np.ndarray  # bool: a pass row (the forward alone, no step terms)

    def predict(self, rt) -> np.ndarray:
        """Every row's observable under runtime ``rt`` (same values as :func:`predict_row`)."""
        t = self.table.ms(rt)
        step, block = self.own.step_and_block(t, rt)
        ref_step, ref_block = self.ref.step_and_block(t, rt)
        decode = np.where(self.is_pass, t[self.own.tp], step)
        rate, ref = step / block, ref_step / ref_block
        return np.select(
            [self.kind == 0, self.kind == 1, self.kind == 2],
            [decode, self.tau * rate, block / self.tau],
            rate / ref,
        )


def _sd_passes(ps: PublishedSet, row: Row, entries: list[dict]) -> tuple[int, int, int]:
    """Append the Tp, Tq, Tv passes of an sd row (a lookup kind's Tq: a placeholder); return their
    indices."""
    cost = pass_cost(ps, row, None)
    ctx, b = row.target_context_tokens, row.batch
    start = len(entries)
    tp = cost.terms(TARGET, 1, ctx, b)
    tq = tp if cost.draft is None else cost.terms(DRAFT, 1, _draft_context(row), b)
    entries += [tp, tq, cost.terms(TARGET, row.gamma + 1, ctx, b)]
    return start, start + 1, start + 2


def _own_extra(row: Row) -> float:
    """The row's extra draft forwards per block, NaN where the runtime's apply."""
    return np.nan if row.extra_draft_forwards_per_block is None else float(row.extra_draft_forwards_per_block)


_BLOCK_KEYS = ("tp", "tq", "tv", "gamma", "extra", "batch", "head", "lookup")
_TYPES = {"tp": int, "tq": int, "tv": int, "head": bool, "lookup": bool}


def _block_values(row: Row, idx: tuple[int, int, int], gamma: float) -> tuple:
    kind = draft_kind(row.draft_kind)
    return (*idx, gamma, _own_extra(row), row.batch, kind.is_head, not kind.has_model)


def _blocks(cols: dict) -> _Blocks:
    return _Blocks(**{k: np.array(cols[k], dtype=_TYPES.get(k, float)) for k in _BLOCK_KEYS})


def row_model(ps: PublishedSet, rows: list[Row]) -> RowModel:
    """The RowModel of ``rows`` (predictable rows of the set)."""
    entries: list[dict] = []
    own: dict[str, list] = {k: [] for k in _BLOCK_KEYS}
    ref: dict[str, list] = {k: [] for k in _BLOCK_KEYS}
    for row in rows:
        if row.kind in ("decode", "pass"):
            cost = pass_cost(ps, row, None)
            entries.append(cost.terms(TARGET, _new_tokens(row), row.target_context_tokens, row.batch))
            idx, gamma = (len(entries) - 1,) * 3, 0.0
        else:
            idx, gamma = _sd_passes(ps, row, entries), row.gamma
        other = _reference(ps, row) if row.observable == "speedup_ratio" else row
        other_idx = idx if other is row else _sd_passes(ps, other, entries)
        for cols, r, i, g in ((own, row, idx, gamma), (ref, other, other_idx, other.gamma or gamma)):
            for key, value in zip(_BLOCK_KEYS, _block_values(r, i, g)):
                cols[key].append(value)
    return RowModel(
        tuple(rows),
        terms_table(entries),
        kind=np.array([_KINDS[r.observable] for r in rows], dtype=int),
        own=_blocks(own),
        ref=_blocks(ref),
        tau=np.array([r.tau or 1.0 for r in rows], dtype=float),
        measured=np.array([r.measured for r in rows], dtype=float),
        is_pass=np.array([r.kind == "pass" for r in rows], dtype=bool),
    )
