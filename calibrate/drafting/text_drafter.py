"""The plain drafter: a causal LM draft over the target's own token ids, with its own KV cache.

Implements :class:`calibrate.run.proposal.Drafter` for text pairs (method ``plain``); :func:`confidence` is
the top probability a confidence policy (:mod:`specsim.draft_shapes.policies`) stops drafting on.
"""

from __future__ import annotations

import torch

from calibrate.run.engine import crop_cache, forward, new_cache, pick, unwrap
from calibrate.run.proposal import Proposal, Request
from calibrate.run.timing import timed

PLAIN = "plain"  # the method code of this drafter (text pairs)


def confidence(logits: torch.Tensor, q: torch.Tensor | None) -> float:
    """Top probability of the distribution a draft came from: q, or softmax(logits) (T = 1) when greedy."""
    return float((q if q is not None else torch.softmax(logits.float(), -1)).max())


class TextDrafter:
    """A causal LM draft over the target's own token ids (same tokenizer), with its own KV cache.

    State: ``ids`` is the committed sequence (prompt + emitted); the cache holds ids[:cached]
    plus, during a block, the KV of drafts d_1..d_{γ-1}. ``propose`` feeds ids[cached:] (the whole
    prompt at first, then 1 token, or 2 after a fully accepted block whose last draft was never fed)
    and then each draft.
    """

    draft_batch_size = 1

    def __init__(self, draft, *, device="cpu", method: str = PLAIN):
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
    def propose(
        self,
        gamma: int,
        *,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        stop_below: float = 0.0,
    ) -> Proposal:
        """γ autoregressive draft steps (fewer after a draft below ``stop_below``); the last draft is not
        fed (the target verifies it first)."""
        x = torch.tensor([self.ids[self.cached :]], dtype=torch.long, device=self.model.device)  # [1, m]
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
        return Proposal(
            tokens=torch.tensor(tokens, dtype=torch.long, device=self.model.device),
            q_probs=None if temperature == 0 else torch.stack(probs),
            model_ms=float(sum(steps)),
            step_ms=tuple(steps),
            context_tokens=context,
            first_rows=first_rows,
        )

    def accept(self, n_accepted: int, next_token: int) -> None:
        """Commit drafts[:n] + next_token; keep the KV of committed drafts only."""
        # cache length after propose: committed ids + drafts d_1..d_{γ-1} (unchanged if none proposed)
        fed = len(self.ids) + len(self._drafts) - 1 if self._drafts else self.cached
        self.ids.extend(self._drafts[:n_accepted])
        self.ids.append(int(next_token))
        self.cached = min(fed, len(self.ids) - 1)
        crop_cache(self.cache, self.cached)
        self._drafts = []
