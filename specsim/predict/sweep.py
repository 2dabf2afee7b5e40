"""Speedup over a range of γ per method and scenario, and the best γ (argmax over the range).

A best γ is named only among the γ priced from evidence at that γ (traces replayed, τ measured there):
an argmax over values whose τ was extrapolated with an i.i.d. α, or over one value, would look like a
finding and is none. Then the sweep says why there is no best instead (``best_note``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.predict.prediction import Prediction, predict_entry
from specsim.profile_format import Profile


@dataclass(frozen=True)
class SweepResult:
    """One method × scenario over γ: its predictions and the γ with the highest known speedup."""

    method: str
    scenario: str
    images_per_prompt: int
    predictions: tuple[Prediction, ...]

    @property
    def priced_from_evidence(self) -> list[Prediction]:
        """The predictions with a speedup whose τ was not extrapolated from another γ."""
        return [p for p in self.predictions if p.speedup is not None and not p.extrapolated]

    @property
    def best(self) -> Prediction | None:
        """The highest speedup among the γ priced from evidence, when there are at least two; else None."""
        known = self.priced_from_evidence
        return max(known, key=lambda p: p.speedup) if len(known) >= 2 else None

    @property
    def best_note(self) -> str:
        """Why no best γ is named ("" when one is)."""
        known = self.priced_from_evidence
        if len(known) >= 2:
            return ""
        if known:
            return f"only gamma = {known[0].gamma} priced from its own evidence: no best gamma"
        return "no gamma priced from its own evidence: no best gamma"

    def to_json(self) -> dict:
        best = self.best
        return {
            "method": self.method,
            "scenario": self.scenario,
            "images_per_prompt": self.images_per_prompt,
            "best_gamma": None if best is None else best.gamma,
            "best_speedup": None if best is None else best.speedup,
            "best_note": self.best_note,
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
        for e in profile.select_entries(methods, scenario)
    ]
