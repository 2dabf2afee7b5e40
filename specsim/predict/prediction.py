"""Profile + method + γ (or a token tree, or a draft-length policy) -> predicted τ and speedup, one row each.

Decode-phase speedup τ / (γ·c + v + o) (IbED, Lee et al. 2024, Eq. 2; o the engine's overhead per block),
priced by :func:`specsim.predict.pricing.price`, so c, v and o are effective values over the requests.
τ from the best evidence (:mod:`specsim.predict.tau_at_gamma`). A published ratio γ·c + v is not priced:
only its own γ is computable. Textbook (Leviathan et al. 2023), only when asked: v = 1, τ from an i.i.d. α.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from specsim.acceptance.theory import alpha_from_tau, speedup, tau_from_histogram, tau_iid
from specsim.bounds import check_range
from specsim.costs.pass_cost import TARGET
from specsim.draft_shapes.block_plans import refuse_short_budget
from specsim.draft_shapes.draft_plans import Draft, draft_gamma, draft_label
from specsim.draft_shapes.policies import GammaPolicy
from specsim.draft_shapes.trees import TreeSpec
from specsim.errors import SpecsimError
from specsim.predict.pricing import Priced, draft_cost, price, request_specs
from specsim.predict.tau_at_gamma import alpha_what_if, check_gamma, extrapolated, tau_with_source
from specsim.profile_format import BlockCost, MethodAcceptance, Profile

NO_TIMINGS = "the profile gives gamma*c+v as a published ratio, without latency timings"
WALK_NOTE = "cost model: every forward priced at its own rows, context and batch along each request"


@dataclass(frozen=True)
class Prediction:
    """One predicted row: method × scenario × γ. Missing values are None with the reason in ``note``."""

    method: str
    scenario: str
    images_per_prompt: int
    gamma: int
    tau: float
    tau_source: str
    extrapolated: bool
    c: float | None
    v: float | None
    gamma_c_plus_v: float | None
    speedup: float | None
    target_ms_per_token: float | None = None
    sd_ms_per_token: float | None = None
    tokens_per_s: float | None = None
    textbook: bool = False
    note: str = ""
    o: float | None = None  # the engine's overhead per block / Tp (priced profiles)
    end_to_end: dict | None = None  # request latency (ms by stage) when new_tokens was asked for
    end_to_end_note: str = ""
    draft: str | None = None  # a token tree or draft-length policy; None: fixed γ
    # priced profiles: the decode phase's τ and drafts per block, so that speedup = decode_tau / block
    # (gamma_c_plus_v = drafts_per_block·c + v + o); ``tau`` counts whole requests, as a check measures it
    decode_tau: float | None = None
    drafts_per_block: float | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def block_tau(self) -> float:
        """The τ the speedup divides by the block: the decode phase's where the row is priced pass by pass."""
        return self.tau if self.decode_tau is None else self.decode_tau


def predict_entry(
    profile: Profile,
    entry: MethodAcceptance,
    draft: Draft,
    *,
    textbook: bool = False,
    context_tokens=None,
    new_tokens: int | None = None,
    max_new_tokens: int | None = None,
) -> Prediction:
    """Predict one method × scenario at a fixed γ, a token tree or a policy; with ``new_tokens``, also its
    end-to-end request latency. A row whose speedup is None carries the reason in ``note``."""
    chain = not isinstance(draft, (TreeSpec, GammaPolicy))  # else a γ: 5.0 or "5" was taken for a tree
    if chain:
        draft = check_gamma(draft)
    ratio = profile.latency.published_ratio
    if ratio is not None:
        row = _ratio_prediction(entry, draft, ratio, textbook=textbook)
        if new_tokens is None:
            return row
        return replace(row, end_to_end_note="end-to-end latency not computable: " + NO_TIMINGS)
    base = {
        "method": entry.method,
        "scenario": entry.scenario,
        "images_per_prompt": entry.images_per_prompt,
        "gamma": draft_gamma(draft),
        "draft": None if chain else draft_label(draft),
    }
    if chain:
        tau0, source = tau_with_source(entry, draft)
    else:
        tau0, source = None, "replay"
    base |= {"tau_source": source, "extrapolated": extrapolated(source)}
    walked = _textbook_gamma(profile, draft) if textbook and chain else draft
    try:
        profile.latency.forward_costs()  # none: say so before what a walk would need
        specs = request_specs(
            entry,
            context_tokens=context_tokens,
            new_tokens=new_tokens,
            max_new_tokens=max_new_tokens,
            default_context_tokens=profile.latency.verify_context_tokens,
        )
        priced = price(profile, entry, walked, specs)
    except SpecsimError as err:
        return Prediction(**base, tau=tau0, c=None, v=None, gamma_c_plus_v=None, speedup=None, note=str(err))
    widths = draft_cost(profile, draft).measured_widths(TARGET, rows=2) or ()
    row = priced_prediction(base, priced, WALK_NOTE, widths)
    if textbook and chain:
        row = _textbook(row, entry, draft, walked)
    if new_tokens is None:
        return row
    if priced.base_setup_ms is None:
        return replace(row, end_to_end_note=f"end-to-end latency not computable: {priced.setup_note}")
    return replace(row, end_to_end=request_latency(priced, entry, draft, new_tokens))


