"""Fit roofline efficiencies and overhead to a profile's measured latencies; held-out validation.

Least squares on log(predicted / measured) (relative errors: 1 ms and 100 ms points weigh the same) over the
profile's prefill, decode, verify and draft-batch points, with scipy's bounded ``least_squares``. The
parameters are those of an :class:`Efficiency` or of a :class:`~specsim.hardware.runtime.Runtime`. A point is
(role, batch, cached context, new positions, ms). A parameter no point is sensitive to is reported as
unconstrained: its value is then the starting value, not a measurement.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specsim.costs.pass_cost import DRAFT, PREFILL, STEP, TARGET
from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.roofline import Efficiency
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.hardware.runtime import PARAM_BOUNDS, Runtime
from specsim.profile_format import LatencySection

PARAMS = ("compute", "memory", "overhead_ms", "overhead_ms_per_layer")
RUNTIME_PARAMS = tuple(PARAM_BOUNDS)
_STARTS = {
    "compute": (0.05, 0.3, 0.9),
    "memory": (0.1, 0.5, 0.9),
    "memory_efficiency_gemv": (0.2, 0.8),
    "memory_efficiency_gemm": (0.1, 0.6),
    "compute_efficiency": (0.1, 0.6),
    "overlap": (0.0, 1.0),
}


def _is_log(name: str) -> bool:
    """Efficiencies are fitted in log space (bounded to (1e-4, 2])."""
    return name in ("compute", "memory") or "efficiency" in name


@dataclass(frozen=True)
class LatencyPoint:
    """One measured pass: which model, its shape (batch, cached context, new positions), time (ms)."""

    label: str
    role: str  # "target" | "draft"
    phase: str  # "decode" | "verify" | "prefill" | "draft_batch"
    batch: int
    context_tokens: float
    new_tokens: float
    logit_tokens: float
    measured_ms: float
    gamma: int | None = None


def points_from_latency(lat: LatencySection) -> tuple[list[LatencyPoint], list[str]]:
    """Every usable point of a LatencySection's 1-D tables, and notes on tables that could not be used."""
    pts: list[LatencyPoint] = []
    skipped: list[str] = []
    for role in ("target", "draft"):
        curve = getattr(lat, f"{role}_decode_ms_by_context")
        for x, ms in zip(curve.x, curve.ms) if curve else ():
            pts.append(LatencyPoint(f"{role} decode ctx={x:g}", role, "decode", 1, x, 1, 1, ms))
        curve = getattr(lat, f"{role}_prefill_ms_by_tokens")
        for x, ms in zip(curve.x, curve.ms) if curve else ():
            pts.append(LatencyPoint(f"{role} prefill S={x:g}", role, "prefill", 1, 0, x, 1, ms))
    ctx = lat.verify_context_tokens
    for name, phase in (("target_verify_ms_by_gamma", "verify"), ("draft_decode_ms_by_batch", "draft_batch")):
        curve = getattr(lat, name)
        if curve is None:
            continue
        if ctx is None:
            skipped.append(f"{name}: no verify_context_tokens, so its context is unknown")
            continue
        for x, ms in zip(curve.x, curve.ms):
            if phase == "verify":
                pts += points_from_grid("target", "verify", [x + 1], [ctx], [1], [[[ms]]])
            else:
                pts += points_from_grid("draft", "draft_batch", [1], [ctx], [x], [[[ms]]])
    return pts, skipped


def points_from_grid(role: str, phase: str, rows, context_tokens, batch, ms) -> list[LatencyPoint]:
    """Points of a measured grid ``ms[r][c][b]``: a pass over ``rows`` new positions per sequence, with
    ``context_tokens`` cached, for ``batch`` sequences (profile schema 2 ``latency.cost_model.grids``)."""
    out = []
    for i, r in enumerate(rows):
        for j, c in enumerate(context_tokens):
            for k, b in enumerate(batch):
                value = ms[i][j][k]
                if value is None:
                    continue
                label = f"{role} {phase} rows={r:g} ctx={c:g}" + (f" batch={b:g}" if b != 1 else "")
                if phase == "verify" and b == 1:
                    label = f"{role} verify gamma={r - 1:g} ctx={c:g}"
                if phase == "draft_batch":
                    label = f"{role} decode batch={b:g} ctx={c:g}"
                out.append(
                    LatencyPoint(
                        label,
                        role,
                        phase,
                        int(b),
                        float(c),
                        float(r),
                        float(r),
                        float(value),
                        gamma=int(r - 1) if phase == "verify" else None,
                    )
                )
    return out


