"""How a runtime's parameters are fitted: their scales, bounds and prior pull, and which may be fitted.

A parameter is fitted in θ space (log for efficiencies, ms otherwise), bounded by ``PARAM_BOUNDS`` (an
efficiency by 1 on a GPU, an overhead by ``OVERHEAD_CAP_MS``) and pulled toward its prior with weight
``PRIOR_WEIGHT`` per ``PRIOR_SCALE`` of departure. The engine terms that grow with the batch
(``engine_terms.BATCH_PARAMS``) are fitted only on batch sweeps of two sources or more.
"""

from __future__ import annotations

import numpy as np

from specsim.hardware.engine_terms import BATCH_PARAMS
from specsim.hardware.runtime import PARAM_BOUNDS, Runtime
from specsim.validation.published_set import Row

PRIOR_WEIGHT = 0.05  # residual units (log error of one row) per ``PRIOR_SCALE`` of departure from the default
# The departure from its default that costs a parameter PRIOR_WEIGHT: a natural size per parameter, in the
# parameter's own unit (ms; log for efficiencies), so a parameter that few rows constrain stays near its
# default.
PRIOR_SCALE = {
    "overhead_ms_per_forward": 0.1,
    "overhead_ms_per_layer": 0.1,
    "overhead_ms_per_block": 0.5,
    "overhead_ms_per_sequence_per_block": 0.05,
    "overhead_ms_per_allreduce": 0.01,
    "dequant_ms_per_layer": 0.02,
    "compute_rows_half": 8.0,
    "attention_score_bytes": 4.0,
    "overlap": 0.5,
    "gemv_int32_ops_per_weight_per_row": 1.0,
    "gemv_max_rows": 4.0,
    "sampler_ms_per_token": 0.005,
    "rejection_ms_per_draft_token": 0.005,
    "schedule_ms_per_step": 0.5,
    "schedule_ms_per_sequence": 0.01,
    "draft_floor_ms_per_forward": 2.0,
    "head_floor_ms_per_forward": 1.0,
    "lookup_ms_per_sequence": 0.05,
}
OVERHEAD_CAP_MS = 100.0
MIN_BATCH_SOURCES = 2


def batch_sources(rows: list[Row]) -> set[str]:
    """The sources whose rows among ``rows`` span two batch sizes or more."""
    by: dict[str, set[int]] = {}
    for r in rows:
        by.setdefault(r.source, set()).add(r.batch)
    return {k for k, b in by.items() if len(b) > 1}


def fitted_keys(rt: Runtime, rows: list[Row]) -> list[str]:
    """The ``fit`` parameters ``rows`` may fit: a term that grows with the batch needs the batch sweeps of
    :data:`MIN_BATCH_SOURCES` sources (one source's sweep cannot make a term grow without bound)."""
    keys = list(rt.fit)
    if len(batch_sources(rows)) < MIN_BATCH_SOURCES:
        keys = [k for k in keys if k not in BATCH_PARAMS]
    return keys


def is_log(name: str) -> bool:
    return "efficiency" in name


def to_theta(name: str, value: float) -> float:
    return float(np.log(value)) if is_log(name) else float(value)


def from_theta(name: str, theta: float) -> float:
    return float(np.exp(theta)) if is_log(name) else float(theta)


def theta_bounds(keys: list[str], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of ``keys`` in θ space; on a GPU an efficiency is a fraction of a datasheet peak, at most 1
    (CPU peaks are a proxy, so not there)."""
    lo = np.array([to_theta(k, PARAM_BOUNDS[k][0]) for k in keys])
    hi = np.array(
        [
            to_theta(k, 1.0 if kind == "gpu" else PARAM_BOUNDS[k][1])
            if is_log(k)
            else min(PARAM_BOUNDS[k][1], OVERHEAD_CAP_MS)
            for k in keys
        ]
    )
    return lo, hi


def at_theta(rt: Runtime, keys: list[str], theta) -> Runtime:
    """``rt`` with ``keys`` (those it does not tie to another) at ``theta``."""
    from dataclasses import replace

    return replace(rt, **{k: from_theta(k, v) for k, v in zip(keys, theta) if k not in rt.ties})
