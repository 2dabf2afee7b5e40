"""Profile + method + γ -> predicted τ and decode-phase speedup τ / (γ·c + v(γ)) (IbED, Lee et al. 2024, Eq. 2).

With a cost model (profile schema 2) the decode phase is priced along each request's contexts
(:mod:`specsim.predict_walk`): c, v and the engine's overhead o per block are then effective values over
the walk, and speedup = τ / (γ·c + v + o). Without one, c and v are read at one context of the 1-D tables.

τ comes from the most direct evidence the profile holds: greedy traces replayed at γ (exact),
else τ or the histogram measured at this γ, or (an entry recorded as a histogram at K, no separate
τ, e.g. imported engine counters) the survival read off it for γ ≤ K (exact), else an i.i.d.
extrapolation through α(τ) from the measured γ — always flagged. c and v come from measured
latency tables; when a profile only knows γ·c + v at one γ (a published speedup table), other γ
are reported as not computable. The textbook assumption v = 1 is used only when ``textbook=True``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from specsim import latency as lat
from specsim.errors import SpecsimError
from specsim.latency import block_cost
from specsim.profile import MethodAcceptance, Profile
from specsim.tau import check_gamma, tau_with_source
from specsim.theory import alpha_from_tau, tau_iid


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
    o: float | None = None  # the engine's overhead per block / Tp (cost-model profiles)
    end_to_end: dict | None = None  # request latency (ms by stage) when new_tokens was asked for
    end_to_end_note: str = ""
    draft: str | None = None  # a token tree or draft-length policy (specsim.predict_drafts); None: fixed γ

    def to_json(self) -> dict:
        return asdict(self)


def select_entries(profile: Profile, methods=None, scenario: str | None = None) -> list[MethodAcceptance]:
    """The acceptance entries for ``methods`` (None: all) in ``scenario`` (name, or 'Nimg' group)."""
    entries = list(profile.acceptance)
    if not entries:
        raise SpecsimError(f"profile {profile.name!r} has no acceptance entries")
    if methods:
        known = list(dict.fromkeys(e.method for e in entries))
        for m in methods:
            if m not in known:
                raise SpecsimError(f"unknown method {m!r} (this profile has: {', '.join(known)})")
        entries = [e for e in entries if e.method in methods]
    if scenario is not None:
        entries = [e for e in entries if _scenario_matches(e, scenario)]
        if not entries:
            known = list(dict.fromkeys(e.scenario for e in profile.acceptance))
            groups = sorted({f"{e.images_per_prompt}img" for e in profile.acceptance})
            raise SpecsimError(f"unknown scenario {scenario!r} (expected one of: {', '.join(known + groups)})")
    order = {name: i for i, name in enumerate(dict.fromkeys(e.scenario for e in profile.acceptance))}
    return sorted(entries, key=lambda e: (e.images_per_prompt, order[e.scenario]))


def _scenario_matches(entry: MethodAcceptance, scenario: str) -> bool:
    s = scenario.strip().lower()
    return s == entry.scenario.lower() or s in (f"{entry.images_per_prompt}img", f"{entry.images_per_prompt}-image")


def predict_entry(profile: Profile, entry: MethodAcceptance, gamma: int, *, textbook: bool = False,
                  context_tokens=None, new_tokens: int | None = None) -> Prediction:
    """Predict one method × scenario at γ; with ``new_tokens``, also its end-to-end request latency."""
    gamma = check_gamma(gamma)
    row = _predict_decode(profile, entry, gamma, textbook=textbook, context_tokens=context_tokens,
                          new_tokens=new_tokens)
    if new_tokens is None:
        return row
    from specsim.e2e import request_latency

    try:
        e2e = request_latency(profile, entry, gamma, new_tokens, context_tokens=context_tokens).to_json()
        return replace(row, end_to_end=e2e)
    except SpecsimError as err:
        return replace(row, end_to_end_note=f"end-to-end latency not computable: {err}")


def _predict_decode(profile: Profile, entry: MethodAcceptance, gamma: int, *, textbook: bool, context_tokens,
                    new_tokens) -> Prediction:
    if profile.latency.cost_model is not None and not textbook:
        return _predict_walk(profile, entry, gamma, context_tokens=context_tokens, new_tokens=new_tokens)
    if textbook and entry.gamma is not None and entry.gamma != gamma:
        # The textbook model carries τ from the measured γ with i.i.d. α, even when traces exist.
        tau0, _ = tau_with_source(entry, entry.gamma)
        tau = float(tau_iid(alpha_from_tau(tau0, entry.gamma), gamma))
        source = f"iid from gamma={entry.gamma}"
    else:
        tau, source = tau_with_source(entry, gamma)
    cost, c, v, note = block_cost(profile.latency, gamma, context_tokens=context_tokens,
                                  batch_size=entry.draft_batch_size, textbook=textbook)
    tp = _maybe(lambda: lat.target_decode_ms(profile.latency, context_tokens))
    sd_ms = None if (tp is None or cost is None) else tp * cost / tau
    return Prediction(
        method=entry.method, scenario=entry.scenario, images_per_prompt=entry.images_per_prompt,
        gamma=gamma, tau=tau, tau_source=source, extrapolated=source.startswith("iid"),
        c=c, v=v, gamma_c_plus_v=cost, speedup=None if cost is None else tau / cost,
        target_ms_per_token=tp, sd_ms_per_token=sd_ms,
        tokens_per_s=None if sd_ms is None else 1000.0 / sd_ms, textbook=textbook, note=note,
    )


def _predict_walk(profile: Profile, entry: MethodAcceptance, gamma: int, *, context_tokens, new_tokens) -> Prediction:
    """The decode phase priced along each request's contexts (:mod:`specsim.predict_walk`)."""
    from specsim.predict_walk import walk_cost, walks

    tau0, source = tau_with_source(entry, gamma)
    base = {"method": entry.method, "scenario": entry.scenario, "images_per_prompt": entry.images_per_prompt,
            "gamma": gamma, "tau_source": source, "extrapolated": source.startswith("iid")}
    try:
        cost = walk_cost(profile, entry, walks(entry, gamma, tau0, prompt_tokens=context_tokens,
                                               new_tokens=new_tokens), fused=False)
    except SpecsimError as err:
        return Prediction(**base, tau=tau0, c=None, v=None, gamma_c_plus_v=None, speedup=None, note=str(err))
    return walked_prediction(base, cost, "cost model: every forward priced at its own rows, context and batch "
                                         "along each request")


