"""A ``llama-server`` step priced from a llama.cpp profile (:class:`specsim.serve.step_cost.StepCost`).

Busy slots (``--parallel N``) decode in one unified KV cache: a step's target pass carries every decoding
slot's rows and the prompts being processed, priced from the batched grids (``llama-batched-bench``) at the
slots' mean width; with a draft model, γ draft passes of one row per slot, then the draft's catch-up after
the target's pass. Rejected drafts leave the cache. Outside the passes: the batched work per target-only
step or per block at γ and B, plus per emitted token. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import CATCHUP, DRAFT, PREFILL, TARGET, draft_steps_ms
from specsim.errors import SpecsimError
from specsim.profile_format import Profile


@dataclass(frozen=True)
class LlamaServerStepCost:
    """Step costs (ms) of llama-server from a llama.cpp profile's batched grids (module docstring)."""

    keeps_rejected_drafts = False

    passes: GridPassCost
    tokens_per_block: float = 1.0
    image_tokens_per_image: int = 0

    @classmethod
    def from_profile(cls, profile: Profile, tokens_per_block: float = 1.0) -> LlamaServerStepCost:
        """The profile's batched grids; SpecsimError unless they are llama.cpp's."""
        passes = GridPassCost.batch(
            profile.latency,
            f"profile {profile.name!r}: no batched cost (calibrate latency --engine llama.cpp "
            "--request-batches 1,2,4)",
        )
        if passes.first_pass_drafts:
            raise SpecsimError(f"profile {profile.name!r}: its latency is not llama.cpp's")
        return cls(passes, float(tokens_per_block))

    def _prefill(self, role: str, chunks) -> float:
        rows = [c[0] for c in chunks if c[0] > 0]
        if not rows:
            return 0.0
        return float(np.sum(self.passes.pass_ms(role, np.asarray(rows, float), 0.0, 1, kind=PREFILL).ms))

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        total = self._prefill(TARGET, prefill_chunks)
        if batch:
            width = float(np.mean(context_tokens[:batch]))
            total += float(self.passes.pass_ms(TARGET, rows_per_seq, width, batch).ms)
        return total

    def draft_ms(self, batch, gamma, context_tokens, prefill_chunks=(), since_admission=None) -> float:
        total = self._prefill(DRAFT, prefill_chunks)
        if batch and gamma:
            width = float(np.mean(context_tokens[:batch]))
            total += float(np.sum(draft_steps_ms(self.passes, width + np.arange(gamma), batch).ms))
            total += float(self.passes.pass_ms(DRAFT, gamma + 1, width, batch, kind=CATCHUP).ms)
        return total

    def encoder_ms(self, images) -> float:
        return 0.0

    def overhead_ms(self, batch, gamma) -> float:
        if gamma == 0:
            return float(self.passes.step_overhead_ms(batch))
        blocks = float(self.passes.block_overhead_ms(gamma, batch))
        return blocks + batch * self.tokens_per_block * self.passes.token_overhead_ms(batch)
