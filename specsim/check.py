"""Predicted vs measured speculative decoding (``specsim check``): one :class:`CheckRow` per method × scenario × γ
(or token tree, or draft-length policy).

Measured: real runs of the engine, per prompt and round, reduced to :class:`RequestRun` (ms by term).
Two speedups: *request* = target-only request ms / SD request ms, everything the engine does (vision,
draft set-up, the first pass that carries the prompt, every block); *decode phase* = ms per token after
the first pass (target-only steps ≥ 1 vs SD blocks ≥ 1), the convention of τ / (γ·c + v). Each has a
95% confidence half-width from the spread of the rounds (:func:`ratio_halfwidth`), so a prediction
error can be judged against the noise of its measurement.

Predicted: with a cost model (profile schema 2) the walk of :mod:`specsim.walk` over each prompt's
exact greedy schedule (its trace replayed at γ, or with a tree or a policy: :mod:`specsim.walk_drafts`),
its own prompt lengths and its vision and draft set-up;
without one, τ / (γ·c + v) from the 1-D tables at the mean context (decode phase only). Textbook:
Leviathan et al.'s τ / (γ·c + 1) with τ from an i.i.d. α fitted at one reference γ.
Relative error = (predicted − measured) / measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.errors import SpecsimError
from specsim.profile import CheckRow, MethodAcceptance, Profile
from specsim.theory import alpha_from_tau, speedup, tau_iid
from specsim.walk import RequestCost, target_request_cost
from specsim.walk_drafts import Draft, draft_gamma, draft_label, draft_plan, plan_cost

TERMS = ("draft", "verify", "overhead")
# The speedup's denominator has a term too: a target-only step (its block is one token), ms per step.
TARGET_TERM = "target_step"


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
    Student t of Σ_p (R − 1) degrees of freedom; inf with fewer than two rounds.
    """
    from scipy.stats import t as student_t

    base, sd = np.asarray(base, dtype=float), np.asarray(sd, dtype=float)
    rounds = base.shape[1]
    if rounds < 2:
        return float("inf")
    B, D = base.mean(1).sum(), sd.mean(1).sum()
    var_b = base.var(1, ddof=1).sum() / rounds
    var_d = sd.var(1, ddof=1).sum() / rounds
    cov = (((base - base.mean(1, keepdims=True)) * (sd - sd.mean(1, keepdims=True))).sum(1) / (rounds - 1)).sum() / rounds
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
    terms = {t: float(np.mean([[getattr(r, f"{t}_ms") for r in row] for row in s], axis=1).sum() / max(blocks, 1))
             for t in TERMS}
    terms[TARGET_TERM] = float(b_dec.mean(1).sum() / max(b_tok, 1))
    return Measured(
        tau=tokens / sum(r[0].blocks for r in s),
        request_speedup=float(b_tot.mean(1).sum() / s_tot.mean(1).sum()),
        request_halfwidth=ratio_halfwidth(b_tot, s_tot),
        decode_speedup=float((b_dec.mean(1).sum() / b_tok) / (s_dec.mean(1).sum() / s_tok)),
        decode_halfwidth=ratio_halfwidth(b_dec, s_dec), terms_ms_per_block=terms, rounds=rounds,
        prompts=len(ids), new_tokens=max(r[0].tokens for r in s))


# --------------------------------------------------------------------------- predicted
def textbook_speedup(tau_reference: float, gamma_reference: int, gamma: int, c: float) -> float:
    """Leviathan's prediction: τ from i.i.d. α = α(τ_ref at γ_ref), speedup = τ / (γ·c + 1)."""
    tau = tau_iid(alpha_from_tau(tau_reference, gamma_reference), gamma)
    return float(speedup(tau, gamma, c, 1.0))


