"""Best draft length per batch size for a serving engine: planner latency × profile τ; 0 turns SD off there.

For every batch size B = 1..B_max (each integer, so ranges of equal draft length are exact to the
model) the hardware planner (:func:`specsim.hardware.plan.plan_hardware`) gives the best-γ decode
speedup τ(γ)·Tp / (γ·Tq + Tv(γ)) over γ = 1..γ_max on one device; where even the best is below
``min_speedup`` the recommendation is γ = 0 (plain decoding). τ(γ) comes from the profile entry via
:func:`specsim.predict.tau_at_gamma.tau_with_source` (exact for γ ≤ K of imported engine counters, flagged
beyond).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.plan import MethodTau, Plan, plan_hardware
from specsim.hardware.roofline import Efficiency
from specsim.hardware.runtime import Runtime
from specsim.profile import MethodAcceptance

DEFAULT_SHOWN_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class LatencyModel:
    """Where per-pass latency comes from: the planner's roofline for target and draft on one device."""

    target: ModelSpec
    draft: ModelSpec
    device: Device
    efficiency: Efficiency | Runtime = Efficiency()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchChoice:
    """The recommendation at one batch size; ``gamma`` = 0 means plain decoding (SD off)."""

    batch_size: int
    gamma: int
    speedup: float  # of the choice: best_speedup, or 1.0 when SD is off
    best_gamma: int
    best_speedup: float
    tau: float  # τ at best_gamma
    tau_source: str
    c: float
    v: float
    fits_memory: bool

    @property
    def extrapolated(self) -> bool:
        return self.tau_source.startswith("iid")


@dataclass(frozen=True)
class Recommendation:
    """Draft length per batch size for one method on one device, and the assumptions behind it."""

    method: str
    scenario: str
    device: str
    context_tokens: int
    gamma_max: int
    min_speedup: float
    choices: tuple[BatchChoice, ...]  # batch sizes 1..B_max
    shown_batches: tuple[int, ...]
    assumptions: tuple[str, ...]

    def at(self, batch_size: int) -> BatchChoice:
        for c in self.choices:
            if c.batch_size == batch_size:
                return c
        raise SpecsimError(
            f"batch size {batch_size} is outside the evaluated range 1..{self.choices[-1].batch_size}"
        )

    def schedule(self) -> list[tuple[int, int, int]]:
        """[(first batch, last batch, γ)] of consecutive batch sizes with the same γ, covering 1..B_max."""
        out: list[list[int]] = []
        for c in self.choices:
            if out and out[-1][2] == c.gamma:
                out[-1][1] = c.batch_size
            else:
                out.append([c.batch_size, c.batch_size, c.gamma])
        return [tuple(r) for r in out]

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "method": self.method,
            "scenario": self.scenario,
            "device": self.device,
            "context_tokens": self.context_tokens,
            "gamma_max": self.gamma_max,
            "min_speedup": self.min_speedup,
            "table": [
                asdict(self.at(b)) | {"extrapolated": self.at(b).extrapolated} for b in self.shown_batches
            ],
            "schedule": [list(r) for r in self.schedule()],
            "assumptions": list(self.assumptions),
        }


def _plan(entry: MethodAcceptance, lm: LatencyModel, gammas, max_batch: int, context_tokens: int) -> Plan:
    return plan_hardware(
        lm.target,
        lm.draft,
        [lm.device],
        [MethodTau.from_entry(entry, gammas)],
        efficiency=lm.efficiency,
        batches=range(1, max_batch + 1),
        contexts=(context_tokens,),
        notes=lm.notes,
    )


def _check(batches, context_tokens: int, gamma_max: int, min_speedup: float) -> list[int]:
    shown = sorted({int(b) for b in batches})
    if not shown or shown[0] < 1:
        raise SpecsimError(f"batch sizes: expected integers >= 1, got {list(batches)!r}")
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens < 0:
        raise SpecsimError(f"context tokens: expected an integer >= 0, got {context_tokens!r}")
    if isinstance(gamma_max, bool) or not isinstance(gamma_max, int) or gamma_max < 1:
        raise SpecsimError(f"gamma max: expected an integer >= 1, got {gamma_max!r}")
    if not min_speedup > 0:
        raise SpecsimError(f"min speedup: expected a number > 0, got {min_speedup!r}")
    return shown


def recommend(
    entry: MethodAcceptance,
    lm: LatencyModel,
    *,
    batches=DEFAULT_SHOWN_BATCHES,
    context_tokens: int = 1024,
    gamma_max: int | None = None,
    min_speedup: float = 1.0,
) -> Recommendation:
    """Best γ (0 = off) for every batch size 1..max(batches); γ tried 1..gamma_max (default: the entry's
    K)."""
    gamma_max = entry.gamma if gamma_max is None else gamma_max
    if gamma_max is None:
        raise SpecsimError(f"method {entry.method!r}: the entry has no measured gamma; pass a gamma max")
    shown = _check(batches, context_tokens, gamma_max, min_speedup)
    plan = _plan(entry, lm, range(1, gamma_max + 1), shown[-1], context_tokens)
    choices = tuple(
        BatchChoice(
            batch_size=r.batch_size,
            gamma=r.best_gamma if r.speedup >= min_speedup else 0,
            speedup=r.speedup if r.speedup >= min_speedup else 1.0,
            best_gamma=r.best_gamma,
            best_speedup=r.speedup,
            tau=r.tau,
            tau_source=r.tau_source,
            c=r.c,
            v=r.v,
            fits_memory=r.fits_memory,
        )
        for r in sorted(plan.rows, key=lambda r: r.batch_size)
    )
    assumptions = plan.assumptions + (
        f"SD is turned off (draft length 0) where the best predicted speedup is below {min_speedup:g}",
        "batch size = sequences decoding together in one engine step (concurrency), every size "
        f"1..{shown[-1]} evaluated",
        f"context = {context_tokens} tokens already in each sequence's KV cache",
        f"draft lengths tried: 1..{gamma_max}"
        + (
            f" (tau beyond the measured K = {entry.gamma} is an i.i.d. extrapolation)"
            if entry.gamma and gamma_max > entry.gamma
            else ""
        ),
    )
    return Recommendation(
        entry.method,
        entry.scenario,
        lm.device.name,
        context_tokens,
        gamma_max,
        min_speedup,
        choices,
        tuple(shown),
        assumptions,
    )


def fixed_gamma_speedups(
    entry: MethodAcceptance, lm: LatencyModel, gamma: int, *, max_batch: int, context_tokens: int
) -> list[tuple[int, float]]:
    """[(batch, speedup at this one γ)] for batch 1..max_batch: what an engine with one fixed γ gets."""
    plan = _plan(entry, lm, (gamma,), max_batch, context_tokens)
    return [(r.batch_size, r.speedup) for r in sorted(plan.rows, key=lambda r: r.batch_size)]


def first_losing_batch(speedups: list[tuple[int, float]], min_speedup: float = 1.0) -> int | None:
    """Smallest batch whose speedup is below ``min_speedup`` (None: SD pays at every batch)."""
    return next((b for b, s in speedups if s < min_speedup), None)
