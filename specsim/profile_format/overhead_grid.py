"""The engine's overhead per block outside the models, by γ (or tree size n), draft batch and, optionally,
target context (part of :mod:`specsim.profile_format.cost_model`'s cost model; ms).

Interpolation: linear between measured values along each axis, the nearest end value outside them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, field_int, field_list, field_nested, field_num, field_req, show


def axis_values(value, where: str, *, integer: bool) -> tuple:
    """A grid axis: strictly increasing token counts (integers when ``integer``); SpecsimError naming
    ``where``."""
    vals = field_list(value, where)
    parsed = [
        field_int(v, f"{where}[{i}]", lo=1, unit="tokens")
        if integer
        else field_num(v, f"{where}[{i}]", lo=0, unit="tokens")
        for i, v in enumerate(vals)
    ]
    if any(b <= a for a, b in zip(parsed, parsed[1:])):
        raise SpecsimError(f"{where}: expected strictly increasing values, got {show(parsed)}")
    return tuple(parsed)


@dataclass(frozen=True)
class OverheadGrid:
    """The engine's ms per block outside the models (sampling, acceptance, cache crop, Python), by γ
    and draft batch: ``ms[i][j]`` at ``gamma[i]``, ``batch[j]``, pooled over the measured contexts.

    Optional ``context_tokens`` with ``ms_by_context[i][k][j]`` (γ, context, batch) give it by target
    context too: part of a block's bookkeeping grows with the cache (a tree's attention mask spans it)."""

    gamma: tuple[int, ...]
    batch: tuple[int, ...]
    ms: tuple[tuple[float, ...], ...]
    context_tokens: tuple[float, ...] | None = None
    ms_by_context: tuple[tuple[tuple[float, ...], ...], ...] | None = None

    def to_json(self) -> dict:
        out = {"gamma": list(self.gamma), "batch": list(self.batch), "ms": [list(r) for r in self.ms]}
        if self.context_tokens is not None:
            out |= {
                "context_tokens": list(self.context_tokens),
                "ms_by_context": [[list(c) for c in r] for r in self.ms_by_context],
            }
        return out

    @classmethod
    def at_batch_one(cls, ms_by_gamma: dict[int, float]) -> OverheadGrid:
        """One request's grid: ms per block by γ, at batch 1 (an engine that times each γ's real blocks)."""
        gammas = tuple(sorted(int(g) for g in ms_by_gamma))
        return cls(gammas, (1,), tuple((float(ms_by_gamma[g]),) for g in gammas))

    @classmethod
    def from_json(cls, d: dict, where: str, *, signed: bool = False) -> OverheadGrid:
        """The grid of ``d``; ``signed``: values may be negative (an engine's real blocks that ran under
        their grids' forwards; the caller bounds them)."""
        _ms = signed_ms if signed else _overhead_ms
        check_keys(
            d if isinstance(d, dict) else {},
            {"gamma", "batch", "ms", "context_tokens", "ms_by_context"},
            where,
        )
        gammas = axis_values(field_req(d, "gamma", where), f"{where}.gamma", integer=True)
        batch = axis_values(field_req(d, "batch", where), f"{where}.batch", integer=True)
        ms = field_nested(
            field_req(d, "ms", where), (len(gammas), len(batch)), f"{where}.ms", _ms, ("gamma", "batch")
        )
        if ("context_tokens" in d) != ("ms_by_context" in d):
            raise SpecsimError(f"{where}: expected both context_tokens and ms_by_context, or neither")
        if "context_tokens" not in d:
            return cls(gammas, batch, ms)
        ctx = axis_values(d["context_tokens"], f"{where}.context_tokens", integer=False)
        by_ctx = field_nested(
            d["ms_by_context"],
            (len(gammas), len(ctx), len(batch)),
            f"{where}.ms_by_context",
            _ms,
            ("gamma", "context", "batch"),
        )
        return cls(gammas, batch, ms, ctx, by_ctx)

    def at(self, gamma, batch=1, context=None):
        """ms at γ, batch and (with a context axis, when given) target context: linear between measured
        values, the nearest end value outside them (vectorised over the arguments)."""
        g, b, c = np.broadcast_arrays(
            np.asarray(gamma, dtype=float),
            np.asarray(batch, dtype=float),
            np.asarray(0.0 if context is None else context, dtype=float),
        )
        if self.context_tokens is None or context is None:
            y, xs = (
                np.asarray(self.ms, dtype=float)[:, None, :],
                np.zeros(1),
            )  # one context: the pooled values
        else:
            y, xs = np.asarray(self.ms_by_context, dtype=float), np.asarray(self.context_tokens, dtype=float)
        out = np.zeros(g.shape)
        for gi, gw in _corners(g, np.asarray(self.gamma, dtype=float)):
            for ci, cw in _corners(c, xs):
                for bi, bw in _corners(b, np.asarray(self.batch, dtype=float)):
                    out = out + gw * cw * bw * y[gi, ci, bi]
        return out if out.ndim else float(out)


def _corners(x: np.ndarray, xs: np.ndarray):
    """(index, weight) pairs of linear interpolation of ``x`` on the sorted axis ``xs``, clamped at its
    ends."""
    x = np.clip(x, xs[0], xs[-1])
    lo = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 1)
    hi = np.minimum(lo + 1, len(xs) - 1)
    span = xs[hi] - xs[lo]
    w = np.where(span > 0, (x - xs[lo]) / np.where(span > 0, span, 1.0), 0.0)
    return ((lo, 1.0 - w), (hi, w))