def reference_tau(entry: MethodAcceptance, fallback_gamma: int) -> tuple[float, int]:
    """(τ_ref, γ_ref) the textbook fit starts from: the entry's own single-γ τ, else τ at ``fallback_gamma``."""
    from specsim.tau import tau_with_source
    from specsim.theory import tau_from_histogram

    if entry.gamma is not None and entry.tau is not None:
        return entry.tau, entry.gamma
    if entry.gamma is not None and entry.accepted_histogram is not None:
        return float(tau_from_histogram(entry.accepted_histogram)), entry.gamma
    return tau_with_source(entry, fallback_gamma)[0], fallback_gamma


def _setup_ms(profile: Profile, entry: MethodAcceptance, images: int) -> tuple[float, float]:
    """(target set-up, SD set-up) ms: the target's vision encoder; plus the draft's vision and captions."""
    lat = profile.latency
    vision = images * (lat.vision_encoder_ms_per_image or 0.0)
    draft = 0.0
    if entry.uses_draft_vision and images:
        draft += images * (lat.draft_vision_encoder_ms_per_image or 0.0)
    if entry.captions_per_prompt:
        draft += images * (lat.captioner_ms_per_image or 0.0)
    return vision, vision + draft


@dataclass(frozen=True)
class Predicted:
    """The predicted side of one row (request speedup None without a cost model)."""

    tau: float
    decode_speedup: float
    request_speedup: float | None
    terms_ms_per_block: dict
    c: float
    note: str


def predict_walk(profile: Profile, entry: MethodAcceptance, draft: Draft, prompts: list[PromptSpec]) -> Predicted:
    """Walk every prompt's exact schedule (a fixed γ, a token tree or a draft-length policy:
    :func:`specsim.walk_drafts.draft_plan`) through the cost model (see the module docstring)."""
    cost = profile.latency.cost_model
    traces = {t.prompt_id: t for t in entry.traces if t.match is not None}
    missing = [p.prompt_id for p in prompts if p.prompt_id not in traces]
    if missing:
        raise SpecsimError(f"check: method {entry.method!r} has no greedy trace for prompt {missing[0]!r} "
                           "(run 'specsim calibrate acceptance' on the same prompts)")
    batch = entry.draft_batch_size
    sd_req = sd_dec = base_req = base_dec = None
    tokens = blocks = drafts = 0.0
    sd_setup = base_setup = 0.0
    for p in prompts:
        plan = draft_plan(draft, traces[p.prompt_id], p.max_new_tokens)
        kw = {"target_prompt_tokens": p.prompt_tokens, "draft_prompt_tokens": p.draft_prompt_tokens, "batch": batch,
              "adaptive": entry.adaptive}
        n = plan.tokens
        sd_req = _add(sd_req, plan_cost(cost, plan, **kw))
        dec = plan_cost(cost, plan.after_first(), fused=False, **kw)
        sd_dec, drafts = _add(sd_dec, dec), drafts + plan.after_first().draft_tokens
        base_req = _add(base_req, target_request_cost(cost, prompt_tokens=p.prompt_tokens, new_tokens=n))
        base_dec = _add(base_dec, target_request_cost(cost, prompt_tokens=p.prompt_tokens + 1, new_tokens=n - 1,
                                                      fused=False))
        tokens, blocks = tokens + n, blocks + plan.blocks
        v_ms, s_ms = _setup_ms(profile, entry, p.images)
        base_setup, sd_setup = base_setup + v_ms, sd_setup + s_ms
    decode = (base_dec.total_ms / base_dec.tokens) / (sd_dec.total_ms / sd_dec.tokens)
    request = (base_setup + base_req.total_ms) / (sd_setup + sd_req.total_ms)
    terms = {t: getattr(sd_dec, f"{t}_ms") / max(sd_dec.blocks, 1e-12) for t in TERMS}
    terms[TARGET_TERM] = base_dec.total_ms / max(base_dec.tokens, 1e-12)
    c = (sd_dec.draft_ms / max(drafts, 1e-12)) / (base_dec.total_ms / base_dec.tokens)
    note = "cost-model walk over each prompt's replayed blocks" + (
        "; a context outside the measured grid was extrapolated" if sd_req.extrapolated or base_req.extrapolated else "")
    return Predicted(tau=tokens / blocks, decode_speedup=decode, request_speedup=request, terms_ms_per_block=terms,
                     c=c, note=note)


