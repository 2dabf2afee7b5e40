"""The forward-cost model of a profile (schema 2): ms of one forward pass over rows × context × batch.

A prediction that reads one number at one context is right only there. So ``calibrate latency``
times the engine's own forwards, in the alternation the engine runs them (target-only steps back to
back; γ draft steps then one verification, so the draft and the target evict each other's weights
from the caches as they do in speculative decoding), on a grid:

- ``target_decode``: the target-only step, 1 row, after another target step;
- ``target_verify``: the verification pass over ``rows`` = γ+1 positions, after γ draft steps;
- ``draft_first``: the first draft step of a block (1 row, or 2 after a fully accepted block),
  right after a verification, at draft batch ``batch`` (the members of an in-batch ensemble);
- ``draft_next``: the later draft steps of a block (1 row);
- ``target_prefill`` / ``draft_prefill``: the first pass of a request over its whole prompt (``rows``
  = prompt tokens, context 0), which the engine fuses with the first verification / draft step.

Optional token-tree grids (:class:`TreeCosts`, ``calibrate latency --tree-sizes/--tree``), timed in the
tree engine's own alternation: ``tree.verify``, the target pass over ``rows`` = n+1 positions with the
tree attention mask; ``tree.draft``, a draft level pass over ``rows`` = the level's expanded nodes (the
root pass is a chain first step, ``draft_first``); ``tree.overhead_ms_per_block`` by n, draft batch and
context, and (when the swept trees span 3 depths or more) ``tree.overhead_fit``, a plane in n and depth.

Each grid stores ms[rows][context][batch] (medians) on the KV-cache length ``context_tokens`` the
pass starts from. Outside the models, the engine's per-block overhead (sampling, acceptance, cache
crop, Python) is ``overhead_ms_per_block`` by γ, draft batch and (profiles from now on) target context,
linear between measured values and the end value outside them, and ``overhead_ms_per_target_step``
that of a target-only step, both greedy; ``adaptive_ms_per_block`` (same axes) what an adaptive
ensemble's weight update adds to each of its blocks; ``sampling`` (:mod:`specsim.sampling_cost`) is what drawing
tokens at T > 0 adds.

Interpolation rule (:func:`grid_ms`):

- context: piecewise linear between measured contexts; outside the measured range, linear
  extrapolation from the two nearest points with the slope clipped at ≥ 0 and the value at ≥ 0 (a longer
  cache never costs less; noise must not make a time negative), always flagged (one measured context: that value,
  flagged whenever another context is asked for). Attention over the KV cache is linear in its length,
  so the rule is exact for the cost it models inside the grid;
- rows and batch: exact at measured values, linear between two measured values; outside the measured
  range a :class:`SpecsimError` names the axis (a verification over more rows than measured is not
  guessed) -- except the rows of the prefill grids, a prompt's length, which follow the context rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import (
    check_keys,
    drop_none,
    field_int,
    field_list,
    field_nested,
    field_num,
    field_opt,
    field_req,
    field_str,
    show,
)
from specsim.overhead_grid import OverheadGrid, TreeOverheadFit, axis_values
from specsim.sampling_cost import SamplingCost

GRID_NAMES = ("target_decode", "target_verify", "draft_first", "draft_next", "target_prefill", "draft_prefill")
INTERPOLATION = ("context_tokens: piecewise linear, flagged linear extrapolation outside the measured range; "
                 "rows and batch: exact or linear between measured values, an error outside them")


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
        return drop_none({"rows": list(self.rows), "context_tokens": list(self.context_tokens),
                          "batch": list(self.batch), "ms": _lists(self.ms),
                          "halfwidth_ms": None if self.halfwidth_ms is None else _lists(self.halfwidth_ms),
                          "n": None if self.n is None else _lists(self.n)})

    @classmethod
    def from_json(cls, d: dict, where: str) -> CostGrid:
        check_keys(d if isinstance(d, dict) else {}, {"rows", "context_tokens", "batch", "ms", "halfwidth_ms", "n"},
                   where)
        rows = axis_values(field_req(d, "rows", where), f"{where}.rows", integer=True)
        ctx = axis_values(field_req(d, "context_tokens", where), f"{where}.context_tokens", integer=False)
        batch = axis_values(field_req(d, "batch", where), f"{where}.batch", integer=True)
        shape = (len(rows), len(ctx), len(batch))
        axes = ("rows value", "context", "batch")
        ms = field_nested(field_req(d, "ms", where), shape, f"{where}.ms",
                          lambda v, w: field_num(v, w, lo=0, lo_open=True, unit="ms"), axes)
        hw = field_opt(d, "halfwidth_ms", lambda v, w: field_nested(v, shape, w, lambda x, ww: field_num(x, ww, lo=0),
                                                                    axes), where)
        n = field_opt(d, "n", lambda v, w: field_nested(v, shape, w, lambda x, ww: field_int(x, ww, lo=1), axes), where)
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

    return CostGrid(tuple(int(r) for r in rows), tuple(float(c) for c in context_tokens),
                    tuple(int(b) for b in batch), arr(ms, float), arr(halfwidth_ms, float), arr(n, int))


# --------------------------------------------------------------------------- interpolation
def _bracket(points: np.ndarray, q: np.ndarray, *, name: str, extrapolate: bool):
    """(i0, i1, w, outside) so that value = (1 − w)·y[i0] + w·y[i1] along one axis."""
    if points.size == 1:
        zeros = np.zeros(q.shape, dtype=int)
        outside = q != points[0]
        if outside.any() and not extrapolate:
            raise SpecsimError(f"{name}: {q[outside].ravel()[0]:g} was not measured (measured: {points[0]:g})")
        return zeros, zeros, np.zeros(q.shape), outside
    span = (points[-1] - points[0]) * 1e-9
    outside = (q < points[0] - span) | (q > points[-1] + span)
    if outside.any() and not extrapolate:
        raise SpecsimError(f"{name}: {q[outside].ravel()[0]:g} is outside the measured range "
                           f"{points[0]:g}..{points[-1]:g}")
    i1 = np.clip(np.searchsorted(points, q, side="right"), 1, points.size - 1)
    i0 = i1 - 1
    w = (q - points[i0]) / (points[i1] - points[i0])
    return i0, i1, w, outside


def grid_ms(grid: CostGrid, rows, context_tokens, batch=1, *, name: str = "cost grid", along: str = "context"):
    """(ms, extrapolated): the forward's ms at each query (arrays broadcast together) by the module's
    interpolation rule, and a bool array that is True where the query lies outside the grid.

    ``along`` names the axis that may be extrapolated: "context" (forwards on a KV cache), or "rows" for
    the prefill grids, whose rows are the prompt's tokens (there the same flagged, slope-clipped rule
    applies along rows)."""
    q = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(context_tokens, dtype=float),
                            np.asarray(batch, dtype=float))
    axes = (("rows", grid.rows), ("context_tokens", grid.context_tokens), ("batch", grid.batch))
    free = {"context": 1, "rows": 0}[along]
    br = [_bracket(np.asarray(pts, float), x, name=f"{name}: {label}", extrapolate=i == free)
          for i, ((label, pts), x) in enumerate(zip(axes, q))]
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


# --------------------------------------------------------------------------- overhead and host check
@dataclass(frozen=True)
class HostCheck:
    """A sentinel point re-timed at the end of a calibration: did the machine's load change meanwhile?"""

    sentinel: str
    start_ms: float
    end_ms: float
    threshold: float
    contended: bool
    note: str = ""

    @property
    def rel_change(self) -> float:
        return self.end_ms / self.start_ms - 1.0

    def to_json(self) -> dict:
        return {"sentinel": self.sentinel, "start_ms": self.start_ms, "end_ms": self.end_ms,
                "threshold": self.threshold, "contended": self.contended, "note": self.note}

    @classmethod
    def from_json(cls, d: dict, where: str) -> HostCheck:
        check_keys(d if isinstance(d, dict) else {}, {"sentinel", "start_ms", "end_ms", "threshold", "contended",
                                                      "note"}, where)
        contended = field_req(d, "contended", where)
        if not isinstance(contended, bool):
            raise SpecsimError(f"{where}.contended: expected true or false, got {show(contended)}")
        return cls(sentinel=field_str(field_req(d, "sentinel", where), f"{where}.sentinel"),
                   start_ms=field_num(field_req(d, "start_ms", where), f"{where}.start_ms", unit="ms"),
                   end_ms=field_num(field_req(d, "end_ms", where), f"{where}.end_ms", unit="ms"),
                   threshold=field_num(field_req(d, "threshold", where), f"{where}.threshold", lo=0),
                   contended=contended, note=field_str(d.get("note", ""), f"{where}.note", allow_empty=True))


