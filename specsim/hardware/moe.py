"""A mixture-of-experts MLP for the roofline: which weights a token multiplies and which a pass reads.

Read from a HF config by :func:`specsim.hardware.model.spec_from_config`. A token multiplies its k routed
experts (of E) plus any shared expert; a pass of n tokens reads the experts at least one of them routes to,
E · (1 − (1 − k/E)^n) in expectation under independent uniform routing, so decode at batch 1 reads k
experts and a large batch or a verify pass reads nearly all E.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MoESpec:
    """A mixture-of-experts MLP: ``experts`` routed experts of width ``expert_intermediate``, ``per_token`` of
    them per token, an always-on shared expert of width ``shared_intermediate`` (0: none), in ``layers`` of
    the decoder layers (the others keep the dense MLP); each expert a gated MLP (3 matrices)."""

    experts: int
    per_token: int
    expert_intermediate: int
    shared_intermediate: int
    layers: int

    def expert_params(self, hidden: int) -> int:
        return 3 * hidden * self.expert_intermediate

    def fixed_params(self, hidden: int) -> int:
        """Per MoE layer, what every token reads whatever its route: the router and the shared expert."""
        return hidden * self.experts + 3 * hidden * self.shared_intermediate

    def touched_experts(self, rows) -> np.ndarray:
        """Expected distinct experts a pass of ``rows`` tokens reads per layer: E · (1 − (1 − k/E)^rows),
        routes taken as independent and uniform (each token picks k of E). 1 row: k; many rows: all E."""
        rows = np.asarray(rows, dtype=float)
        return self.experts * (1.0 - (1.0 - self.per_token / self.experts) ** rows)