def _kind(p: LatencyPoint) -> str:
    """A prompt's first pass keeps one logit (:data:`~specsim.costs.pass_cost.PREFILL`), every other pass
    the logits of each of its rows."""
    return PREFILL if p.phase == "prefill" else STEP


def predict_points(points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device, eff) -> np.ndarray:
    """Roofline time (ms) of each point (one vectorised call per model role and kind of pass)."""
    cost = RooflinePassCost(models.get(TARGET), models.get(DRAFT), dev, eff)
    out = np.empty(len(points))
    for role, kind in {(p.role, _kind(p)) for p in points}:
        idx = [i for i, p in enumerate(points) if (p.role, _kind(p)) == (role, kind)]
        batch, context, rows = np.array(
            [(points[i].batch, points[i].context_tokens, points[i].new_tokens) for i in idx], dtype=float
        ).T
        out[idx] = cost.pass_ms(role, rows, context, batch, kind=kind).ms
    return out


@dataclass(frozen=True)
class PointError:
    label: str
    measured_ms: float
    predicted_ms: float
    rel_error: float  # predicted / measured - 1
    compute_bound: bool


def _rms(rows) -> float:
    """Root mean square of the points' relative errors."""
    return float(np.sqrt(np.mean([r.rel_error**2 for r in rows])))


def _max_abs(rows) -> float:
    """Largest |relative error| among the points."""
    return float(max(abs(r.rel_error) for r in rows))


@dataclass(frozen=True)
class FitResult:
    """Fitted efficiency, per-point errors on the points it was fitted to, and what the data pinned."""

    efficiency: Efficiency | Runtime
    device: str
    rows: tuple[PointError, ...]
    constrained: dict[str, bool]

    @property
    def rms_rel_error(self) -> float:
        return _rms(self.rows)

    @property
    def max_abs_rel_error(self) -> float:
        return _max_abs(self.rows)

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "efficiency": self.efficiency.to_json(),
            "constrained": self.constrained,
            "rms_rel_error": self.rms_rel_error,
            "max_abs_rel_error": self.max_abs_rel_error,
            "points": [r.__dict__ for r in self.rows],
        }


def point_errors(
    points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device, eff
) -> tuple[PointError, ...]:
    """Predicted vs measured per point under ``eff``."""
    pred = predict_points(points, models, dev, eff)
    cost = RooflinePassCost(models.get(TARGET), models.get(DRAFT), dev, eff)
    return tuple(
        PointError(
            p.label,
            p.measured_ms,
            float(t),
            float(t / p.measured_ms - 1.0),
            bool(cost.compute_bound(p.role, p.new_tokens, p.context_tokens, p.batch, kind=_kind(p))),
        )
        for p, t in zip(points, pred)
    )


def _unpack(theta: np.ndarray, free: tuple[str, ...], start):
    values = {k: (float(np.exp(v)) if _is_log(k) else float(v)) for k, v in zip(free, theta)}
    return replace(start, **values)


