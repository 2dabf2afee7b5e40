"""The drafting protocol the engine talks to, and the plain text drafter.

Every drafting method (plain draft LM; for VLM targets: multimodal, text-only, caption, pooled,
ensembles, adaptive — IbED) implements :class:`Drafter`, so :func:`calibrate.engine.speculative_decode`
never branches on the method (after HF's ``CandidateGenerator``: ``get_candidates`` /
``update_candidate_strategy``). The protocol, per request:

1. ``prefill(request) -> dict[str, float]``: set up the draft side for a new request (own KV cache,
   own context: e.g. image tokens dropped, a caption inserted, pooled image features) and return
   the ms of each set-up stage, keys ending in ``_ms`` (``draft_vision_ms``, ``caption_ms``, ...).
   The draft's own prompt is not run here: like the target's, it is fused with the first forward
   (the first draft step runs over the whole draft prompt), which saves a pass over the weights.
2. ``propose(gamma, *, temperature, generator[, stop_below]) -> Proposal``: γ draft tokens continuing
   the committed sequence, with q_i (the draft distribution each was sampled from, [γ, V] in the
   target's vocabulary; ``None`` when ``temperature == 0``) and the ms spent in draft model
   forwards (the rest of the call counts as overhead). With ``stop_below`` > 0 (a confidence
   policy, :mod:`specsim.policies`) drafting stops after the first draft whose distribution's top
   probability (softmax at T = 1 when greedy) is below it, so fewer than γ may come back.
3. ``accept(n_accepted, next_token)``: the target kept the first ``n_accepted`` drafts and then
   emitted ``next_token``; append both to the draft's context and roll back anything past them
   (KV of rejected drafts). After this call the drafter is ready for the next ``propose``.

A drafter owns its state between ``prefill`` and the end of a request; one drafter serves one
request at a time. ``method`` names the drafting method as stored in profiles; ``draft_batch_size``
is the batch of draft contexts one draft step runs (ensemble members), used for costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from calibrate.engine import Request, crop_cache, forward, new_cache, pick, unwrap
from calibrate.timing import timed


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


def confidence(logits: torch.Tensor, q: torch.Tensor | None) -> float:
    """Top probability of the distribution a draft came from: q, or softmax(logits) (T = 1) when greedy."""
    return float((q if q is not None else torch.softmax(logits.float(), -1)).max())


@runtime_checkable
class Drafter(Protocol):
    """What the engine needs from a drafting method (see the module docstring for the contract)."""

    method: str
    draft_batch_size: int

    def prefill(self, request: Request) -> dict[str, float]: ...

    def propose(self, gamma: int, *, temperature: float = 0.0,
                generator: torch.Generator | None = None, stop_below: float = 0.0) -> Proposal: ...

    def accept(self, n_accepted: int, next_token: int) -> None: ...


class TextDrafter:
    """A causal LM draft over the target's own token ids (same tokenizer), with its own KV cache.

    State: ``ids`` is the committed sequence (prompt + emitted); the cache holds ids[:cached]
    plus, during a block, the KV of drafts d_1..d_{γ-1}. ``propose`` feeds ids[cached:] (the whole
    prompt at first, then 1 token, or 2 after a fully accepted block whose last draft was never fed)
    and then each draft.
    """

    draft_batch_size = 1

    def __init__(self, draft, *, device="cpu", method: str = "plain"):
        self.model = unwrap(draft)
        self.device = device
        self.method = method
        self.ids: list[int] = []
        self.cache = None
        self.cached = 0
        self._drafts: list[int] = []

    def prefill(self, request: Request) -> dict[str, float]:
        """A new request: the prompt is committed, nothing is cached (the first step runs over it all)."""
        self.start_from_cache(request.input_ids[0].tolist(), new_cache(), 0)
        return {}

    def start_from_cache(self, ids: list[int], cache, cached: int) -> None:
        """Continue after ``ids`` with a KV cache holding ``ids[:cached]`` (latency calibration starts here
        on a cache of random keys/values, skipping the prompt's forward)."""
        self.ids, self.cache, self.cached, self._drafts = list(ids), cache, int(cached), []

    @torch.inference_mode()
    def propose(self, gamma: int, *, temperature: float = 0.0,
                generator: torch.Generator | None = None, stop_below: float = 0.0) -> Proposal:
        """γ autoregressive draft steps (fewer after a draft below ``stop_below``); the last draft is not
        fed (the target verifies it first)."""
        x = torch.tensor([self.ids[self.cached:]], dtype=torch.long, device=self.model.device)  # [1, m]
        context, first_rows = self.cached, x.shape[1]
        tokens, probs, steps = [], [], []
        for i in range(gamma):
            with timed(self.device) as t:
                logits = forward(self.model, x, self.cache, last_only=True)  # [1, V]
            steps.append(t.ms)
            tok, q = pick(logits[-1], temperature, generator)
            tokens.append(tok)
            probs.append(q)
            if i + 1 == gamma or (stop_below and confidence(logits[-1], q) < stop_below):
                break
            x = torch.tensor([[tok]], dtype=torch.long, device=self.model.device)
        self._drafts = tokens
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long, device=self.model.device),
                        q_probs=None if temperature == 0 else torch.stack(probs), model_ms=float(sum(steps)),
                        step_ms=tuple(steps), context_tokens=context, first_rows=first_rows)

    def accept(self, n_accepted: int, next_token: int) -> None:
        """Commit drafts[:n] + next_token; keep the KV of committed drafts only."""
        # cache length after propose: committed ids + drafts d_1..d_{γ-1} (unchanged if none proposed)
        fed = len(self.ids) + len(self._drafts) - 1 if self._drafts else self.cached
        self.ids.extend(self._drafts[:n_accepted])
        self.ids.append(int(next_token))
        self.cached = min(fed, len(self.ids) - 1)
        crop_cache(self.cache, self.cached)
        self._drafts = []
