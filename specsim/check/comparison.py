"""Predicted vs measured speculative decoding (``specsim check``): one :class:`CheckRow` per method × scenario
× γ (or token tree, or draft-length policy).

Measured: engine runs reduced to :class:`RequestRun` (ms by term); speedups *request* (target-only ms / SD
ms, all of it) and *decode phase* (ms per token after the first pass, the τ / (γ·c + v) convention), each
with a 95% half-width over rounds (:func:`ratio_halfwidth`). Predicted: :func:`specsim.predict.pricing.price`
on the same prompts; textbook: Leviathan et al. 2023's τ / (γ·c + 1). Relative error = (predicted −
measured) / measured. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.draft_shapes.draft_plans import Draft, draft_gamma, draft_label
from specsim.errors import SpecsimError
from specsim.predict.prediction import reference_tau, textbook_speedup
from specsim.predict.pricing import TERMS, RequestSpec, price
from specsim.profile_format import CheckRow, MethodAcceptance, Profile

# The speedup's denominator has a term too: a target-only step (its block is one token), ms per step.
TARGET_TERM = "target_step"
# An engine that reports no split of its blocks (llama.cpp) is checked on the whole block, ms per block.
BLOCK_TERM = "block"


@dataclass(frozen=True)
class RequestRun:
    """One measured request reduced to numbers: ``setup_ms`` (vision, draft vision, captions), the first
    block or step (``first_ms``, which carries the prompt, emitting ``first_tokens``), and the later blocks'
    draft, verify and overhead ms."""

    prompt_id: str
    setup_ms: float
    first_ms: float
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    tokens: int
    first_tokens: int
    blocks: int

    @property
    def decode_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.overhead_ms

    @property
    def total_ms(self) -> float:
        return self.setup_ms + self.first_ms + self.decode_ms


@dataclass(frozen=True)
class PromptSpec:
    """Where one prompt's walk starts: target and draft prompt tokens, images, the run's max new tokens."""

    prompt_id: str
    prompt_tokens: int
    draft_prompt_tokens: int
    images: int
    max_new_tokens: int


def relative_error(predicted, measured):
    """(predicted − measured) / measured, vectorised."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    out = (p - m) / m
    return out if out.ndim else float(out)


def ratio_halfwidth(base: np.ndarray, sd: np.ndarray) -> float:
    """Relative 95% half-width of (Σ_p mean_r base[p, r]) / (Σ_p mean_r sd[p, r]), rounds r paired.

    Delta method on the per-prompt round means (Var(log B/D) ≈ Var B/B² + Var D/D² − 2 Cov/(B·D)), with a
    Student t of Σ_p (R − 1) degrees of freedom; inf with fewer than two rounds or nothing timed (a zero sum).
    """
    from scipy.stats import t as student_t

    base, sd = np.asarray(base, dtype=float), np.asarray(sd, dtype=float)
    rounds = base.shape[1]
    if rounds < 2:
        return float("inf")
    B, D = base.mean(1).sum(), sd.mean(1).sum()
    if not (B > 0 and D > 0):  # no decode phase was timed: nothing to bound (it divided by zero)
        return float("inf")
    var_b = base.var(1, ddof=1).sum() / rounds
    var_d = sd.var(1, ddof=1).sum() / rounds
    cov = (
        ((base - base.mean(1, keepdims=True)) * (sd - sd.mean(1, keepdims=True))).sum(1) / (rounds - 1)
    ).sum() / rounds
    rel_var = max(var_b / B**2 + var_d / D**2 - 2 * cov / (B * D), 0.0)
    df = base.shape[0] * (rounds - 1)
    return float(student_t.ppf(0.975, df) * np.sqrt(rel_var))


@dataclass(frozen=True)
class Measured:
    """The measured side of one row: speedups with relative half-widths, τ and ms per block by term."""

    tau: float
    request_speedup: float
    request_halfwidth: float
    decode_speedup: float
    decode_halfwidth: float
    terms_ms_per_block: dict = field(default_factory=dict)
    rounds: int = 1
    prompts: int = 0
    new_tokens: int = 0


def measure(base: dict[str, list[RequestRun]], sd: dict[str, list[RequestRun]]) -> Measured:
    """Reduce a row's runs (per prompt: one target-only run per round (the mean of its repeats), one SD run
    per round; the same rounds) to the measured speedups and terms."""
    ids = sorted(sd)
    if not ids:
        raise SpecsimError("check: no runs to measure")
    rounds = min(len(sd[p]) for p in ids)
    b = [base[p][:rounds] for p in ids]
    s = [sd[p][:rounds] for p in ids]
    grid = lambda runs, f: np.array([[f(r) for r in row] for row in runs])  # noqa: E731
    b_tot, s_tot = grid(b, lambda r: r.total_ms), grid(s, lambda r: r.total_ms)
    b_dec, s_dec = grid(b, lambda r: r.decode_ms), grid(s, lambda r: r.decode_ms)
    b_tok = sum(r[0].tokens - r[0].first_tokens for r in b)
    s_tok = sum(r[0].tokens - r[0].first_tokens for r in s)
    blocks = sum(r[0].blocks - 1 for r in s)
    tokens = sum(r[0].tokens for r in s)
    terms = {
        t: float(np.mean([[getattr(r, f"{t}_ms") for r in row] for row in s], axis=1).sum() / max(blocks, 1))
        for t in TERMS
    }
    terms[TARGET_TERM] = float(b_dec.mean(1).sum() / max(b_tok, 1))
    return Measured(
        tau=tokens / sum(r[0].blocks for r in s),
        request_speedup=float(b_tot.mean(1).sum() / s_tot.mean(1).sum()),
        request_halfwidth=ratio_halfwidth(b_tot, s_tot),
        decode_speedup=float((b_dec.mean(1).sum() / b_tok) / (s_dec.mean(1).sum() / s_tok)),
        decode_halfwidth=ratio_halfwidth(b_dec, s_dec),
        terms_ms_per_block=terms,
        rounds=rounds,
        prompts=len(ids),
        new_tokens=max(r[0].tokens for r in s),
    )


