"""Synthetic acceptance: every block's accept decision follows a schedule instead of comparing tokens.

As vLLM's ``rejection_sample_method="synthetic"``, TensorRT-LLM's forced accepted tokens and llama.cpp's
``--spec-synth-len``: real passes at any model size with random weights. A schedule is one greedy ``match``
per prompt id; a block at t with g drafts accepts the run of 1s from t capped at g, as trace replay has it,
so the prediction prices the same schedule (:meth:`SyntheticAcceptance.traces`). Not lossless. Engines call
:func:`scripted_accept`; sources: :mod:`calibrate.measure.synthetic_schedules`. More: ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specsim.errors import SpecsimError
from specsim.profile_format import Trace


@dataclass(frozen=True)
class SyntheticAcceptance:
    """Accept decisions by prompt id (``match[id][t]``, 0/1 per output position) and where they came from
    (``source``, the label every row measured with them carries)."""

    source: str
    match: Mapping[str, tuple[int, ...]]

    def accepted(self, prompt_id: str | None, start: int, g: int) -> int:
        """Drafts a block accepts that starts at output position ``start`` with ``g`` drafts."""
        if prompt_id not in self.match:
            raise SpecsimError(
                f"synthetic acceptance {self.source}: no schedule for prompt {prompt_id!r} "
                f"(has {len(self.match)} prompts)"
            )
        run = 0
        for m in self.match[prompt_id][start : start + g]:
            if not m:
                break
            run += 1
        return run

    def accepted_rows(self, prompt_ids: Sequence[str | None], starts: Sequence[int], g: int) -> list[int]:
        """:meth:`accepted` of each row of a batch (its prompt id and tokens emitted so far)."""
        return [self.accepted(p, s, g) for p, s in zip(prompt_ids, starts, strict=True)]

    def traces(self, prompt_ids: Sequence[str], tokens: int) -> tuple[Trace, ...]:
        """The schedule of each prompt as a greedy :class:`Trace` over the ``tokens`` a run emits (what the
        prediction replays)."""
        out = []
        for p in prompt_ids:
            match = self.match[p][:tokens]
            if len(match) < tokens:
                raise SpecsimError(
                    f"synthetic acceptance {self.source}: prompt {p!r} has {len(match)} positions, "
                    f"the run emits {tokens}"
                )
            out.append(Trace(match=tuple(match), prompt_id=p))
        return tuple(out)

    @classmethod
    def drawn(cls, source: str, rates: Mapping[str, np.ndarray], rng: np.random.Generator):
        """Each position of each prompt (in ``rates``' order) accepted with its rate, drawn from ``rng``
        (rates of 0 and 1, a trace's, draw themselves)."""
        match = {p: tuple(int(u) for u in rng.random(len(r)) < np.asarray(r)) for p, r in rates.items()}
        return cls(source=source, match=match)


def scripted_accept(logits: torch.Tensor, accepted) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance step under a schedule: (n [B] = ``accepted`` capped at g, the target's argmax after
    them [B]) from verify logits [B, g+1, V]; the engines' seam (greedy only)."""
    n = torch.as_tensor(accepted, dtype=torch.long, device=logits.device).clamp(max=logits.shape[1] - 1)
    best = torch.argmax(logits, -1)  # [B, g+1]
    return n, best.gather(1, n[:, None])[:, 0]
