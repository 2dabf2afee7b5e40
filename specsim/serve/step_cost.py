"""What one serving step costs (ms): the interface the simulator prices steps through, and a hand-set one.

step_ms = encoder_ms + draft_ms + target_step_ms + overhead_ms (:func:`step_ms`), in vLLM V1's order with a
draft model: vision encoder, γ sequential draft passes over the B decoding sequences, one target pass over
B·(γ+1) rows plus the step's prefill chunks, per-step work outside the models. A prefill chunk is
``(tokens, context_tokens, images)``; ``since_admission`` = steps since the last admitting step (0: this one;
None: long after). Implementations: :class:`ConstantStepCost`, ``RooflineStepCost``, ``ProfileStepCost``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specsim.errors import SpecsimError

# per chunk: (prompt tokens in the step, prompt tokens already cached[, images the chunk encodes])
Chunks = Sequence[tuple[int, ...]]


def chunk_images(chunk) -> int:
    """Images a prefill chunk encodes (0 for a chunk given as (tokens, cached))."""
    return int(chunk[2]) if len(chunk) > 2 else 0


class StepCost(Protocol):
    """Prices a serving step's parts (ms); ``image_tokens_per_image``: prompt positions one image fills."""

    image_tokens_per_image: int

    def target_step_ms(
        self,
        batch: int,
        rows_per_seq: int,
        context_tokens: np.ndarray,
        prefill_chunks: Chunks = (),
        since_admission: int | None = None,
    ) -> float:
        """One target pass: ``batch`` sequences × ``rows_per_seq`` query rows (γ+1 verify, 1 target-only)
        over their KV (``context_tokens``, one per sequence), plus ``prefill_chunks`` in the same pass;
        0 when there is nothing to run."""
        ...

    def draft_ms(
        self,
        batch: int,
        gamma: int,
        context_tokens: np.ndarray,
        prefill_chunks: Chunks = (),
        since_admission: int | None = None,
    ) -> float:
        """γ sequential draft passes at ``batch`` (KV ``context_tokens`` + j at pass j), the first also
        prefilling ``prefill_chunks`` into the draft's cache; 0 when there is nothing to run."""
        ...

    def encoder_ms(self, images: int) -> float:
        """Vision encoder (and projector) over ``images`` images; 0 for none."""
        ...

    def overhead_ms(self, batch: int, gamma: int) -> float:
        """Per-step work outside the passes (scheduling, sampling, rejection sampling) at ``batch``, γ."""
        ...


def step_ms(
    cost: StepCost,
    *,
    batch,
    gamma,
    context_tokens,
    prefill_chunks,
    images,
    draft_prefill,
    since_admission: int | None = None,
) -> float:
    """One step (ms) = encoder + draft + target + overhead. ``draft_prefill``: the draft also prefills the
    chunks (SD can run for these requests); ``since_admission``: module docstring."""
    total = cost.encoder_ms(images) if images else 0.0
    if draft_prefill or (gamma > 0 and batch > 0):
        total += cost.draft_ms(
            batch if gamma > 0 else 0,
            gamma,
            context_tokens,
            prefill_chunks if draft_prefill else (),
            since_admission=since_admission,
        )
    total += cost.target_step_ms(
        batch, gamma + 1, context_tokens, prefill_chunks, since_admission=since_admission
    )
    if batch > 0:
        total += cost.overhead_ms(batch, gamma)
    return total


def decode_steps_ms(
    cost: StepCost, *, batch: int, gamma: int, context_tokens: np.ndarray, since_admission=None
) -> np.ndarray:
    """K consecutive decode-only steps (ms each): ``context_tokens`` [K, batch] holds each step's KV lengths,
    ``since_admission`` [K] each step's steps since the last admission (None: long after). Uses the cost's own
    ``decode_steps_ms`` when it has one (same values, computed at once)."""
    own = getattr(cost, "decode_steps_ms", None)
    if own is not None:
        return own(batch=batch, gamma=gamma, context_tokens=context_tokens, since_admission=since_admission)
    since = [None] * len(context_tokens) if since_admission is None else [int(k) for k in since_admission]
    return np.array(
        [
            step_ms(
                cost,
                batch=batch,
                gamma=gamma,
                context_tokens=row,
                prefill_chunks=(),
                images=0,
                draft_prefill=False,
                since_admission=k,
            )
            for row, k in zip(context_tokens, since, strict=True)
        ]
    )


@dataclass(frozen=True)
class ConstantStepCost:
    """Hand-set linear step costs (ms), for tests and what-ifs.

    target pass = ``target_ms`` + ``target_ms_per_row`` · batch · rows + ``target_ms_per_context_token`` ·
    Σ context + ``prefill_ms_per_token`` · prefill tokens;
    draft = γ · (``draft_ms_per_pass`` + ``draft_ms_per_seq`` · batch) + ``draft_prefill_ms_per_token`` ·
    prefill tokens; encoder = ``encoder_ms_per_image`` · images;
    overhead = ``overhead_ms_per_step`` + ``overhead_ms_per_seq`` · batch when γ > 0, else
    ``target_only_overhead_ms``.
    """

    target_ms: float = 10.0
    target_ms_per_row: float = 0.0
    target_ms_per_context_token: float = 0.0
    prefill_ms_per_token: float = 0.0
    draft_ms_per_pass: float = 0.0
    draft_ms_per_seq: float = 0.0
    draft_prefill_ms_per_token: float = 0.0
    encoder_ms_per_image: float = 0.0
    overhead_ms_per_step: float = 0.0
    overhead_ms_per_seq: float = 0.0
    target_only_overhead_ms: float = 0.0
    image_tokens_per_image: int = 0

    def __post_init__(self) -> None:
        for key, value in self.__dict__.items():
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise SpecsimError(f"constant step cost.{key}: expected a number >= 0, got {value!r}")

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        prefill = sum(c[0] for c in prefill_chunks)
        if batch == 0 and prefill == 0:
            return 0.0
        return (
            self.target_ms
            + self.target_ms_per_row * batch * rows_per_seq
            + self.target_ms_per_context_token * float(np.sum(context_tokens[:batch]) if batch else 0.0)
            + self.prefill_ms_per_token * prefill
        )

    def draft_ms(self, batch, gamma, context_tokens, prefill_chunks=(), since_admission=None) -> float:
        decode = gamma * (self.draft_ms_per_pass + self.draft_ms_per_seq * batch) if batch else 0.0
        return decode + self.draft_prefill_ms_per_token * sum(c[0] for c in prefill_chunks)

    def encoder_ms(self, images) -> float:
        return self.encoder_ms_per_image * images

    def overhead_ms(self, batch, gamma) -> float:
        if gamma == 0:
            return self.target_only_overhead_ms
        return self.overhead_ms_per_step + self.overhead_ms_per_seq * batch