def priced_prediction(base: dict, priced: Priced, note: str, contexts=()) -> Prediction:
    """A :class:`Prediction` (identity fields ``base``) from priced requests: τ = tokens per block (whole
    requests and the decode phase), c, v, o per decode-phase block in units of Tp, speedup = target-only ms /
    SD ms per decode-phase token = decode τ / (d·c + v + o); ``contexts``: the grids' measured contexts."""
    r = priced.ratios()
    if priced.extrapolated and len(contexts) == 1:  # nothing to extrapolate along: held at the one context
        note += f"; the grids hold one context ({contexts[0]:g} tokens), so every context is priced at it"
    elif priced.extrapolated:
        note += "; a context outside the measured grid was extrapolated (linear)"
    return Prediction(
        **base,
        tau=priced.tau,
        decode_tau=priced.decode_tau,
        drafts_per_block=r["drafts"],
        c=r["c"],
        v=r["v"],
        o=r["o"],
        gamma_c_plus_v=r["gamma_c_plus_v"],
        speedup=priced.decode_speedup,
        target_ms_per_token=priced.target_ms_per_token,
        sd_ms_per_token=priced.sd_ms_per_token,
        tokens_per_s=1000.0 / priced.sd_ms_per_token,
        note=note,
    )


def reference_tau(entry: MethodAcceptance, fallback_gamma: int) -> tuple[float, int]:
    """(τ_ref, γ_ref) the textbook fit starts from: the entry's own single-γ τ, else τ at
    ``fallback_gamma``."""
    if entry.gamma is not None and entry.tau is not None:
        return entry.tau, entry.gamma
    if entry.gamma is not None and entry.accepted_histogram is not None:
        return float(tau_from_histogram(entry.accepted_histogram)), entry.gamma
    return tau_with_source(entry, fallback_gamma)[0], fallback_gamma


def textbook_tau(entry: MethodAcceptance, gamma: int) -> tuple[float, str]:
    """The textbook's τ at γ: carried from the reference τ (:func:`reference_tau`) with an i.i.d. α, even
    when traces exist (Leviathan et al. 2023)."""
    tau_ref, g_ref = reference_tau(entry, gamma)
    if g_ref == gamma or alpha_what_if(entry):  # an --alpha what-if is i.i.d. already: exact at every γ
        return tau_with_source(entry, gamma)
    return float(tau_iid(alpha_from_tau(tau_ref, g_ref), gamma)), f"iid from gamma={g_ref}"


def textbook_speedup(tau_reference: float, gamma_reference: int, gamma: int, c: float) -> float:
    """Leviathan's prediction: τ from i.i.d. α = α(τ_ref at γ_ref), speedup = τ / (γ·c + 1)."""
    tau = tau_iid(alpha_from_tau(tau_reference, gamma_reference), gamma)
    return float(speedup(tau, gamma, c, 1.0))


def _textbook_gamma(profile: Profile, gamma: int) -> int:
    """The γ whose walk prices the textbook's c: γ, or the largest the grid verifies when γ is past it (the
    textbook reads no Tv, and c, one draft forward over one target step, barely moves with γ)."""
    try:
        return min(gamma, profile.latency.forward_costs().max_gamma)
    except SpecsimError:  # no cost model: pricing says why
        return gamma


def _textbook(row: Prediction, entry: MethodAcceptance, gamma: int, walked: int) -> Prediction:
    """The textbook row: the priced c (walked at γ ``walked``), v = 1, no overhead, γ drafts per block, τ from
    :func:`textbook_tau` (one τ: the textbook has no first pass to tell whole requests from the decode
    phase)."""
    tau, source = textbook_tau(entry, gamma)
    cost = gamma * row.c + 1.0
    sd_ms = row.target_ms_per_token * cost / tau
    return replace(
        row,
        tau=tau,
        decode_tau=None,
        drafts_per_block=float(gamma),
        tau_source=source,
        extrapolated=extrapolated(source),
        v=1.0,
        o=None,
        gamma_c_plus_v=cost,
        speedup=float(speedup(tau, gamma, row.c, 1.0)),
        sd_ms_per_token=sd_ms,
        tokens_per_s=1000.0 / sd_ms,
        textbook=True,
        note="textbook: v=1, c priced by the cost model, iid alpha"
        + ("" if walked == gamma else f" (c walked at gamma {walked}, the grid's largest)"),
    )


