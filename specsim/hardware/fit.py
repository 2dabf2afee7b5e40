"""Fit roofline efficiencies and overhead to a profile's measured latencies; held-out validation.

Least squares on log(predicted / measured) (relative errors, so 1 ms and 100 ms points weigh the
same) over the profile's prefill, decode, verify and draft-batch points, with scipy's bounded
``least_squares`` started from a small grid (the max() in the roofline makes the loss piecewise).
A parameter no point is sensitive to (e.g. compute efficiency when every point is memory-bound) is
reported as unconstrained: its value is then the starting value, not a measurement.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.roofline import Efficiency, compute_bound, forward_ms
from specsim.profile import LatencySection

PARAMS = ("compute", "memory", "overhead_ms", "overhead_ms_per_layer")
_LOG_PARAMS = ("compute", "memory")  # fitted in log space, bounded to (1e-4, 2]


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
    """Every usable point of a LatencySection, and notes on tables that could not be used."""
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
                pts.append(LatencyPoint(f"target verify gamma={x:g} ctx={ctx}", "target", "verify", 1, ctx,
                                        x + 1, x + 1, ms, gamma=int(x)))
            else:
                pts.append(LatencyPoint(f"draft decode batch={x:g} ctx={ctx}", "draft", "draft_batch", int(x),
                                        ctx, 1, 1, ms))
    return pts, skipped


def predict_points(points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device,
                   eff: Efficiency) -> np.ndarray:
    """Roofline time (ms) of each point (one vectorised call per model role)."""
    out = np.empty(len(points))
    for role in {p.role for p in points}:
        idx = [i for i, p in enumerate(points) if p.role == role]
        cols = np.array([(points[i].batch, points[i].context_tokens, points[i].new_tokens, points[i].logit_tokens)
                         for i in idx], dtype=float).T
        out[idx] = forward_ms(models[role], dev, eff, *cols)
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

    efficiency: Efficiency
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
        return {"device": self.device, "efficiency": self.efficiency.to_json(), "constrained": self.constrained,
                "rms_rel_error": self.rms_rel_error, "max_abs_rel_error": self.max_abs_rel_error,
                "points": [r.__dict__ for r in self.rows]}


def point_errors(points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device,
                 eff: Efficiency) -> tuple[PointError, ...]:
    """Predicted vs measured per point under ``eff``."""
    pred = predict_points(points, models, dev, eff)
    return tuple(PointError(p.label, p.measured_ms, float(t), float(t / p.measured_ms - 1.0),
                            bool(compute_bound(models[p.role], dev, eff, p.batch, p.context_tokens,
                                               p.new_tokens, p.logit_tokens)))
                 for p, t in zip(points, pred))


def _unpack(theta: np.ndarray, free: tuple[str, ...], start: Efficiency) -> Efficiency:
    values = {k: (float(np.exp(v)) if k in _LOG_PARAMS else float(v)) for k, v in zip(free, theta)}
    return replace(start, **values)


def fit_efficiency(points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device, *,
                   free: tuple[str, ...] = ("compute", "memory", "overhead_ms"),
                   start: Efficiency | None = None, source: str = "") -> FitResult:
    """Least-squares efficiencies/overheads (``free``) that best reproduce ``points`` on ``dev``."""
    if not points:
        raise SpecsimError("fit: the profile has no latency points to fit (no decode/prefill/verify tables)")
    bad = [k for k in free if k not in PARAMS]
    if bad or not free:
        raise SpecsimError(f"fit: free parameters must be a non-empty subset of {PARAMS}, got {free!r}")
    missing = {p.role for p in points} - set(models)
    if missing:
        raise SpecsimError(f"fit: no model description for the {sorted(missing)[0]} points")
    start = start or Efficiency(overhead_ms=0.0, overhead_ms_per_layer=0.0)
    measured = np.array([p.measured_ms for p in points])

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(predict_points(points, models, dev, _unpack(theta, free, start)) / measured)

    lo = np.array([np.log(1e-4) if k in _LOG_PARAMS else 0.0 for k in free])
    hi = np.array([np.log(2.0) if k in _LOG_PARAMS else float(measured.max()) for k in free])
    best = None
    grid = {"compute": (0.05, 0.3, 0.9), "memory": (0.1, 0.5, 0.9), "overhead_ms": (0.0, 0.3 * measured.min()),
            "overhead_ms_per_layer": (0.0,)}
    for combo in itertools.product(*(grid[k] for k in free)):
        x0 = np.array([np.log(v) if k in _LOG_PARAMS else v for k, v in zip(free, combo)])
        res = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), method="trf", x_scale="jac")
        if best is None or res.cost < best.cost:
            best = res
    eff = replace(_unpack(best.x, free, start),
                  source=source or f"fitted on {len(points)} measured points on {dev.name}")
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
        return {"fit": self.fit.to_json(), "held_out_rms_rel_error": self.rms_rel_error,
                "held_out_max_abs_rel_error": self.max_abs_rel_error,
                "held_out": [r.__dict__ for r in self.held_out]}


def short_context_split(points: list[LatencyPoint], max_context: float | None = None,
                        max_gamma: int | None = None) -> Callable[[LatencyPoint], bool]:
    """Train on short contexts/prompts and small γ; defaults: the medians of the measured values."""
    ctxs = [p.context_tokens for p in points if p.phase == "decode"] + \
           [p.new_tokens for p in points if p.phase == "prefill"]
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


def holdout(points: list[LatencyPoint], models: dict[str, ModelSpec], dev: Device,
            is_train: Callable[[LatencyPoint], bool], **fit_kwargs) -> HoldoutResult:
    """Fit on the points ``is_train`` accepts, report relative errors on the others."""
    train = [p for p in points if is_train(p)]
    test = [p for p in points if not is_train(p)]
    if not train or not test:
        raise SpecsimError(f"holdout: need points on both sides of the split, got {len(train)} train and "
                           f"{len(test)} held out")
    fit = fit_efficiency(train, models, dev, **fit_kwargs)
    return HoldoutResult(fit, point_errors(test, models, dev, fit.efficiency))
