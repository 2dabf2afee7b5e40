"""What the engine and a drafter exchange: the :class:`Request` in, the :class:`Proposal` out, and the
:class:`Drafter` protocol every drafting method implements.

Every method (:mod:`calibrate.drafting`) implements :class:`Drafter`, so
:func:`calibrate.run.engine.speculative_decode` never branches on it (after HF's ``CandidateGenerator``).
Per request: ``prefill(request)`` sets up the draft side and returns set-up ms by stage; ``propose(gamma, *,
temperature, generator[, stop_below])`` returns γ drafts with q_i ([γ, V]; None when greedy) and draft ms;
``accept(n_accepted, next_token)`` appends and rolls back. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class Request:
    """One prompt as the target sees it: ``input_ids`` [1, S] (S ≥ 1) plus extra prefill kwargs
    (e.g. ``pixel_values`` [n_images, 3, H, W] for a LLaVA-style VLM, whose ``input_ids`` then hold
    the expanded image tokens); ``text`` (with ``<image>`` placeholders) and ``images`` (PIL images
    or pixel tensors, placeholder order) are for drafting methods that build their own context from them.
    Build multimodal ones with :func:`calibrate.drafting.make_request`."""

    input_ids: torch.Tensor
    target_kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    images: tuple = ()
    prompt_id: str | None = None
    image_token_id: int | None = None


@dataclass(frozen=True)
class Proposal:
    """γ drafted tokens [γ] (long), their draft distributions q [γ, V] (None if greedy), model ms.

    For the cost model: ``step_ms`` per draft step; the first step fed ``first_rows`` tokens on a
    draft KV cache of ``context_tokens`` positions (padded columns for a batch of contexts).
    """

    tokens: torch.Tensor
    q_probs: torch.Tensor | None
    model_ms: float
    step_ms: tuple[float, ...] = ()
    context_tokens: int = 0
    first_rows: int = 1


@runtime_checkable
class Drafter(Protocol):
    """What the engine needs from a drafting method (see the module docstring for the contract)."""

    method: str
    draft_batch_size: int

    def prefill(self, request: Request) -> dict[str, float]: ...

    def propose(
        self,
        gamma: int,
        *,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        stop_below: float = 0.0,
    ) -> Proposal: ...

    def accept(self, n_accepted: int, next_token: int) -> None: ...