# --------------------------------------------------------------------------- predicted
def check_row(
    profile: Profile,
    entry: MethodAcceptance,
    gamma: Draft,
    prompts: list[PromptSpec],
    measured: Measured,
    *,
    reference_gamma: int | None = None,
) -> CheckRow:
    """Predicted (profile) vs ``measured`` at one γ, token tree or draft-length policy as a :class:`CheckRow`
    (a tree's row carries γ = its n nodes, a policy's its starting γ, and ``draft`` names them; the textbook
    has no trees or policies: None there). The prediction is :func:`specsim.predict.pricing.price` over
    the same prompts, the pricing ``specsim predict`` prints."""
    traces = {t.prompt_id: t for t in entry.traces if t.match is not None}
    missing = [p.prompt_id for p in prompts if p.prompt_id not in traces]
    if missing:
        raise SpecsimError(
            f"check: method {entry.method!r} has no greedy trace for prompt {missing[0]!r} "
            "(run 'specsim calibrate acceptance' on the same prompts)"
        )
    traced = max(len(traces[p.prompt_id].match) for p in prompts)
    if measured.new_tokens > traced:  # the traces stop where a smaller cap cut them: nothing replays the rest
        raise SpecsimError(
            f"--max-new-tokens: the runs decoded up to {measured.new_tokens} new tokens, past the profile's "
            f"greedy traces (at most {traced}, traced under a smaller cap); give --max-new-tokens {traced}, "
            "or trace again with 'specsim calibrate acceptance --max-new-tokens N'"
        )
    specs = [
        RequestSpec(p.prompt_tokens, p.draft_prompt_tokens, p.images, traces[p.prompt_id], p.max_new_tokens,
                    prompt_id=p.prompt_id)
        for p in prompts
    ]  # fmt: skip
    pred = price(profile, entry, gamma, specs)
    note = "cost-model walk over each prompt's replayed blocks" + (
        "; a context outside the measured grid was extrapolated" if pred.extrapolated else ""
    )
    chain = isinstance(gamma, (int, np.integer))
    book = None
    if chain:
        c = pred.ratios()["c"]  # Tq/Tp of the priced passes, for the textbook's tau / (gamma*c + 1)
        tau_ref, g_ref = reference_tau(entry, reference_gamma or gamma)
        book = textbook_speedup(tau_ref, g_ref, gamma, c)
        note += f"; textbook: v=1, iid alpha from tau={tau_ref:.3f} at gamma={g_ref}"
    return compared_row(
        entry,
        draft_gamma(gamma),
        measured,
        tau=pred.tau,
        decode_speedup=pred.decode_speedup,
        request_speedup=pred.request_speedup,
        textbook=book,
        terms=pred.terms_ms_per_block(),
        notes=note,
        draft=None if chain else draft_label(gamma),
    )


def compared_row(
    entry: MethodAcceptance,
    gamma: int,
    measured,
    *,
    tau: float,
    decode_speedup: float,
    request_speedup: float | None,
    textbook: float | None,
    terms: dict,
    notes: str,
    **extra,
) -> CheckRow:
    """A :class:`CheckRow`: the predicted τ, speedups and ms per block by term (``terms``) beside
    ``measured`` (greedy :class:`Measured` or sampled, with the same fields); ``extra`` fills the rest."""
    return CheckRow(
        method=entry.method,
        scenario=entry.scenario,
        gamma=gamma,
        tau_predicted=tau,
        tau_measured=measured.tau,
        speedup_predicted=decode_speedup,
        speedup_measured=measured.decode_speedup,
        speedup_textbook=textbook,
        prompts=measured.prompts,
        new_tokens=measured.new_tokens,
        speedup_halfwidth=_finite(measured.decode_halfwidth),
        request_speedup_predicted=request_speedup,
        request_speedup_measured=measured.request_speedup,
        request_speedup_halfwidth=_finite(measured.request_halfwidth),
        rounds=measured.rounds,
        terms_ms_per_block={
            t: {"predicted": terms[t], "measured": measured.terms_ms_per_block[t]}
            for t in (*TERMS, TARGET_TERM)
            if t in terms
        }
        or None,
        notes=notes,
        **extra,
    )


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