def _add(total: RequestCost | None, cost: RequestCost) -> RequestCost:
    return cost if total is None else total + cost


def predict_tables(profile: Profile, entry: MethodAcceptance, gamma: int, prompts: list[PromptSpec]) -> Predicted:
    """Schema-1 profiles: τ replayed on the same prompts, τ / (γ·c + v) from the 1-D tables at the mean context."""
    from specsim.latency import latency_ratios
    from specsim.replay import replay_traces_tau
    from specsim.tau import tau_with_source

    by_id = {t.prompt_id: t for t in entry.traces if t.match is not None}
    ids = [p.prompt_id for p in prompts]
    if ids and all(i in by_id for i in ids):
        tau, source = float(replay_traces_tau([by_id[i] for i in ids], gamma)), "replay (same prompts)"
    else:
        tau, source = tau_with_source(entry, gamma)
    context = float(np.mean([p.prompt_tokens + p.max_new_tokens / 2 for p in prompts])) if prompts else None
    try:
        c, v = latency_ratios(profile.latency, gamma, context_tokens=context, batch_size=entry.draft_batch_size)
        where = f"context {context:g}"
    except SpecsimError:
        c, v = latency_ratios(profile.latency, gamma, batch_size=entry.draft_batch_size)
        where = "default context (mean context outside the measured range)"
    return Predicted(tau=tau, decode_speedup=float(speedup(tau, gamma, c, v)), request_speedup=None,
                     terms_ms_per_block={}, c=c, note=f"tau: {source}; c={c:.4f}, v={v:.4f} at {where}")


def check_row(profile: Profile, entry: MethodAcceptance, gamma: Draft, prompts: list[PromptSpec],
              measured: Measured, *, reference_gamma: int | None = None) -> CheckRow:
    """Predicted (profile) vs ``measured`` at one γ, token tree or draft-length policy as a :class:`CheckRow`
    (a tree's row carries γ = its n nodes, a policy's its starting γ, and ``draft`` names them; the textbook
    has no trees or policies: None there)."""
    walk = profile.latency.cost_model is not None
    chain = isinstance(gamma, (int, np.integer))
    if not walk and not chain:
        raise SpecsimError(f"check {draft_label(gamma)}: needs a profile with a cost model (schema 2; run "
                           "'specsim calibrate latency')")
    pred = predict_walk(profile, entry, gamma, prompts) if walk else predict_tables(profile, entry, gamma, prompts)
    if chain:
        tau_ref, g_ref = reference_tau(entry, reference_gamma or gamma)
        book, book_note = textbook_speedup(tau_ref, g_ref, gamma, pred.c), (
            f"; textbook: v=1, iid alpha from tau={tau_ref:.3f} at gamma={g_ref}")
    else:
        book, book_note = None, ""
    return CheckRow(
        method=entry.method, scenario=entry.scenario, gamma=draft_gamma(gamma), draft=None if chain else draft_label(gamma),
        tau_predicted=pred.tau,
        tau_measured=measured.tau, speedup_predicted=pred.decode_speedup, speedup_measured=measured.decode_speedup,
        speedup_textbook=book, prompts=measured.prompts,
        new_tokens=measured.new_tokens, speedup_halfwidth=_finite(measured.decode_halfwidth),
        request_speedup_predicted=pred.request_speedup, request_speedup_measured=measured.request_speedup,
        request_speedup_halfwidth=_finite(measured.request_halfwidth), rounds=measured.rounds,
        terms_ms_per_block={t: {"predicted": pred.terms_ms_per_block[t], "measured": measured.terms_ms_per_block[t]}
                            for t in (*TERMS, TARGET_TERM) if t in pred.terms_ms_per_block} or None,
        notes=pred.note + book_note)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