def request_latency(priced: Priced, entry: MethodAcceptance, gamma, new_tokens: int) -> dict:
    """One request's ms by stage, SD and target-only (the first pass fused with the prompt, as the engine
    runs it): vision, the target's first pass, the draft's set-up (its vision encoder and captions), the
    rest of the decode, and the totals and end-to-end speedup."""
    prefill = priced.base_request.prefill_ms
    out = {
        "method": entry.method,
        "scenario": entry.scenario,
        "gamma": int(draft_gamma(gamma)),
        "new_tokens": int(new_tokens),
        "vision_ms": priced.base_setup_ms,
        "target_prefill_ms": prefill,
        "draft_setup_ms": priced.sd_setup_ms - priced.base_setup_ms,
        "decode_ms": priced.sd_request.total_ms - prefill,
        "plain_decode_ms": priced.base_request.total_ms - prefill,
    }
    sd_total = priced.sd_setup_ms + priced.sd_request.total_ms
    plain_total = priced.base_setup_ms + priced.base_request.total_ms
    return out | {"sd_total_ms": sd_total, "plain_total_ms": plain_total, "speedup": plain_total / sd_total}


def _ratio_prediction(
    entry: MethodAcceptance, draft: Draft, ratio: BlockCost, *, textbook: bool
) -> Prediction:
    """A published ratio γ·c + v at one γ: τ / (γ·c + v) there; the textbook's v = 1 carries c to any γ."""
    base = {"method": entry.method, "scenario": entry.scenario, "images_per_prompt": entry.images_per_prompt}
    if not isinstance(draft, int):
        note = "trees and policies are priced with a cost model (run 'specsim calibrate latency')"
        return Prediction(
            **base, gamma=draft_gamma(draft), draft=draft_label(draft), tau=None, tau_source="replay",
            extrapolated=False, c=None, v=None, gamma_c_plus_v=None, speedup=None, note=note,
        )  # fmt: skip
    gamma = draft
    tau, source = textbook_tau(entry, gamma) if textbook else tau_with_source(entry, gamma)
    cost = c = v = None
    if textbook:
        # v = 1 turns the one known γ·c + v into c, which then carries to any γ.
        c, v = (ratio.gamma_c_plus_v - 1.0) / ratio.gamma, 1.0
        cost, note = gamma * c + 1.0, f"textbook: v=1, c from gamma*c+v at gamma={ratio.gamma}"
    elif ratio.gamma == gamma:
        cost, note = ratio.gamma_c_plus_v, "gamma*c+v from the profile's block_cost"
    else:
        note = (
            f"Tv(gamma) unknown away from gamma={ratio.gamma}: the profile gives gamma*c+v only at "
            f"gamma={ratio.gamma} (pass --textbook to assume v=1)"
        )
    if cost is not None and entry.draft_batch_size > 1:
        # IbED §6.1 measures a batch-2 draft step at well under 1% of the speedup; with no batch
        # table we take its claim, and say so.
        note += (
            "; an ensemble's draft batch of contexts is assumed to cost as batch 1 "
            "(IbED, Lee et al. 2024, §6.1)"
        )
    return Prediction(
        **base, gamma=gamma, tau=tau, tau_source=source, extrapolated=extrapolated(source), c=c, v=v,
        gamma_c_plus_v=cost, speedup=None if cost is None else tau / cost, textbook=textbook, note=note,
    )  # fmt: skip


def predict(
    profile: Profile,
    gamma: int,
    *,
    methods=None,
    scenario: str | None = None,
    textbook: bool = False,
    context_tokens=None,
    new_tokens: int | None = None,
    max_new_tokens: int | None = None,
) -> list[Prediction]:
    """Predictions for every selected method × scenario at γ, grouped by scenario (fewest images first);
    with ``new_tokens`` each row also carries its end-to-end request latency (or the reason it has none);
    SpecsimError when ``max_new_tokens`` is below a selected entry's traced request."""
    for name, value, unit in (
        ("context_tokens", context_tokens, "tokens"),
        ("new_tokens", new_tokens, "output_tokens"),
        ("max_new_tokens", max_new_tokens, "output_tokens"),
    ):  # the library's entry: the CLI checks its flags, a caller's numbers are checked here
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.number))):
            raise SpecsimError(f"{name}: expected a number of tokens, got {value!r}")
        if value is not None:
            check_range(value, unit, name)
    entries = profile.select_entries(methods, scenario)
    refuse_short_budget([t for e in entries for t in e.traces], max_new_tokens)
    return [
        predict_entry(
            profile,
            e,
            gamma,
            textbook=textbook,
            context_tokens=context_tokens,
            new_tokens=new_tokens,
            max_new_tokens=max_new_tokens,
        )
        for e in entries
    ]