def walked_prediction(base: dict, cost, note: str) -> Prediction:
    """A :class:`Prediction` (identity fields ``base``) from a walk's cost (:class:`specsim.predict_walk.WalkCost`):
    τ = tokens per block, c, v, o per block in units of Tp, speedup = target-only ms / SD ms."""
    r = cost.ratios()
    sd_ms = cost.sd.total_ms / cost.sd.tokens
    if cost.sd.extrapolated or cost.base.extrapolated:
        note += "; a context outside the measured grid was extrapolated (linear)"
    return Prediction(**base, tau=cost.sd.tokens / cost.sd.blocks, c=r["c"], v=r["v"], o=r["o"],
                      gamma_c_plus_v=r["gamma_c_plus_v"], speedup=cost.base.total_ms / cost.sd.total_ms,
                      target_ms_per_token=cost.target_ms_per_token, sd_ms_per_token=sd_ms,
                      tokens_per_s=1000.0 / sd_ms, note=note)


def _maybe(fn):
    try:
        return fn()
    except SpecsimError:
        return None


def predict(profile: Profile, gamma: int, *, methods=None, scenario: str | None = None,
            textbook: bool = False, context_tokens=None, new_tokens: int | None = None) -> list[Prediction]:
    """Predictions for every selected method × scenario at γ, grouped by scenario (fewest images first);
    with ``new_tokens`` each row also carries its end-to-end request latency (or the reason it has none)."""
    return [predict_entry(profile, e, gamma, textbook=textbook, context_tokens=context_tokens, new_tokens=new_tokens)
            for e in select_entries(profile, methods, scenario)]