def _overhead_ms(value, where: str) -> float:
    """A measured overhead: ms, 0 allowed."""
    return field_num(value, where, unit="ms", zero_ok=True)


def signed_ms(value, where: str) -> float:
    """A measured residual: ms, finite; a positive one in the ms range as :func:`_overhead_ms` (the caller
    bounds a negative one: a block's or a step's residual)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return field_num(value, where)
    return _overhead_ms(value, where)


@dataclass(frozen=True)
class TreeOverheadFit:
    """The tree engine's ms per block outside the models as a plane in the tree's size and depth, per draft
    batch × target context: ``ms_per_block + ms_per_level·depth + ms_per_node·n`` (least squares over the
    swept trees; each level is one more draft pass and acceptance step). Arrays are [batch][context];
    between measured batches and contexts, linear; outside them, the nearest end value."""

    batch: tuple[int, ...]
    context_tokens: tuple[float, ...]
    ms_per_block: tuple[tuple[float, ...], ...]
    ms_per_level: tuple[tuple[float, ...], ...]
    ms_per_node: tuple[tuple[float, ...], ...]

    @classmethod
    def fit(cls, sizes, depths, ms_by_context, batch, context_tokens) -> TreeOverheadFit | None:
        """Least-squares plane through ``ms_by_context[i][k][j]`` (tree i = (sizes[i], depths[i]), context k,
        batch j); None when the swept trees span fewer than 3 depths (size and depth would not separate)."""
        n, d = np.asarray(sizes, dtype=float), np.asarray(depths, dtype=float)
        if np.unique(d).size < 3:
            return None
        design = np.column_stack([np.ones_like(n), d, n])
        y = np.asarray(ms_by_context, dtype=float)  # [tree, context, batch]
        coef = np.linalg.lstsq(design, y.reshape(len(n), -1), rcond=None)[0].reshape(3, *y.shape[1:])
        as_rows = lambda a: tuple(tuple(float(v) for v in a[:, j]) for j in range(len(batch)))  # noqa: E731
        return cls(tuple(batch), tuple(float(c) for c in context_tokens), *(as_rows(c) for c in coef))

    def to_json(self) -> dict:
        return {
            "batch": list(self.batch),
            "context_tokens": list(self.context_tokens),
            "ms_per_block": [list(r) for r in self.ms_per_block],
            "ms_per_level": [list(r) for r in self.ms_per_level],
            "ms_per_node": [list(r) for r in self.ms_per_node],
        }

    @classmethod
    def from_json(cls, d: dict, where: str) -> TreeOverheadFit:
        names = ("ms_per_block", "ms_per_level", "ms_per_node")
        check_keys(d if isinstance(d, dict) else {}, {"batch", "context_tokens", *names}, where)
        batch = axis_values(field_req(d, "batch", where), f"{where}.batch", integer=True)
        ctx = axis_values(field_req(d, "context_tokens", where), f"{where}.context_tokens", integer=False)
        # the coefficients of a fit may be negative (a plane through noisy points); they are finite ms
        coef = lambda v, w: field_num(v, w, lo=-1e8, hi=1e8)  # noqa: E731
        coefs = [
            field_nested(
                field_req(d, k, where), (len(batch), len(ctx)), f"{where}.{k}", coef, ("batch", "context")
            )
            for k in names
        ]
        return cls(batch, ctx, *coefs)

    def at(self, n, depth, batch=1, context=0.0) -> float:
        """ms per block of a tree of ``n`` nodes and ``depth`` levels (never below 0)."""
        b = np.asarray(self.batch, dtype=float)
        c = np.asarray(self.context_tokens, dtype=float)
        total = 0.0
        for bi, bw in _corners(np.asarray(float(batch)), b):
            for ci, cw in _corners(np.asarray(float(context)), c):
                coef = [
                    np.asarray(a, dtype=float)[bi, ci]
                    for a in (self.ms_per_block, self.ms_per_level, self.ms_per_node)
                ]
                total = total + bw * cw * (coef[0] + coef[1] * depth + coef[2] * n)
        return max(float(total), 0.0)
