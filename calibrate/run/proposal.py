"""What the engine and a drafter exchange: the :class:`Request` in, the :class:`Proposal` out, and the
:class:`Drafter` protocol every drafting method implements.

Every drafting method (plain draft LM; for VLM targets: multimodal, text-only, caption, pooled,
ensembles, adaptive — IbED; :mod:`calibrate.drafting`) implements :class:`Drafter`, so
:func:`calibrate.run.engine.speculative_decode` never branches on the method (after HF's
``CandidateGenerator``: ``get_candidates`` / ``update_candidate_strategy``). The protocol, per request:

1. ``prefill(request) -> dict[str, float]``: set up the draft side for a new request (own KV cache,
   own context: e.g. image tokens dropped, a caption inserted, pooled image features) and return
   the ms of each set-up stage, keys ending in ``_ms`` (``draft_vision_ms``, ``caption_ms``, ...).
   The draft's own prompt is not run here: like the target's, it is fused with the first forward
   (the first draft step runs over the whole draft prompt), which saves a pass over the weights.
2. ``propose(gamma, *, temperature, generator[, stop_below]) -> Proposal``: γ draft tokens continuing
   the committed sequence, with q_i (the draft distribution each was sampled from, [γ, V] in the
   target's vocabulary; ``None`` when ``temperature == 0``) and the ms spent in draft model
   forwards (the rest of the call counts as overhead). With ``stop_below`` > 0 (a confidence
   policy, :mod:`specsim.draft_shapes.policies`) drafting stops after the first draft whose distribution's top
   probability (softmax at T = 1 when greedy) is below it, so fewer than γ may come back.
3. ``accept(n_accepted, next_token)``: the target kept the first ``n_accepted`` drafts and then
   emitted ``next_token``; append both to the draft's context and roll back anything past them
   (KV of rejected drafts). After this call the drafter is ready for the next ``propose``.

A drafter owns its state between ``prefill`` and the end of a request; one drafter serves one
request at a time. ``method`` names the drafting method as stored in profiles; ``draft_batch_size``
is the batch of draft contexts one draft step runs (ensemble members), used for costs.
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
