"""In-batch ensembles of draft contexts (IbED): every multimodal method (M, T, C, F, Pn, any subset such as MT
or MTCP, adaptive) is an :class:`EnsembleDrafter` behind :class:`calibrate.run.proposal.Drafter`.

The members' contexts (:mod:`calibrate.drafting.contexts`) run as one left-padded batch with one KV cache of
batch k; each step drafts from q = Σ_j w_j softmax(z_j / T) (argmax, T = 1, when greedy; IbED Algorithm 1)
and appends the token to every row, so rollback is one crop of the shared cache. Codes:
:mod:`calibrate.drafting.methods`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import torch

from calibrate.drafting.contexts import DraftContext
from calibrate.run.batch_engine import left_pad
from calibrate.run.engine import crop_cache, new_cache, unwrap, with_cache
from calibrate.run.proposal import Proposal, Request
from calibrate.run.timing import timed
from specsim.draft_shapes.adaptive import update_weights
from specsim.errors import SpecsimError
from specsim.profile_format import ADAPTIVE_PREFIX
from specsim.profile_format.adaptive_trace import ETA, FLOOR


class EnsembleDrafter:
    """In-batch ensemble of draft contexts over one draft model (k = 1 is a single method).

    State: ``mask`` [k, cols] is the attention mask of the cache columns (0 on left pads); ``pos`` [k]
    the position id of each row's next fed token; ``tail`` [k, m] committed tokens not yet fed (m = 1,
    or 2 after a fully accepted block; the padded prompt embeddings wait in ``_prompt`` until the first
    step, which feeds them all); ``member_probs`` [γ, k, V] the members' distributions at the
    last ``propose`` (T = 1 when greedy), kept for adaptive weights and tests.
    """

    def __init__(self, draft, members, *, weights=None, device="cpu", method: str | None = None):
        self.model = unwrap(draft)
        self.members = list(members)
        if not self.members:
            raise SpecsimError("ensemble: expected at least one member, got none")
        w = (
            torch.ones(len(self.members), dtype=torch.float64)
            if weights is None
            else torch.tensor([float(x) for x in weights], dtype=torch.float64)
        )
        if w.numel() != len(self.members) or bool((w < 0).any()) or not float(w.sum()) > 0:
            raise SpecsimError(
                f"weights: expected {len(self.members)} non-negative numbers with a positive sum, "
                f"got {list(weights)}"
            )
        self.prior = w / w.sum()
        self.weights = self.prior.clone()
        self.device = device
        self.method = method or "".join(m.code for m in self.members)
        self.draft_batch_size = len(self.members)
        self.context_tokens: list[int] = []
        self.member_probs: torch.Tensor | None = None

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, request: Request) -> dict[str, float]:
        """Build every member's context and left-pad them into one batch; the batch is fed by the first
        draft step (the prefill is fused with it). Returns set-up ms: ``draft_vision_ms`` and
        ``caption_ms`` for members that need them."""
        self.weights = self.prior.clone()
        shared: dict = {}
        stages: dict[str, float] = {}
        contexts: list[DraftContext] = []
        for member in self.members:
            ctx = member.build(request, self.model, shared, self.device)
            for k, v in ctx.stages_ms.items():
                stages[k] = stages.get(k, 0.0) + v
            contexts.append(ctx)
        self.context_tokens = [c.embeds.shape[0] for c in contexts]
        embeds, mask = left_pad([c.embeds for c in contexts])  # [k, L, H], [k, L]
        self.start_from_cache(new_cache(), mask[:, :0], None)
        self._prompt = (embeds, mask)
        return stages

    def start_from_cache(self, cache, mask: torch.Tensor, tail: torch.Tensor | None) -> None:
        """Continue with a KV cache whose columns have attention ``mask`` [k, cols] (0 on left pads) and the
        committed tokens ``tail`` [k, m] not yet fed (latency calibration starts here on a cache of random
        keys/values)."""
        self.cache, self.mask, self.tail = cache, mask, tail
        self.pos = mask.sum(1)  # [k]
        self._prompt = None
        self._drafts: list[int] | None = None

    # ------------------------------------------------------------------ draft phase
    def step(self, x: torch.Tensor) -> torch.Tensor:
        """Feed x [k, m] to every row (one batched draft forward); logits [k, V] of the last position."""
        k, m = x.shape
        self.mask = torch.cat(
            [self.mask, torch.ones(k, m, dtype=self.mask.dtype, device=self.mask.device)], 1
        )
        pos = self.pos[:, None] + torch.arange(m, device=self.pos.device)  # [k, m]
        # One row never has pads: without a mask HF takes its cheaper causal-only path (as plain drafting
        # does).
        mask = self.mask if k > 1 else None
        out = self.model(
            input_ids=x,
            attention_mask=mask,
            position_ids=pos,
            **with_cache(self.model, self.cache),
            use_cache=True,
            logits_to_keep=1,
        )
        self.pos = self.pos + m
        return out.logits[:, -1].float()

    def _step_prompt(self) -> torch.Tensor:
        """The first step of a request: the padded prompt embeddings [k, L, H]; logits [k, V]."""
        embeds, mask = self._prompt
        self._prompt = None
        self.mask = mask
        out = self.model(
            inputs_embeds=embeds,
            attention_mask=mask if mask.shape[0] > 1 else None,
            position_ids=_positions(mask),
            **with_cache(self.model, self.cache),
            use_cache=True,
            logits_to_keep=1,
        )
        self.pos = mask.sum(1)
        return out.logits[:, -1].float()

    @torch.inference_mode()
    def propose(
        self,
        gamma: int,
        *,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        stop_below: float = 0.0,
    ) -> Proposal:
        """γ steps of the batch (fewer after a draft whose mixture's top probability is below ``stop_below``);
        each token comes from the weighted mixture and is appended to every row."""
        k = len(self.members)
        first = self._prompt is not None
        x = self.tail
        self._cols0, self._pos0 = self.mask.shape[1], self.pos.clone()
        self._m = self._prompt[1].shape[1] if first else x.shape[1]
        tokens, mixed, members, steps = [], [], [], []
        w = self.weights.to(torch.float32).to(self.model.device)[:, None]  # [k, 1]
        for i in range(gamma):
            with timed(self.device) as t:
                logits = self._step_prompt() if first and i == 0 else self.step(x)  # [k, V]
            steps.append(t.ms)
            p = torch.softmax(logits / (temperature if temperature > 0 else 1.0), -1)  # [k, V]
            q = (w * p).sum(0)  # [V]
            tok = (
                int(torch.argmax(q))
                if temperature == 0
                else int(torch.multinomial(q, 1, generator=generator))
            )
            tokens.append(tok)
            mixed.append(q)
            members.append(p)
            if i + 1 == gamma or (stop_below and float(q.max()) < stop_below):
                break
            x = torch.full((k, 1), tok, dtype=torch.long, device=self.model.device)
        self._drafts = tokens
        self.member_probs = torch.stack(members)  # [γ, k, V]
        return Proposal(
            tokens=torch.tensor(tokens, dtype=torch.long, device=self.model.device),
            q_probs=None if temperature == 0 else torch.stack(mixed),
            model_ms=float(sum(steps)),
            step_ms=tuple(steps),
            context_tokens=self._cols0,
            first_rows=self._m,
        )

    # ------------------------------------------------------------------ accept / rollback
    def accept(self, n_accepted: int, next_token: int) -> None:
        """Keep the KV of the tail and of the accepted drafts that were fed; the rest is cropped."""
        k = len(self.members)
        nxt = torch.full((k, 1), int(next_token), dtype=torch.long, device=self.model.device)
        if self._drafts is None:  # no propose since the last accept (γ capped to 0)
            self.tail = nxt if self.tail is None else torch.cat([self.tail, nxt], 1)
            return
        g = len(self._drafts)
        kept = self._m + min(n_accepted, g - 1)  # fed positions that are now committed
        crop_cache(self.cache, self._cols0 + kept)
        self.mask = self.mask[:, : self._cols0 + kept]
        self.pos = self._pos0 + kept if self._cols0 else self.mask.sum(1)
        if n_accepted == g:  # the last draft was never fed
            last = torch.full((k, 1), self._drafts[-1], dtype=torch.long, device=self.model.device)
            self.tail = torch.cat([last, nxt], 1)
        else:
            self.tail = nxt
        self._drafts = None


class AdaptiveEnsembleDrafter(EnsembleDrafter):
    """Ensemble whose weights follow the target's verdicts within a request (after TABED, arXiv 2601.20357).

    Rule, after each block with m = min(n + 1, γ) positions whose target token y_i is known (the n
    accepted drafts and, if n < γ, the target's correction): h_j = (1/m) Σ_i [argmax q_{j,i} = y_i],
    w_j ← w_j · exp(η (h_j − mean_j h_j)), normalised, then w ← (1 − ε) w + ε w⁰ (w⁰ the prior), so
    weights stay positive and sum to 1. Only the drafts change: verification uses the q actually drafted
    from, so the output distribution is the target's.
    """

    def __init__(self, draft, members, *, weights=None, eta: float = ETA, floor: float = FLOOR, **kw):
        super().__init__(draft, members, weights=weights, **kw)
        self.eta, self.floor = float(eta), float(floor)
        self.method = kw.get("method") or ADAPTIVE_PREFIX + "".join(m.code for m in self.members)

    def accept(self, n_accepted: int, next_token: int) -> None:
        if self._drafts is not None and self.member_probs is not None:
            self.weights = adaptive_weights(
                self.weights,
                self.prior,
                self.member_probs,
                self._drafts,
                n_accepted,
                next_token,
                eta=self.eta,
                floor=self.floor,
            )
        super().accept(n_accepted, next_token)


def adaptive_weights(
    weights: torch.Tensor,
    prior: torch.Tensor,
    member_probs: torch.Tensor,
    drafts: list[int],
    n_accepted: int,
    next_token: int,
    *,
    eta: float = ETA,
    floor: float = FLOOR,
) -> torch.Tensor:
    """The adaptive ensemble's weights [k] after one block (the rule in :class:`AdaptiveEnsembleDrafter`):
    ``member_probs`` [γ, k, V] of the block's drafts, of which ``n_accepted`` were accepted before the
    target's ``next_token``. ``calibrate latency`` times this call alone (what an adaptive block adds)."""
    g = len(drafts)
    y = list(drafts[:n_accepted]) + ([int(next_token)] if n_accepted < g else [])
    top = member_probs[: len(y)].argmax(-1)  # [m, k]
    hits = (top == torch.tensor(y, device=top.device)[:, None]).double().mean(0).cpu()  # [k]
    return torch.from_numpy(update_weights(weights.numpy(), prior.numpy(), hits.numpy(), eta, floor))


# --------------------------------------------------------------------------- helpers
def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids [k, L]: 0 at each row's first real token (pads get 0; they are masked anyway)."""
    return (mask.cumsum(1) - 1).clamp(min=0)