def _bounds(free: tuple[str, ...], measured: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = [], []
    for k in free:
        a, b = PARAM_BOUNDS.get(k, (1e-4, 2.0) if _is_log(k) else (0.0, float(measured.max())))
        if k.startswith("overhead") or k == "overhead_ms":
            b = min(b, float(measured.max()))
        lo.append(np.log(max(a, 1e-4)) if _is_log(k) else a)
        hi.append(np.log(b) if _is_log(k) else b)
    return np.array(lo), np.array(hi)


def _starts(free: tuple[str, ...], measured: np.ndarray, start) -> list[np.ndarray]:
    """Starting points: a small grid over the first three free parameters, the start's value for the rest."""
    grids = []
    for i, k in enumerate(free):
        values = _STARTS.get(k, (0.0, 0.3 * measured.min()) if k.startswith("overhead") else None)
        if values is None or i >= 3:
            values = (getattr(start, k),)
        grids.append(values)
    return [
        np.array([np.log(max(v, 1e-4)) if _is_log(k) else v for k, v in zip(free, combo)])
        for combo in itertools.product(*grids)
    ]


def fit_efficiency(
    points: list[LatencyPoint],
    models: dict[str, ModelSpec],
    dev: Device,
    *,
    free: tuple[str, ...] = ("compute", "memory", "overhead_ms"),
    start: Efficiency | Runtime | None = None,
    source: str = "",
) -> FitResult:
    """Least-squares parameters (``free``) of an Efficiency or a Runtime that best reproduce ``points``."""
    if not points:
        raise SpecsimError("fit: the profile has no latency points to fit (no decode/prefill/verify tables)")
    allowed = RUNTIME_PARAMS if isinstance(start, Runtime) else PARAMS
    bad = [k for k in free if k not in allowed]
    if bad or not free:
        raise SpecsimError(f"fit: free parameters must be a non-empty subset of {allowed}, got {free!r}")
    missing = {p.role for p in points} - set(models)
    if missing:
        raise SpecsimError(f"fit: no model description for the {sorted(missing)[0]} points")
    start = start or Efficiency(overhead_ms=0.0, overhead_ms_per_layer=0.0)
    measured = np.array([p.measured_ms for p in points])

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(predict_points(points, models, dev, _unpack(theta, free, start)) / measured)

    lo, hi = _bounds(free, measured)
    best = None
    for x0 in _starts(free, measured, start):
        res = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), method="trf", x_scale="jac")
        if best is None or res.cost < best.cost:
            best = res
    source = source or f"fitted on {len(points)} measured points on {dev.name}"
    eff = _unpack(best.x, free, start)
    eff = (
        eff.with_values(source, **{k: getattr(eff, k) for k in free})
        if isinstance(eff, Runtime)
        else replace(eff, source=source)
    )
    sensitivity = np.abs(best.jac).max(axis=0)
    constrained = {k: bool(s > 1e-6) for k, s in zip(free, sensitivity)}
    return FitResult(eff, dev.name, point_errors(points, models, dev, eff), constrained)


@dataclass(frozen=True)
class HoldoutResult:
    """A fit on the training points and its errors on the held-out points."""

    fit: FitResult
    held_out: tuple[PointError, ...]

    @property
    def rms_rel_error(self) -> float:
        return _rms(self.held_out)

    @property
    def max_abs_rel_error(self) -> float:
        return _max_abs(self.held_out)

    def to_json(self) -> dict:
        return {
            "fit": self.fit.to_json(),
            "held_out_rms_rel_error": self.rms_rel_error,
            "held_out_max_abs_rel_error": self.max_abs_rel_error,
            "held_out": [r.__dict__ for r in self.held_out],
        }


def short_context_split(
    points: list[LatencyPoint], max_context: float | None = None, max_gamma: int | None = None
) -> Callable[[LatencyPoint], bool]:
    """Train on short contexts/prompts and small γ; defaults: the medians of the measured values."""
    ctxs = [p.context_tokens for p in points if p.phase == "decode"] + [
        p.new_tokens for p in points if p.phase == "prefill"
    ]
    gammas = [p.gamma for p in points if p.gamma is not None]
    max_context = float(np.median(ctxs)) if max_context is None and ctxs else (max_context or 0.0)
    max_gamma = int(np.median(gammas)) if max_gamma is None and gammas else (max_gamma or 0)

    def is_train(p: LatencyPoint) -> bool:
        if p.phase == "decode":
            return p.context_tokens <= max_context
        if p.phase == "prefill":
            return p.new_tokens <= max_context
        if p.phase == "verify":
            return (p.gamma or 0) <= max_gamma
        return p.batch <= 2

    return is_train


def holdout(
    points: list[LatencyPoint],
    models: dict[str, ModelSpec],
    dev: Device,
    is_train: Callable[[LatencyPoint], bool],
    **fit_kwargs,
) -> HoldoutResult:
    """Fit on the points ``is_train`` accepts, report relative errors on the others."""
    train = [p for p in points if is_train(p)]
    test = [p for p in points if not is_train(p)]
    if not train or not test:
        raise SpecsimError(
            f"holdout: need points on both sides of the split, got {len(train)} train and "
            f"{len(test)} held out"
        )
    fit = fit_efficiency(train, models, dev, **fit_kwargs)
    return HoldoutResult(fit, point_errors(test, models, dev, fit.efficiency))
