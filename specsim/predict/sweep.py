"""Speedup over a range of γ per method and scenario, and the best γ (argmax over the range)."""

from __future__ import annotations

from dataclasses import dataclass

from specsim.predict.prediction import Prediction, predict_entry, select_entries
from specsim.profile import Profile


@dataclass(frozen=True)
class SweepResult:
    """One method × scenario over γ: its predictions and the γ with the highest known speedup."""

    method: str
    scenario: str
    images_per_prompt: int
    predictions: tuple[Prediction, ...]

    @property
    def best(self) -> Prediction | None:
        known = [p for p in self.predictions if p.speedup is not None]
        return max(known, key=lambda p: p.speedup) if known else None

    def to_json(self) -> dict:
        best = self.best
        return {
            "method": self.method,
            "scenario": self.scenario,
            "images_per_prompt": self.images_per_prompt,
            "best_gamma": None if best is None else best.gamma,
            "best_speedup": None if best is None else best.speedup,
            "best_extrapolated": None if best is None else best.extrapolated,
            "gammas": [p.gamma for p in self.predictions],
            "tau": [p.tau for p in self.predictions],
            "speedup": [p.speedup for p in self.predictions],
            "extrapolated": [p.extrapolated for p in self.predictions],
        }


def sweep(
    profile: Profile, gammas, *, methods=None, scenario=None, textbook: bool = False, context_tokens=None
) -> list[SweepResult]:
    """Predictions at every γ in ``gammas`` for each selected method × scenario."""
    return [
        SweepResult(
            e.method,
            e.scenario,
            e.images_per_prompt,
            tuple(
                predict_entry(profile, e, int(g), textbook=textbook, context_tokens=context_tokens)
                for g in gammas
            ),
        )
        for e in select_entries(profile, methods, scenario)
    ]
