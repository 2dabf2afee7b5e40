"""What sampling adds to speculative decoding at temperature T > 0, on top of the greedy-calibrated
cost model (ms).

Sampled SD (Leviathan et al. 2023, §2.3) draws drafts from softmax(q/T) and verifies with softmax(p/T), an
acceptance test and a residual or bonus draw. ``calibrate latency`` times the engine's functions on random
logits, sampled minus greedy (they depend on vocabulary and γ, not context): ``draft_step_ms`` and
``target_step_ms`` per token, ``accept_ms`` per block at ``accept_gammas`` (piecewise linear in γ,
extrapolated linearly above, clipped at ≥ 0). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import check_object, field_int, field_list, field_num, show

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SamplingCost:
    """ms that sampling adds per draft token, per target-only token and per block's acceptance (by γ)."""

    draft_step_ms: float
    target_step_ms: float
    accept_gammas: tuple[int, ...]
    accept_ms: tuple[float, ...]
    schema_version: int = SCHEMA_VERSION

    def accept_ms_at(self, gamma) -> np.ndarray:
        """Added ms of the acceptance of blocks with ``gamma`` drafts (array-like)."""
        g = np.asarray(gamma, dtype=float)
        x, y = np.asarray(self.accept_gammas, float), np.asarray(self.accept_ms, float)
        out = np.interp(g, x, y)
        if x.size > 1:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            out = np.where(g > x[-1], y[-1] + slope * (g - x[-1]), out)
        return np.maximum(out, 0.0)

    def block_ms(self, drafts) -> np.ndarray:
        """Added ms of SD blocks with ``drafts`` draft tokens each: γ draws plus the sampled acceptance."""
        d = np.asarray(drafts, dtype=float)
        return d * self.draft_step_ms + self.accept_ms_at(d)

    def to_json(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "draft_step_ms": self.draft_step_ms,
            "target_step_ms": self.target_step_ms,
            "accept_gammas": list(self.accept_gammas),
            "accept_ms": list(self.accept_ms),
        }

    @classmethod
    def from_json(cls, d, where: str = "latency.cost_model.sampling") -> SamplingCost:
        check_object(
            d,
            {"schema_version", "draft_step_ms", "target_step_ms", "accept_gammas", "accept_ms"},
            where,
            schema_version=SCHEMA_VERSION,
        )
        num = {
            k: field_num(d.get(k), f"{where}.{k}", lo=0, hi=1e6) for k in ("draft_step_ms", "target_step_ms")
        }
        gammas = tuple(
            field_int(g, f"{where}.accept_gammas[{i}]", lo=0)
            for i, g in enumerate(field_list(d.get("accept_gammas"), f"{where}.accept_gammas"))
        )
        ms = tuple(
            field_num(v, f"{where}.accept_ms[{i}]", lo=0, hi=1e6)
            for i, v in enumerate(field_list(d.get("accept_ms"), f"{where}.accept_ms"))
        )
        if len(ms) != len(gammas):
            raise SpecsimError(
                f"{where}.accept_ms: expected {len(gammas)} values (one per accept_gammas), got {len(ms)}"
            )
        if any(b <= a for a, b in zip(gammas, gammas[1:])):
            raise SpecsimError(
                f"{where}.accept_gammas: expected strictly increasing, got {show(list(gammas))}"
            )
        return cls(accept_gammas=gammas, accept_ms=ms, **num)
