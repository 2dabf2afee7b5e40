"""Passes priced by the roofline under a runtime (:mod:`specsim.hardware.roofline`): a
:class:`specsim.costs.pass_cost.PassCost` for a target and draft on a device.

A pass costs :func:`~specsim.hardware.roofline.forward_ms` of its model at (batch, width, rows) over the GPUs
its time divides over (``target_tp``, ``draft_tp``); prefills and a block's first draft step keep the logits
of their last position only. Fits and the serving simulation price the same passes in bulk
(:meth:`RooflinePassCost.terms`, :meth:`RooflinePassCost.line`).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from specsim.costs.pass_cost import CATCHUP, DRAFT, FIRST, PREFILL, STEP, TARGET, PassMs
from specsim.draft_kinds.registry import draft_kind
from specsim.hardware.device import Device
from specsim.hardware.engine_terms import block_terms_ms, draft_pass_ms, step_terms_ms
from specsim.hardware.model import ModelSpec
from specsim.hardware.passes import PassTable, pass_table, pass_terms
from specsim.hardware.roofline import (
    compute_bound,
    forward_ms,
    roof_ms,
    sharded_weight_bytes,
    streamed_weights,
    vision_ms,
)

_NAMES = tuple(f.name for f in fields(PassTable))
# terms of passes merged into one add up (the weights, streamed once, are taken off again: _merged)
_SUMMED = ("flops", "base_bytes", "attention_flops", "kv_bytes", "score_elems", "rows", "link_bytes")
_SUMMED += ("kv_elems",)
_ADDITIVE = np.array([n in _SUMMED for n in _NAMES])
_BYTES, _ROWS, _WEIGHTS = _NAMES.index("base_bytes"), _NAMES.index("rows"), _NAMES.index("weights")
_MASKED = _NAMES.index("masked")


@dataclass(frozen=True)
class RooflinePassCost:
    """Passes of ``target`` and ``draft`` on ``device`` under ``runtime`` (a Runtime or an Efficiency)."""

    target: ModelSpec
    draft: ModelSpec | None
    device: Device
    runtime: object
    target_tp: int = 1  # GPUs a target pass's time divides over
    draft_tp: int = 1
    draft_kind: str = "model"  # a drafting kind (:mod:`specsim.draft_kinds.registry`); lookup kinds: no draft
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def _model(self, role: str) -> tuple[ModelSpec, int]:
        return (self.target, self.target_tp) if role == TARGET else (self.draft, self.draft_tp)

    @property
    def kind(self):
        """The drafting kind (:class:`specsim.draft_kinds.registry.DraftKind`)."""
        return draft_kind(self.draft_kind)

    def pass_ms(self, role: str, rows, width, batch=1, *, kind: str = STEP) -> PassMs:
        m, tp = self._model(role)
        if role == DRAFT and m is None:  # a lookup kind runs no draft forward
            ms = np.zeros(np.broadcast(rows, width, batch).shape)
            return PassMs(ms if ms.ndim else 0.0, np.zeros(ms.shape, dtype=bool) if ms.ndim else False)
        logits = 1 if kind in (PREFILL, FIRST, CATCHUP) else None
        ms = forward_ms(m, self.device, self.runtime, batch, width, rows, logits=logits, tp=tp)
        if role == DRAFT and kind != PREFILL:
            ms = self.draft_floor_ms(ms)
        return PassMs(ms, np.zeros(np.shape(ms), dtype=bool) if np.ndim(ms) else False)

    def draft_floor_ms(self, roof_ms_):
        """A draft forward of roofline ``roof_ms_`` under the runtime's floor for the drafting kind."""
        out = draft_pass_ms(self.runtime, roof_ms_, head=self.kind.is_head)
        return out if np.ndim(out) else float(out)

    def compute_bound(self, role: str, rows, width, batch=1, *, kind: str = STEP) -> np.ndarray:
        """True where a pass's compute term exceeds its memory term."""
        m, tp = self._model(role)
        logits = 1 if kind in (PREFILL, FIRST, CATCHUP) else None
        return compute_bound(m, self.device, self.runtime, batch, width, rows, logits, tp=tp)

    def block_terms_ms(self, gamma, batch=1, width=None, *, gpu_ms=None) -> dict:
        """Named work of an SD block outside its passes (:mod:`specsim.hardware.engine_terms`); ``gpu_ms``:
        the block's passes (None: long enough to hide the overlapped scheduling)."""
        kind, rt = self.kind, self.runtime
        return block_terms_ms(rt, gamma, batch, gpu_ms, lookup=not kind.has_model, head=kind.is_head)

    def block_overhead_ms(self, gamma, batch=1, width=None, *, adaptive: bool = False, gpu_ms=None):
        return sum(self.block_terms_ms(gamma, batch, width, gpu_ms=gpu_ms).values())

    def tree_overhead_ms(self, tree, batch=1, width=0.0) -> float:
        return self.block_overhead_ms(tree.n, batch, width)

    def step_terms_ms(self, batch=1, *, gpu_ms=None) -> dict:
        """Named work of a target-only step outside its forward (sampling, exposed scheduling)."""
        return step_terms_ms(self.runtime, batch, gpu_ms)

    def step_overhead_ms(self, batch=1, *, gpu_ms=None):
        return sum(self.step_terms_ms(batch, gpu_ms=gpu_ms).values())

    def token_overhead_ms(self, batch=1) -> float:
        return 0.0

    @property
    def draft_catchup(self) -> bool:
        return False  # the runtimes' drafts carry their extra forwards as extra_draft_forwards

    @property
    def first_pass_drafts(self) -> bool:
        return True

    def encoder_ms(self, images: int, *, draft: bool = False) -> float:
        m = self.draft if draft else self.target
        if not images or m.vision is None:
            return 0.0
        cache = self._cache.setdefault(("vision", draft), {})
        if images not in cache:
            cache[images] = float(vision_ms(m.vision, m.dtype_bytes, self.device, self.runtime, images))
        return cache[images]

    @property
    def extra_draft_forwards(self) -> float:
        return float(self.runtime.extra_draft_forwards_per_block) if self.draft is not None else 0.0

    @property
    def sampling(self):
        return None  # not modelled: greedy costs

    def measured_rows(self, role: str, kind: str = STEP) -> tuple[int, ...] | None:
        return None

    def measured_widths(self, role: str, kind: str = STEP, rows: int = 1) -> tuple[float, ...] | None:
        return None

    def check_batch(self, batch: int, where: str = "--batch") -> None:
        return None

    # ------------------------------------------------------------------ bulk: fits and serving
    def terms(self, role: str, rows, width, batch=1, *, kind: str = STEP) -> dict:
        """The runtime-independent terms of one pass (:func:`~specsim.hardware.passes.pass_terms`)."""
        m, tp = self._model(role)
        logits = 1 if kind in (PREFILL, FIRST, CATCHUP) else None
        return pass_terms(m, self.device, batch, width, rows, tp, logits)

    def _affine(self, role: str, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(per pass, per sequence, per Σ KV token) terms of passes of ``rows`` rows per sequence: a pass's
        terms are affine in the batch and in Σ KV at fixed rows, but for a MoE model's weights (see
        :meth:`_at_batch`)."""
        key = ("affine", role, rows)
        if key not in self._cache:
            base = self._vector(role, rows, 0, 1)
            per_seq = self._vector(role, rows, 0, 2) - base
            per_ctx = self._vector(role, rows, 1, 1) - base
            self._cache[key] = (base - per_seq, per_seq, per_ctx)
        return self._cache[key]

    def _vector(self, role: str, rows, width, batch, kind: str = STEP) -> np.ndarray:
        t = self.terms(role, rows, width, batch, kind=kind)
        return np.array([t[k] for k in _NAMES], dtype=float)

    def _chunk(self, role: str, tokens: int, cached: int) -> np.ndarray:
        """Terms of one prefill chunk as a pass of its own (logits for its last position only)."""
        key = ("chunk", role, int(tokens), int(cached))
        if key not in self._cache:
            self._cache[key] = self._vector(role, tokens, cached, 1, kind=PREFILL)
        return self._cache[key]

    def _merged(self, role: str, first: np.ndarray | None, chunks) -> np.ndarray | None:
        """One pass's terms: ``first`` (or nothing) plus every chunk, the weights streamed once."""
        if not chunks:
            return first
        parts = ([first] if first is not None else []) + [self._chunk(role, c[0], c[1]) for c in chunks]
        out = parts[0].copy()
        for p in parts[1:]:
            out[_ADDITIVE] += p[_ADDITIVE]
            out[_MASKED] = max(out[_MASKED], p[_MASKED])
        m, tp = self._model(role)  # the weights once, as read by all the pass's rows together
        weights = [float(sharded_weight_bytes(m, p[_ROWS], tp)) for p in parts]
        out[_BYTES] += float(sharded_weight_bytes(m, out[_ROWS], tp)) - sum(weights)
        out[_WEIGHTS] = float(streamed_weights(m, out[_ROWS])) / tp
        return out

    def _at_batch(self, role: str, batch: int, rows: int) -> np.ndarray:
        """The terms of a pass over ``batch`` sequences × ``rows`` rows at Σ KV 0 and 1 (a [2, term] array):
        the affine line in the batch, but a MoE model's passes are priced at the batch itself (the experts
        its rows touch level off at E, so a line through batch 1 and 2 overprices every larger batch)."""
        c0, c1, c2 = self._affine(role, rows)
        at_zero = c0 + batch * c1 if self._model(role)[0].moe is None else self._vector(role, rows, 0, batch)
        return at_zero + np.array([0.0, 1.0])[:, None] * c2

    def line(self, role: str, batch: int, rows: int, chunks=()) -> tuple[float, ...]:
        """(compute, memory, attention compute, attention memory, rest, host) ms of one pass over ``batch``
        sequences × ``rows`` rows with prefill ``chunks`` ((tokens, cached), …) in the same pass, each as
        (ms at Σ KV 0, ms per Σ KV token): efficiencies depend on the rows only, so each part is a line."""
        key = ("line", role, batch, rows, tuple((int(c[0]), int(c[1])) for c in chunks) if chunks else ())
        if key not in self._cache:
            if batch:
                terms = self._at_batch(role, batch, rows)
                if chunks:
                    terms = np.stack([self._merged(role, t, chunks) for t in terms])
            else:
                terms = np.stack([self._merged(role, None, chunks)] * 2)
            table = PassTable(**{name: terms[:, i] for i, name in enumerate(_NAMES)})
            parts = table.parts_ms(self.runtime)
            self._cache[key] = tuple(v for p in parts for v in (float(p[0]), float(p[1] - p[0])))
        return self._cache[key]

    def draft_line(self, batch: int, chunks=()) -> tuple[float, ...]:
        """:meth:`line` of a one-row draft pass with the drafting kind's per-forward floor in its rest."""
        line = self.line(DRAFT, batch, 1, chunks)
        floor = float(self.draft_floor_ms(0.0))
        return line[:8] + (line[8] + floor, line[9]) + line[10:]

    def line_ms(self, line: tuple[float, ...], kv_sum):
        """ms of a pass from its :meth:`line` at Σ KV ``kv_sum`` (a float or an array; lines may be
        stacked along the first axis of a [part, ...] array)."""
        c0, c1, m0, m1, ac0, ac1, am0, am1, r0, r1, h0, h1 = line
        overlap, host_overlap = self.runtime.overlap, self.runtime.host_overlap
        device = (
            roof_ms(c0 + c1 * kv_sum, m0 + m1 * kv_sum, overlap)
            + roof_ms(ac0 + ac1 * kv_sum, am0 + am1 * kv_sum, overlap)
            + r0
            + r1 * kv_sum
        )
        return device if host_overlap == 0 else roof_ms(h0 + h1 * kv_sum, device, host_overlap)


def price_terms(entries: list[dict], runtime) -> np.ndarray:
    """ms of passes given by their :meth:`RooflinePassCost.terms` under ``runtime``, in one step."""
    return terms_table(entries).ms(runtime)


def terms_table(entries: list[dict]) -> PassTable:
    """The passes' terms as one :class:`~specsim.hardware.passes.PassTable` (priced again per runtime)."""
    return pass_table(entries)
