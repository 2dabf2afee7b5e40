"""A trace's fields from the two models' next-token distributions at the target's tokens (IbED, Lee et al.
2024, §3; Leviathan et al. 2023, §3.5): ``match`` and β (:func:`trace_from_probs`), the draft's top-k
ranks and probabilities (:func:`top_k_fields`), and an adaptive ensemble's per-member features
(:func:`member_features`, :func:`adaptive_trace`). The forwards that produce the distributions are in
:mod:`calibrate.measure.acceptance_traces`.
"""

from __future__ import annotations

import numpy as np
import torch

from specsim.errors import SpecsimError
from specsim.profile_format import Trace
from specsim.profile_format.adaptive_trace import RIVALS_PER_MEMBER, AdaptiveTrace

BETA_DECIMALS = 6  # JSON size; β is a probability, 1e-6 is far below any effect on τ


def top_k_fields(q: torch.Tensor, output: torch.Tensor, top_k: int) -> dict:
    """{"draft_rank", "draft_top_probs"} of a trace from the draft's greedy distribution q [N, V] and the
    target's tokens [N]: rank = #tokens more likely than y_t, plus equally likely ones with a smaller id
    (so rank 0 is exactly torch.argmax); the K largest probabilities, rounded to 1e-6."""
    if top_k < 1:
        return {}
    y = output.to(q.device)[:, None]  # [N, 1]
    qy = q.gather(1, y)
    ids = torch.arange(q.shape[1], device=q.device)[None, :]
    rank = (q > qy).sum(1) + ((q == qy) & (ids < y)).sum(1)  # [N]
    top = torch.topk(q, min(top_k, q.shape[1]), dim=-1).values.double().cpu().numpy()  # [N, K]
    return {
        "draft_rank": tuple(int(r) for r in rank.tolist()),
        "draft_top_probs": tuple(tuple(float(p) for p in row) for row in np.round(top, BETA_DECIMALS)),
    }


def trace_from_probs(
    p: torch.Tensor,
    q: torch.Tensor,
    output: torch.Tensor,
    *,
    top_k_probs: torch.Tensor,
    top_k: int = 0,
    prompt_id: str | None = None,
    tokens=None,
) -> Trace:
    """match = [argmax q_t == y_t] and β_t = Σ_x min(p_t(x), q_t(x)) from target/draft distributions
    [N, V] and the target's tokens y [N]; with ``top_k`` > 0 also each y_t's rank in ``top_k_probs``
    (the draft's greedy distribution, T = 1) and its K largest probabilities."""
    if p.shape != q.shape:
        raise SpecsimError(
            f"vocabulary mismatch: target {tuple(p.shape)} vs draft {tuple(q.shape)} "
            "(speculative decoding needs one shared vocabulary)"
        )
    match = (q.argmax(-1) == output).to(torch.int64).tolist()
    beta = torch.minimum(p, q).sum(-1).clamp(0.0, 1.0).double().numpy()
    return Trace(
        match=tuple(int(m) for m in match),
        prompt_id=prompt_id,
        beta=tuple(float(b) for b in np.round(beta, BETA_DECIMALS)),
        tokens=tokens,
        **top_k_fields(top_k_probs, output, top_k),
    )


def trace_from_logits(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    output: torch.Tensor,
    temperature: float = 1.0,
    prompt_id: str | None = None,
    top_k: int = 0,
) -> Trace:
    """:func:`trace_from_probs` from target/draft logits [N, V] at ``temperature``."""
    return trace_from_probs(
        torch.softmax(target_logits / temperature, -1),
        torch.softmax(draft_logits / temperature, -1),
        output,
        prompt_id=prompt_id,
        top_k=top_k,
        top_k_probs=torch.softmax(draft_logits.float(), -1),
    )


def member_features(p: torch.Tensor, token: int) -> tuple:
    """What the adaptive replay needs at one position from the members' distributions p [k, V] at T = 1:
    (p_j(y), p_j(x) for the rivals x ≠ y in the union of the members' top-K, [argmax p_j = y])."""
    p = p.double().cpu()
    rivals = sorted(
        set(p.topk(min(RIVALS_PER_MEMBER, p.shape[1]), dim=-1).indices.flatten().tolist()) - {token}
    )
    r = lambda x: tuple(round(float(v), BETA_DECIMALS) for v in x)  # noqa: E731
    return (
        r(p[:, token]),
        tuple(r(p[:, x]) for x in rivals),
        tuple(int(i == token) for i in p.argmax(-1).tolist()),
    )


def adaptive_trace(drafter, members: list, tokens) -> AdaptiveTrace:
    """The :class:`specsim.draft_shapes.adaptive.AdaptiveTrace` of an adaptive ensemble from its per-position
    features."""
    prior = drafter.prior.double()
    return AdaptiveTrace(
        prior=tuple(float(w) for w in prior / prior.sum()),
        target_probs=tuple(m[0] for m in members),
        rival_probs=tuple(m[1] for m in members),
        member_match=tuple(m[2] for m in members),
        eta=drafter.eta,
        floor=drafter.floor,
    )
