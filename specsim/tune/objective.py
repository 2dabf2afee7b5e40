"""What a tuning study optimises, read off each trial's serving summary.

- ``goodput``: requests/s meeting every bound of the SLO (maximised; needs an SLO; infeasible at 0);
- ``tokens-per-gpu``: output tokens per second per GPU (the target's TP degree; maximised);
- ``usd-per-mtok``: dollars per million output tokens = price per GPU-hour × GPUs / (3600 · tokens/s) · 1e6
  (minimised). With an SLO a deployment counts only where ``slo_attainment`` of the requests meet it
  (:meth:`Objective.violation` > 0 is infeasible); one that does not fit scores the worst value.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.tune.trial import Deployment, TrialResult

OBJECTIVES = {
    "goodput": ("maximize", "goodput (requests/s meeting the SLO)", "req/s"),
    "tokens-per-gpu": ("maximize", "output tokens/s per GPU", "tok/s/GPU"),
    "usd-per-mtok": ("minimize", "$ per million output tokens", "$/Mtok"),
}


@dataclass(frozen=True)
class Objective:
    """One objective (module docstring): its name, the SLO attainment it requires (None: no constraint)
    and the price per GPU-hour of each device (``usd-per-mtok``)."""

    name: str
    slo_attainment: float | None = None
    prices_usd_per_hour: tuple[tuple[str, float], ...] = ()

    @property
    def direction(self) -> str:
        return OBJECTIVES[self.name][0]

    @property
    def unit(self) -> str:
        return OBJECTIVES[self.name][2]

    def describe(self) -> str:
        bound = (
            f", at least {self.slo_attainment:.0%} of requests meeting the SLO" if self.slo_attainment else ""
        )
        return f"{OBJECTIVES[self.name][1]} ({self.direction}{bound})"

    def worst(self) -> float:
        return math.inf if self.direction == "minimize" else 0.0

    def value(self, deployment: Deployment, result: TrialResult) -> float:
        """The objective of one trial (the worst value where it does not fit)."""
        m = result.metrics
        if not result.fits or m is None:
            return self.worst()
        if self.name == "goodput":
            return float(m.goodput_requests_per_s or 0.0)
        per_gpu = m.output_tokens_per_s / result.gpus
        if self.name == "tokens-per-gpu":
            return per_gpu
        price = dict(self.prices_usd_per_hour)[deployment.device]
        return price / (3600.0 * per_gpu) * 1e6 if per_gpu > 0 else math.inf

    def violation(self, result: TrialResult) -> float:
        """How far a trial is from feasible (≤ 0: feasible): 1 where it does not fit, else the share of
        requests short of ``slo_attainment``."""
        if not result.fits or result.metrics is None:
            return 1.0
        met = result.metrics.slo_met_fraction
        if self.name == "goodput":  # a goodput of 0 is no deployment to recommend
            return 0.0 if met else 1.0
        if self.slo_attainment is None or met is None:
            return 0.0
        return max(0.0, self.slo_attainment - met)

    def better(self, a: float, b: float) -> bool:
        return a < b if self.direction == "minimize" else a > b

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "direction": self.direction,
            "slo_attainment": self.slo_attainment,
            "prices_usd_per_hour": dict(self.prices_usd_per_hour),
        }


def make_objective(
    name: str,
    *,
    has_slo: bool,
    slo_attainment: float | None,
    devices,
    prices: dict[str, float] | None = None,
) -> Objective:
    """The objective ``name`` for a study over ``devices``; ``slo_attainment`` None: 0.9 where it applies.
    SpecsimError (one line) for what it lacks or ignores: ``goodput`` without an SLO or with an attainment,
    a device with no price for ``usd-per-mtok``."""
    if name not in OBJECTIVES:
        raise SpecsimError(f"--objective: expected one of {list(OBJECTIVES)}, got {name!r}")
    if name == "goodput" and not has_slo:
        raise SpecsimError("--objective goodput: needs --slo (the bounds a request must meet)")
    if name == "goodput" and slo_attainment is not None:
        raise SpecsimError(
            f"--slo-attainment {slo_attainment:g}: applies to --objective tokens-per-gpu and usd-per-mtok; "
            "goodput counts the requests that meet --slo"
        )
    slo_attainment = 0.9 if slo_attainment is None else slo_attainment
    if not 0 < slo_attainment <= 1:
        raise SpecsimError(f"--slo-attainment: expected a fraction in (0, 1], got {slo_attainment!r}")
    given = dict(prices or {})
    unknown = sorted(set(given) - set(devices))
    if unknown:
        raise SpecsimError(f"--price: device {unknown[0]!r} is not in --device ({', '.join(devices)})")
    priced = []
    if name == "usd-per-mtok":
        for dev in devices:
            price = given.get(dev, load_device(dev).price_per_hour_usd)
            if price is None:
                raise SpecsimError(
                    f"--objective usd-per-mtok: device {dev!r} has no price (its price_per_hour_usd is "
                    f"null); give --price {dev}=USD_PER_GPU_HOUR"
                )
            priced.append((dev, float(price)))
    attainment = slo_attainment if has_slo and name != "goodput" else None
    return Objective(name, attainment, tuple(priced))