# --------------------------------------------------------------------------- token trees
@dataclass(frozen=True)
class TreeCosts:
    """Token-tree forwards: ``verify`` (rows = n+1, context, batch 1), ``draft`` (rows = expanded nodes of
    one level pass ℓ ≥ 1, at the cache length the pass starts from, by draft batch; None when every swept
    tree had depth 1), the tree engine's ms per block outside the models by n (the grid's ``gamma`` axis)
    and draft batch, and the tree specs the sweep ran (:mod:`specsim.trees`)."""

    verify: CostGrid
    draft: CostGrid | None
    overhead_ms_per_block: OverheadGrid
    trees: tuple[str, ...] = ()
    overhead_fit: TreeOverheadFit | None = None  # by size and depth; used when present (deep trees)

    def overhead_at(self, tree, batch, context) -> float:
        """ms per block outside the models for ``tree`` (a :class:`specsim.trees.TreeSpec`) at ``context``: the
        size × depth plane when the sweep spanned enough depths, else the grid by n."""
        if self.overhead_fit is not None:  # deep trees: one more level is one more pass and acceptance step
            return self.overhead_fit.at(tree.n, tree.depth, batch, context)
        return float(self.overhead_ms_per_block.at(tree.n, batch, context))

    @property
    def max_nodes(self) -> int:
        """The largest n whose verification was measured."""
        return int(self.verify.rows[-1]) - 1

    def to_json(self) -> dict:
        return drop_none({"verify": self.verify.to_json(), "draft": None if self.draft is None else self.draft.to_json(),
                          "overhead_ms_per_block": self.overhead_ms_per_block.to_json(), "trees": list(self.trees),
                          "overhead_fit": None if self.overhead_fit is None else self.overhead_fit.to_json()})

    @classmethod
    def from_json(cls, d: dict, where: str) -> TreeCosts:
        check_keys(d if isinstance(d, dict) else {}, {"verify", "draft", "overhead_ms_per_block", "trees",
                                                      "overhead_fit"}, where)
        verify = CostGrid.from_json(field_req(d, "verify", where), f"{where}.verify")
        if verify.batch != (1,) or verify.rows[0] < 2:
            raise SpecsimError(f"{where}.verify: expected batch [1] and rows >= 2 (n+1 positions), got batch "
                               f"{show(list(verify.batch))}, rows {show(list(verify.rows))}")
        trees = field_list(d.get("trees", []), f"{where}.trees", nonempty=False)
        return cls(verify=verify, draft=field_opt(d, "draft", CostGrid.from_json, where),
                   overhead_ms_per_block=OverheadGrid.from_json(field_req(d, "overhead_ms_per_block", where),
                                                                f"{where}.overhead_ms_per_block"),
                   trees=tuple(field_str(t, f"{where}.trees[{i}]") for i, t in enumerate(trees)),
                   overhead_fit=field_opt(d, "overhead_fit", TreeOverheadFit.from_json, where))


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class CostModel:
    """The grids, the engine's overhead and the host check of one latency calibration (plus, optionally,
    the token-tree grids)."""

    target_decode: CostGrid
    target_verify: CostGrid
    draft_first: CostGrid
    draft_next: CostGrid
    target_prefill: CostGrid
    draft_prefill: CostGrid
    overhead_ms_per_block: OverheadGrid
    overhead_ms_per_target_step: float
    host_check: HostCheck | None = None
    interpolation: str = INTERPOLATION
    tree: TreeCosts | None = None
    sampling: SamplingCost | None = None  # what T > 0 adds (specsim.sampling_cost); None: not measured
    adaptive_ms_per_block: OverheadGrid | None = None  # what an adaptive ensemble's weight update adds; None: free

    def block_overhead_ms(self, gamma, batch, context, adaptive: bool = False):
        """The engine's overhead of blocks at ``gamma`` (ms, array-like), plus an adaptive ensemble's
        weight update when ``adaptive`` (free in profiles that did not time it)."""
        ms = np.asarray(self.overhead_ms_per_block.at(gamma, batch, context), dtype=float)
        if adaptive and self.adaptive_ms_per_block is not None:
            ms = ms + np.asarray(self.adaptive_ms_per_block.at(gamma, batch, context), dtype=float)
        return ms

    def to_json(self) -> dict:
        return drop_none({**{name: getattr(self, name).to_json() for name in GRID_NAMES},
                          "overhead_ms_per_block": self.overhead_ms_per_block.to_json(),
                          "overhead_ms_per_target_step": self.overhead_ms_per_target_step,
                          "host_check": None if self.host_check is None else self.host_check.to_json(),
                          "interpolation": self.interpolation,
                          "tree": None if self.tree is None else self.tree.to_json(),
                          "sampling": None if self.sampling is None else self.sampling.to_json(),
                          "adaptive_ms_per_block": None if self.adaptive_ms_per_block is None
                          else self.adaptive_ms_per_block.to_json()})

    @classmethod
    def from_json(cls, d: dict, where: str = "latency.cost_model") -> CostModel:
        check_keys(d if isinstance(d, dict) else {}, {*GRID_NAMES, "overhead_ms_per_block",
                                                      "overhead_ms_per_target_step", "host_check", "interpolation",
                                                      "tree", "sampling", "adaptive_ms_per_block"},
                   where)
        grids = {name: CostGrid.from_json(field_req(d, name, where), f"{where}.{name}") for name in GRID_NAMES}
        if grids["target_decode"].rows[0] != 1:
            raise SpecsimError(f"{where}.target_decode.rows: expected to start at 1, got {show(list(grids['target_decode'].rows))}")
        for name in ("target_prefill", "draft_prefill"):
            if grids[name].context_tokens != (0.0,):
                raise SpecsimError(f"{where}.{name}.context_tokens: expected [0] (a prompt's first pass), "
                                   f"got {show(list(grids[name].context_tokens))}")
        for name in ("target_decode", "target_verify", "target_prefill"):
            if grids[name].batch != (1,):
                raise SpecsimError(f"{where}.{name}.batch: expected [1] (the target runs one request), "
                                   f"got {show(list(grids[name].batch))}")
        overhead = OverheadGrid.from_json(field_req(d, "overhead_ms_per_block", where),
                                          f"{where}.overhead_ms_per_block")
        step = field_num(field_req(d, "overhead_ms_per_target_step", where), f"{where}.overhead_ms_per_target_step",
                         unit="ms", zero_ok=True)
        return cls(**grids, overhead_ms_per_block=overhead, overhead_ms_per_target_step=step,
                   host_check=field_opt(d, "host_check", HostCheck.from_json, where),
                   interpolation=field_str(d.get("interpolation", INTERPOLATION), f"{where}.interpolation"),
                   tree=field_opt(d, "tree", TreeCosts.from_json, where),
                   sampling=field_opt(d, "sampling", SamplingCost.from_json, where),
                   adaptive_ms_per_block=field_opt(d, "adaptive_ms_per_block", OverheadGrid.from_json, where))

    @property
    def max_gamma(self) -> int:
        """The largest γ whose verification was measured."""
        return int(self.target_verify.rows[-1]) - 1
