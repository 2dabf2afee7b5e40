"""One grid of the forward-cost model: ms of a forward pass over rows × context × batch
(:class:`CostGrid`), and reading it between and beyond its measured points (:func:`grid_ms`).

Context: piecewise linear; outside, extrapolated from the two nearest points with slope and value clipped at
≥ 0, always flagged (attention is linear in cache length, so exact inside). Rows and batch: exact or linear
between measured values; outside, a :class:`SpecsimError` names the axis, except a prefill grid's rows (a
prompt's length), which follow the context rule. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, drop_none, field_int, field_nested, field_num, field_opt, field_req
from specsim.profile_format.overhead_grid import axis_values


# --------------------------------------------------------------------------- grids
@dataclass(frozen=True)
class CostGrid:
    """ms of one forward pass on a grid of ``rows`` (positions fed) × ``context_tokens`` (KV-cache
    length before the pass) × ``batch`` (draft contexts in one pass); ``ms[r][c][b]`` are medians,
    ``halfwidth_ms`` their 95% confidence half-widths and ``n`` the samples behind each."""

    rows: tuple[int, ...]
    context_tokens: tuple[float, ...]
    batch: tuple[int, ...]
    ms: tuple
    halfwidth_ms: tuple | None = None
    n: tuple | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return len(self.rows), len(self.context_tokens), len(self.batch)

    def values(self) -> np.ndarray:
        """ms as an array [rows, context, batch]."""
        return np.asarray(self.ms, dtype=float).reshape(self.shape)

    def to_json(self) -> dict:
        return drop_none(
            {
                "rows": list(self.rows),
                "context_tokens": list(self.context_tokens),
                "batch": list(self.batch),
                "ms": _lists(self.ms),
                "halfwidth_ms": None if self.halfwidth_ms is None else _lists(self.halfwidth_ms),
                "n": None if self.n is None else _lists(self.n),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str) -> CostGrid:
        check_keys(
            d if isinstance(d, dict) else {},
            {"rows", "context_tokens", "batch", "ms", "halfwidth_ms", "n"},
            where,
        )
        rows = axis_values(field_req(d, "rows", where), f"{where}.rows", integer=True)
        ctx = axis_values(field_req(d, "context_tokens", where), f"{where}.context_tokens", integer=False)
        batch = axis_values(field_req(d, "batch", where), f"{where}.batch", integer=True)
        shape = (len(rows), len(ctx), len(batch))
        axes = ("rows value", "context", "batch")
        ms = field_nested(
            field_req(d, "ms", where),
            shape,
            f"{where}.ms",
            lambda v, w: field_num(v, w, lo=0, lo_open=True, unit="ms"),
            axes,
        )
        hw = field_opt(
            d,
            "halfwidth_ms",
            lambda v, w: field_nested(v, shape, w, lambda x, ww: field_num(x, ww, lo=0), axes),
            where,
        )
        n = field_opt(
            d, "n", lambda v, w: field_nested(v, shape, w, lambda x, ww: field_int(x, ww, lo=1), axes), where
        )
        return cls(rows, ctx, batch, ms, hw, n)


def _tuples(a: np.ndarray) -> tuple:
    return tuple(tuple(tuple(x.item() for x in cell) for cell in row) for row in a)


def _lists(t: tuple) -> list:
    return [[list(cell) for cell in row] for row in t]


def make_grid(rows, context_tokens, batch, ms, halfwidth_ms=None, n=None) -> CostGrid:
    """A :class:`CostGrid` from axis sequences and arrays of shape [rows, context, batch]."""
    shape = (len(rows), len(context_tokens), len(batch))

    def arr(x, dtype):
        return None if x is None else _tuples(np.asarray(x, dtype=dtype).reshape(shape))

    return CostGrid(
        tuple(int(r) for r in rows),
        tuple(float(c) for c in context_tokens),
        tuple(int(b) for b in batch),
        arr(ms, float),
        arr(halfwidth_ms, float),
        arr(n, int),
    )


# --------------------------------------------------------------------------- interpolation
def _bracket(points: np.ndarray, q: np.ndarray, *, name: str, extrapolate: bool):
    """(i0, i1, w, outside) so that value = (1 − w)·y[i0] + w·y[i1] along one axis."""
    if points.size == 1:
        zeros = np.zeros(q.shape, dtype=int)
        outside = q != points[0]
        if outside.any() and not extrapolate:
            raise SpecsimError(
                f"{name}: {q[outside].ravel()[0]:g} was not measured (measured: {points[0]:g})"
            )
        return zeros, zeros, np.zeros(q.shape), outside
    span = (points[-1] - points[0]) * 1e-9
    outside = (q < points[0] - span) | (q > points[-1] + span)
    if outside.any() and not extrapolate:
        raise SpecsimError(
            f"{name}: {q[outside].ravel()[0]:g} is outside the measured range {points[0]:g}..{points[-1]:g}"
        )
    i1 = np.clip(np.searchsorted(points, q, side="right"), 1, points.size - 1)
    i0 = i1 - 1
    w = (q - points[i0]) / (points[i1] - points[i0])
    return i0, i1, w, outside


def grid_ms(
    grid: CostGrid, rows, context_tokens, batch=1, *, name: str = "cost grid", along: str = "context"
):
    """(ms, extrapolated): the forward's ms at each query (arrays broadcast together) by the module's
    interpolation rule, and a bool array that is True where the query lies outside the grid.

    ``along`` names the axis that may be extrapolated: "context" (forwards on a KV cache), or "rows" for
    the prefill grids, whose rows are the prompt's tokens (there the same flagged, slope-clipped rule
    applies along rows)."""
    if grid is None:
        raise SpecsimError(f"{name}: not measured in this profile")
    q = np.broadcast_arrays(
        np.asarray(rows, dtype=float), np.asarray(context_tokens, dtype=float), np.asarray(batch, dtype=float)
    )
    axes = (("rows", grid.rows), ("context_tokens", grid.context_tokens), ("batch", grid.batch))
    free = {"context": 1, "rows": 0}[along]
    br = [
        _bracket(np.asarray(pts, float), x, name=f"{name}: {label}", extrapolate=i == free)
        for i, ((label, pts), x) in enumerate(zip(axes, q))
    ]
    y = np.moveaxis(grid.values(), free, -1)  # the extrapolated axis last
    (i0, i1, w, out) = br[free]
    (a0, a1, wa, _), (b0, b1, wb, _) = (br[i] for i in range(3) if i != free)
    total = np.zeros(q[0].shape)
    for ai, aw in ((a0, 1 - wa), (a1, wa)):
        for bi, bw in ((b0, 1 - wb), (b1, wb)):
            y0, y1 = y[ai, bi, i0], y[ai, bi, i1]
            # outside the grid the slope is clipped at >= 0, and a line carried below the first point
            # stops at 0 ms (module docstring: noise must not make a time negative)
            line = np.where(out & (y1 < y0), np.where(w < 0, y0, y1), (1 - w) * y0 + w * y1)
            line = np.where(out, np.maximum(line, 0.0), line)
            total = total + aw * bw * line
    return (total if total.ndim else float(total)), out
