"""Predictions from a cost model (profile schema 2): walk each request through its contexts.

Which requests: each greedy trace of the entry (its exact block schedule, :func:`specsim.walk_drafts.draft_plan`,
from its own prompt length), or, when only τ is known or another length N is asked for, one request of N
tokens in blocks of τ (:func:`specsim.walk.expected_plan`) from the entry's prompt length. The decode
phase prices every block as if the prompt were cached (so speedup = τ / (γ·c + v + o) holds with the
effective c, v and o = overhead/Tp below); a request's end-to-end latency prices the first pass fused with
the prompt, as the engine runs it, and adds vision and the draft's set-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.profile import MethodAcceptance, Profile
from specsim.theory import alpha_from_tau
from specsim.walk import (
    BlockPlan,
    RequestCost,
    expected_plan,
    target_request_cost,
)
from specsim.walk_drafts import draft_plan

# Output length of a request when neither traces nor the caller say (the zoo and reference workloads use 64).
DEFAULT_NEW_TOKENS = 64


@dataclass(frozen=True)
class Walk:
    """One request to price: its block plan (a :class:`specsim.walk_drafts.TreePlan` for a token tree) and
    the target's and draft's prompt tokens."""

    plan: BlockPlan
    prompt_tokens: float
    draft_prompt_tokens: float


def walks(entry: MethodAcceptance, gamma: int, tau: float, *, prompt_tokens=None, new_tokens=None) -> list[Walk]:
    """The requests a prediction walks (see the module docstring); ``prompt_tokens`` overrides the entry's."""
    traces = [t for t in entry.traces if t.match is not None]
    if traces and new_tokens is None and prompt_tokens is None:
        out = []
        for t in traces:
            p = t.prompt_tokens or entry.target_prompt_tokens
            if p is None:
                raise SpecsimError(f"method {entry.method!r}: prompt length unknown (pass --context-tokens)")
            out.append(Walk(draft_plan(gamma, t), p, t.draft_prompt_tokens or entry.draft_prompt_tokens or p))
        return out
    p = prompt_tokens if prompt_tokens is not None else (entry.target_prompt_tokens or _mean(traces, "prompt_tokens"))
    if p is None:
        raise SpecsimError(f"method {entry.method!r} in scenario {entry.scenario!r}: the prompt length is unknown "
                           "(pass --context-tokens N to walk from an N-token prompt)")
    n = new_tokens or (int(round(np.mean([len(t.match) for t in traces]))) if traces else DEFAULT_NEW_TOKENS)
    if traces:
        from specsim.replay import replay_survival

        full = float(replay_survival(traces, gamma)[-1])
    else:
        full = float(alpha_from_tau(tau, gamma)) ** gamma if tau < gamma + 1 else 1.0
    d = (entry.draft_prompt_tokens or _mean(traces, "draft_prompt_tokens") or p) if prompt_tokens is None else p
    return [Walk(expected_plan(tau, gamma, n, full), p, d)]


def _mean(traces, name: str) -> float | None:
    """The mean of a per-trace prompt length, when every trace records it."""
    values = [getattr(t, name) for t in traces]
    return float(np.mean(values)) if values and all(v is not None for v in values) else None


@dataclass(frozen=True)
class WalkCost:
    """Summed costs of the walked requests: SD and target-only, decode phase (``fused=False``) or whole."""

    sd: RequestCost
    base: RequestCost
    drafts: float

    @property
    def target_ms_per_token(self) -> float:
        return self.base.total_ms / self.base.tokens

    def ratios(self) -> dict[str, float]:
        """Effective c, v, o (per block, in units of the target's ms per token) and γ·c + v + o."""
        tp, blocks = self.target_ms_per_token, self.sd.blocks
        return {"c": self.sd.draft_ms / max(self.drafts, 1e-12) / tp, "v": self.sd.verify_ms / blocks / tp,
                "o": self.sd.overhead_ms / blocks / tp, "gamma_c_plus_v": self.sd.total_ms / blocks / tp}


def walk_cost(profile: Profile, entry: MethodAcceptance, requests: list[Walk], *, fused: bool) -> WalkCost:
    """Price every walked request with the profile's cost model (chain and policy plans, or token-tree
    plans of :mod:`specsim.walk_drafts`)."""
    from specsim.walk_drafts import plan_cost

    cost = profile.latency.cost_model
    sd = base = None
    drafts = 0.0
    for w in requests:
        s = plan_cost(cost, w.plan, target_prompt_tokens=w.prompt_tokens,
                      draft_prompt_tokens=w.draft_prompt_tokens, batch=entry.draft_batch_size, fused=fused,
                      adaptive=entry.adaptive)
        b = target_request_cost(cost, prompt_tokens=w.prompt_tokens, new_tokens=w.plan.tokens, fused=fused)
        sd, base = (s, b) if sd is None else (sd + s, base + b)
        drafts += w.plan.draft_tokens
    return WalkCost(sd=sd, base=base, drafts=drafts)
