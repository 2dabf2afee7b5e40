"""Exact greedy replay of an adaptive in-batch ensemble, block by block.

IbED (Lee et al. 2024) drafts argmax q, q = Σ_j w_j p_j; the adaptive one (after TABED) updates w after each
block from the members' hits h_j on its m = min(n + 1, γ) known target tokens:
w ← w · exp(η (h − mean h)), normalised, then w ← (1 − ε) w + ε w⁰. Matches so depend on γ: ``calibrate
acceptance`` stores an :class:`AdaptiveTrace` per prompt and :func:`adaptive_plan` re-runs the weights
block by block. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import numpy as np

from specsim.draft_shapes.block_plans import BlockPlan, plan_of_blocks, token_budget
from specsim.draft_shapes.policies import as_policy
from specsim.profile_format.adaptive_trace import AdaptiveTrace


def update_weights(
    w: np.ndarray, prior: np.ndarray, hits: np.ndarray, eta: float, floor: float
) -> np.ndarray:
    """The adaptive rule after one block: ``hits`` [k] the members' hit rates on its known positions."""
    w = w * np.exp(eta * (hits - hits.mean()))
    return (1 - floor) * w / w.sum() + floor * prior


def adaptive_plan(trace: AdaptiveTrace, gamma, max_new_tokens: int | None = None) -> BlockPlan:
    """The engine's blocks for one adaptive ensemble's greedy trace at a fixed γ or under a draft-length
    policy (:func:`specsim.draft_shapes.block_plans.greedy_plan`'s and
    :func:`specsim.draft_shapes.policies.replay_policy_blocks`' schedules), with the weights re-run block by
    block. A confidence policy stops drafting after a draft whose mixture's top probability (the best of the
    target's
    token and its rivals under the block's weights) is below its threshold, as the engine does."""
    policy = as_policy(gamma)
    n = len(trace)
    max_new = token_budget(n, max_new_tokens)
    target = np.asarray(trace.target_probs, dtype=float).reshape(n, -1)  # [N, k]
    k = len(trace.prior)
    width = max((len(r) for r in trace.rival_probs), default=0)
    rivals = np.zeros((n, max(width, 1), k))  # a pad of 0 never beats the target's token (ties: no match)
    for t, rs in enumerate(trace.rival_probs):
        if rs:
            rivals[t, : len(rs)] = rs
    hits = np.asarray(trace.member_match, dtype=float).reshape(n, k)
    prior = np.asarray(trace.prior, dtype=float)
    w, state = prior.copy(), policy.initial_state()
    blocks, t = [], 0
    while t < n:
        g = max(0, min(policy.next_gamma(state), max_new - t - 1))
        mine, best_rival = (
            target[t : t + g] @ w,
            (rivals[t : t + g] @ w).max(-1),
        )  # [≤ g] at this block's weights
        if policy.stop_below > 0 and g > 0:
            low = np.flatnonzero(np.maximum(mine, best_rival) < policy.stop_below)
            g = int(low[0]) + 1 if low.size else g
        wrong = np.flatnonzero(~(mine[:g] > best_rival[:g]))
        accepted = int(wrong[0]) if wrong.size else min(g, n - t)
        blocks.append((t, g, accepted))
        if g:
            known = min(
                accepted + 1, g, n - t
            )  # the accepted drafts and, if one was rejected, the correction
            w = update_weights(w, prior, hits[t : t + known].mean(0), trace.eta, trace.floor)
        state = policy.update(state, g, accepted)
        t += min(accepted + 1, n - t)
    return plan_of_blocks(blocks, n)


def adaptive_histogram(traces, gamma: int) -> np.ndarray:
    """h[k] = blocks that accepted exactly k drafts at a fixed γ, k = 0..γ, over adaptive traces replayed
    block by block (:func:`adaptive_plan`); the twin of :func:`specsim.acceptance.replay.replay_histogram`,
    with the last block of a prompt likewise counted as its tokens minus one."""
    g = int(gamma)
    hist = np.zeros(g + 1, dtype=np.int64)
    for trace in traces:
        emitted = adaptive_plan(trace, g).emitted.astype(np.int64)
        hist += np.bincount(np.clip(emitted - 1, 0, g), minlength=g + 1)
    return hist


def replay_at(traces, gamma: int) -> tuple[float, np.ndarray]:
    """(τ, accepted-length histogram h[k], k = 0..γ) of a method's greedy traces at a fixed γ, as the
    engine would record them: adaptive ensembles (every trace has ``adaptive``) re-run their weights block
    by block, other methods replay their ``match`` sequences (:mod:`specsim.acceptance.replay`)."""
    from specsim.acceptance.replay import replay_histogram, replay_traces_tau
    from specsim.acceptance.theory import tau_from_histogram

    adaptive = adaptive_traces(traces)
    if adaptive is not None:
        hist = adaptive_histogram(adaptive, gamma)
        return float(tau_from_histogram(hist)), hist
    return float(replay_traces_tau(traces, gamma)), replay_histogram(traces, gamma)


def adaptive_traces(traces) -> list[AdaptiveTrace] | None:
    """The traces' :class:`AdaptiveTrace` s when every trace has one (an adaptive ensemble's), else None."""
    adaptive = [t.adaptive for t in traces]
    return adaptive if adaptive and all(a is not None for a in adaptive) else None
