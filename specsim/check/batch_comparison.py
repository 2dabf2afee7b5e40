"""A batched check row: the batched engine's measured decode-phase speedup over batched target-only decoding
against the batched walk's prediction (:mod:`specsim.predict.batch_pricing`), B requests per batch.

Measured and predicted use one definition: ms per token after each side's first pass, every request's
tokens counted, summed over the batches of a scenario; speedup = target-only ms/token ÷ SD ms/token. The
half-width is :func:`specsim.check.comparison.ratio_halfwidth` over batches × rounds (rounds paired).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.check.comparison import ratio_halfwidth
from specsim.errors import SpecsimError
from specsim.predict.batch_pricing import price_batches
from specsim.predict.pricing import RequestSpec
from specsim.profile_format import CheckRow, MethodAcceptance, Profile


@dataclass(frozen=True)
class BatchMeasured:
    """The measured side of one batched row."""

    speedup: float
    halfwidth: float
    tau: float
    terms_ms_per_block: dict
    rounds: int
    batches: int


def measure_batches(base: dict, sd: dict, keys: list) -> BatchMeasured:
    """Reduce the runs of ``keys`` (batches; per batch one target-only and one SD run per round, objects
    with ``ms``, ``tokens``, and for SD ``draft_ms``, ``verify_ms``, ``overhead_ms``, ``blocks``,
    ``request_blocks``) to the measured speedup, its half-width, τ and ms per block by term."""
    if not keys:
        raise SpecsimError("check --batch: no batches to measure")
    rounds = min(min(len(sd[k]), len(base[k])) for k in keys)
    if rounds < 1:
        raise SpecsimError("check --batch: no rounds to measure")
    b = np.array([[r.ms for r in base[k][:rounds]] for k in keys])
    s = np.array([[r.ms for r in sd[k][:rounds]] for k in keys])
    b_tok = sum(base[k][0].tokens for k in keys)
    s_tok = sum(sd[k][0].tokens for k in keys)
    blocks = sum(sd[k][0].blocks for k in keys)
    terms = {
        t: float(sum(np.mean([getattr(r, f"{t}_ms") for r in sd[k][:rounds]]) for k in keys) / max(blocks, 1))
        for t in ("draft", "verify", "overhead")
    }
    steps = sum(base[k][0].blocks for k in keys)
    terms["target_step"] = float(b.mean(1).sum() / max(steps, 1))
    return BatchMeasured(
        speedup=float((b.mean(1).sum() / b_tok) / (s.mean(1).sum() / s_tok)),
        halfwidth=ratio_halfwidth(b, s),
        tau=s_tok / max(sum(sd[k][0].request_blocks for k in keys), 1),
        terms_ms_per_block=terms,
        rounds=rounds,
        batches=len(keys),
    )


def batch_specs(entry: MethodAcceptance, prompt_ids, prompt_tokens, draft_tokens: int, max_new_tokens: int):
    """The :class:`RequestSpec` of one measured batch: each prompt's trace from ``entry`` (by prompt id), its
    prompt tokens as the engine counted them, the batch's longest draft prompt."""
    traces = {t.prompt_id: t for t in entry.traces if t.match is not None}
    missing = [p for p in prompt_ids if p not in traces]
    if missing:
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: no greedy trace for prompt "
            f"{missing[0]!r} (calibrate acceptance on the same prompts)"
        )
    return [
        RequestSpec(
            float(p), float(draft_tokens), entry.images_per_prompt, traces[i], max_new_tokens, prompt_id=i
        )
        for i, p in zip(prompt_ids, prompt_tokens)
    ]


def batch_check_row(
    profile: Profile,
    entry: MethodAcceptance,
    gamma: int,
    batch: int,
    batches: list[list[RequestSpec]],
    measured: BatchMeasured,
    new_tokens: int,
) -> CheckRow:
    """One batched check row (module docstring)."""
    p = price_batches(profile, entry, gamma, batches)
    pred_terms = p.terms_ms_per_block()
    notes = "extrapolated: a cache width outside the batched grid" if p.extrapolated else ""
    return CheckRow(
        method=entry.method,
        scenario=entry.scenario,
        gamma=gamma,
        tau_predicted=max(p.tau, 1.0),
        tau_measured=max(measured.tau, 1.0),
        speedup_predicted=p.decode_speedup,
        speedup_measured=measured.speedup,
        target_ms_per_token=p.target_ms_per_token,
        sd_ms_per_token=p.sd_ms_per_token,
        prompts=sum(len(b) for b in batches),
        new_tokens=new_tokens,
        notes=notes,
        speedup_halfwidth=measured.halfwidth if np.isfinite(measured.halfwidth) else None,
        rounds=measured.rounds,
        terms_ms_per_block={
            t: {"predicted": pred_terms[t], "measured": measured.terms_ms_per_block[t]} for t in pred_terms
        },
        batch=batch,
    )
