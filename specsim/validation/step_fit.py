"""A runtime fitted to this project's GPU step timings, scored leave one GPU out (``specsim/data/gpu_steps``).

The HF steps (mode ``hf-eager``) fit the ``hf-eager`` runtime's host and device terms (:data:`STEP_FIT`):
robust least squares on log(predicted / measured) from round starting values; each GPU is priced by the fit
on the others. :func:`shipped_points` prices every mode so where its runtime is fitted here.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.optimize import least_squares

from specsim.hardware.passes import PassTable
from specsim.hardware.runtime import PARAM_BOUNDS, Runtime, load_runtime
from specsim.validation.gpu_steps import RUNTIME_OF_MODE, compare_steps, load_records, step_cost

# runtime -> (the mode of its steps, {parameter the steps fit: where its fit starts}); the starts are round
# figures, not fits, so a fit that leaves a GPU out never starts from what that GPU's steps taught
STEP_FIT = {
    "hf-eager": (
        "hf-eager",
        {
            "overhead_ms_per_forward": 1.0,
            "overhead_ms_per_layer": 0.5,
            "overhead_ms_per_mask": 1.0,
            "masked_attention_factor": 1.5,
            "device_ms_per_layer": 0.1,
            "kv_concat_int32_ops_per_element": 100.0,
        },
    ),
}
FIT_COMMAND = "python bench/hf_eager_fit.py --write"
# Log errors beyond this count linearly, not squared (soft L1): a step the host's other work slowed (an H200
# point at twice its neighbours' time) must not drag the fit.
ROBUST_SCALE = 0.05


@dataclass(frozen=True)
class StepSet:
    """The measured steps of one mode as a PassTable, with their GPU, model and shape."""

    table: PassTable
    measured_ms: np.ndarray
    gpu: np.ndarray
    role: np.ndarray
    batch: np.ndarray
    context_tokens: np.ndarray
    rows: np.ndarray

    def subset(self, keep: np.ndarray) -> StepSet:
        table = PassTable(**{k: v[keep] for k, v in vars(self.table).items()})
        rest = {k: v[keep] for k, v in vars(self).items() if k != "table"}
        return StepSet(table, **rest)


def step_set(records, mode: str) -> StepSet:
    """Every point of ``mode`` in ``records`` with its runtime-independent pass terms."""
    entries, cols = [], {k: [] for k in ("measured_ms", "gpu", "role", "batch", "context_tokens", "rows")}
    for r in records:
        gpu = r["provenance"]["gpu"]
        cost = step_cost(gpu)
        for p in r["points"]:
            if p["mode"] != mode:
                continue
            entries.append(cost.terms(p["model"], p["rows"], p["context_tokens"], p["batch"]))
            shape = (p["ms_median"], gpu, p["model"], p["batch"], p["context_tokens"], p["rows"])
            for key, value in zip(cols, shape):
                cols[key].append(value)
    table = PassTable(**{k: np.array([e[k] for e in entries], dtype=float) for k in entries[0]})
    return StepSet(table, **{k: np.array(v) for k, v in cols.items()})


def _is_log(name: str) -> bool:
    return "efficiency" in name


def fit_steps(rt: Runtime, steps: StepSet, starts: dict[str, float], source: str) -> Runtime:
    """``rt`` with the parameters of ``starts`` fitted on ``steps``: robust least squares on the log error
    (:data:`ROBUST_SCALE`) from ``starts``, within the runtime's bounds (an efficiency at most 1 on a GPU)."""
    keys = list(starts)
    x0 = np.array([np.log(starts[k]) if _is_log(k) else starts[k] for k in keys], dtype=float)
    lo = np.array([np.log(PARAM_BOUNDS[k][0]) if _is_log(k) else PARAM_BOUNDS[k][0] for k in keys])
    hi = np.array([0.0 if _is_log(k) else PARAM_BOUNDS[k][1] for k in keys])

    def at(theta: np.ndarray) -> Runtime:
        return replace(rt, **{k: float(np.exp(v) if _is_log(k) else v) for k, v in zip(keys, theta)})

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(steps.table.ms(at(theta)) / steps.measured_ms)

    best = least_squares(
        residuals, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale="jac", loss="soft_l1", f_scale=ROBUST_SCALE
    )
    return rt.with_values(source, **{k: getattr(at(best.x), k) for k in keys})


def leave_one_gpu_out(rt: Runtime, steps: StepSet, starts: dict[str, float]) -> dict[str, Runtime]:
    """GPU -> ``rt`` fitted on the other GPUs' steps only."""
    out = {}
    for gpu in sorted(set(steps.gpu)):
        others = ", ".join(sorted(set(steps.gpu) - {gpu}))
        out[gpu] = fit_steps(rt, steps.subset(steps.gpu != gpu), starts, f"fitted on the {others} steps")
    return out


def held_out_points(records, runtime: str, rt: Runtime | None = None):
    """The step comparison of ``runtime``'s mode with each GPU priced by the fit on the others
    (:func:`specsim.validation.gpu_steps.compare_steps`); ``rt``: the runtime to refit (default: shipped)."""
    mode, starts = STEP_FIT[runtime]
    rt = rt or load_runtime(runtime)
    fits = leave_one_gpu_out(rt, step_set(records, mode), starts)
    return compare_steps(records, mode, runtimes=fits)


@lru_cache(maxsize=1)
def shipped_points():
    """Every shipped file's points, each mode priced by its own runtime: leave one GPU out for a runtime
    fitted on these steps, as shipped for the others (computed once per process)."""
    records = load_records()
    out = []
    for mode in sorted({p["mode"] for r in records for p in r["points"]}):
        runtime = RUNTIME_OF_MODE[mode]
        fitted_here = runtime in STEP_FIT and STEP_FIT[runtime][0] == mode
        out += held_out_points(records, runtime) if fitted_here else compare_steps(records, mode)
    return tuple(out)
