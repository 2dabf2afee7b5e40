"""A schema-1 profile's 1-D latency tables as a one-context cost model, so every profile is priced one way.

Read at the verify context c₀ (or Tp's first context), the tables are the grids of
:class:`specsim.profile_format.cost_model.CostModel` with one context: Tp(c₀); Tv(γ) over γ+1 rows; every
draft step Tq(c₀)·Tq(b)/Tq(1) at draft batch b; the prefills by prompt tokens; no overhead. Every other
context gets the one value, flagged as extrapolated: the tables' own assumption, now said.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import numpy as np

from specsim.profile_format.cost_grid import CostGrid, make_grid
from specsim.profile_format.cost_model import CostModel
from specsim.profile_format.overhead_grid import OverheadGrid

TABLES_INTERPOLATION = (
    "one context (a schema-1 profile's 1-D tables read at the verify context): every context answered "
    "with that value, flagged; rows and batch: exact or linear between measured values"
)


def _at(curve, x: float) -> float | None:
    """The table's ms at ``x`` (linear between points), None outside its measured range."""
    xs = np.asarray(curve.x, dtype=float)
    if x < xs[0] or x > xs[-1]:
        return None
    return float(np.interp(x, xs, np.asarray(curve.ms, dtype=float)))


def _prefill_grid(curve, batch) -> CostGrid | None:
    """Prefill ms by prompt tokens (rows), context 0, the same at every draft batch."""
    if curve is None:
        return None
    rows = [int(round(x)) for x in curve.x]
    if any(b <= a for a, b in zip(rows, rows[1:])) or rows[0] < 1:
        return None
    ms = np.repeat(np.asarray(curve.ms, dtype=float)[:, None, None], len(batch), axis=2)
    return make_grid(rows, [0.0], batch, ms)


def tables_cost_model(latency) -> CostModel | None:
    """The one-context :class:`CostModel` of a latency section's 1-D tables (module docstring); None when
    the tables lack Tp, Tq or Tv, or do not reach the verify context."""
    tp_curve, tq_curve = latency.target_decode_ms_by_context, latency.draft_decode_ms_by_context
    tv_curve, by_batch = latency.target_verify_ms_by_gamma, latency.draft_decode_ms_by_batch
    if tp_curve is None or tq_curve is None or tv_curve is None:
        return None
    c0 = float(latency.verify_context_tokens if latency.verify_context_tokens is not None else tp_curve.x[0])
    tp, tq = _at(tp_curve, c0), _at(tq_curve, c0)
    if tp is None or tq is None:
        return None
    if by_batch is not None and by_batch.x[0] == 1:
        batch = [int(b) for b in by_batch.x]
        factor = np.asarray(by_batch.ms, dtype=float) / by_batch.ms[0]
    else:
        batch, factor = [1], np.ones(1)
    draft_steps = tq * factor
    gammas = [int(g) for g in tv_curve.x]
    one = make_grid([1], [c0], [1], [[[tp]]])
    return CostModel(
        target_decode=one,
        target_verify=make_grid([g + 1 for g in gammas], [c0], [1], np.asarray(tv_curve.ms)[:, None, None]),
        draft_first=make_grid([1, 2], [c0], batch, np.tile(draft_steps, (2, 1, 1))),
        draft_next=make_grid([1], [c0], batch, draft_steps[None, None, :]),
        target_prefill=_prefill_grid(latency.target_prefill_ms_by_tokens, [1]),
        draft_prefill=_prefill_grid(latency.draft_prefill_ms_by_tokens, batch),
        overhead_ms_per_block=OverheadGrid(gamma=(1,), batch=(1,), ms=((0.0,),)),
        overhead_ms_per_target_step=0.0,
        interpolation=TABLES_INTERPOLATION,
    )
