"""The request shape of pricing: a drafting method's requests, pass by pass through a pass cost
(:mod:`specsim.costs.pass_cost`; the profile's measured grids by default).

``predict``, ``sweep`` and ``check`` price requests here, so a check tests exactly what ``predict`` prints.
:func:`price` takes :class:`RequestSpec` requests (traced, replayed exactly, or N tokens in blocks of τ) and a
γ, tree or policy, and returns costs by term, SD and target-only: the whole request (vision, draft set-up,
the fused first pass, every block) and the decode phase (as if the prompt were cached; Leviathan et al.
2023). Speedup = target-only ms / SD ms over the same tokens. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.acceptance.replay import replay_survival
from specsim.acceptance.theory import alpha_from_tau
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import DRAFT, PREFILL, TARGET, PassCost
from specsim.draft_shapes.block_plans import expected_plan, greedy_plan
from specsim.draft_shapes.draft_plans import Draft, draft_plan
from specsim.draft_shapes.ngram_lookup import NgramSimple, ngram_plan
from specsim.errors import SpecsimError
from specsim.predict.chain_costs import RequestCost, target_request_cost
from specsim.predict.tau_at_gamma import tau_with_source
from specsim.predict.tree_costs import plan_cost
from specsim.profile_format import MethodAcceptance, Profile, Trace

# Output length of a request when neither traces nor the caller say (the zoo and reference workloads use 64).
DEFAULT_NEW_TOKENS = 64
TERMS = ("draft", "verify", "overhead")


@dataclass(frozen=True)
class RequestSpec:
    """One request to price: target and draft prompt tokens, images, and either its greedy ``trace`` (the
    engine's exact schedule, with drafting capped at ``max_new_tokens``; None: the trace's length) or, with
    no trace, ``new_tokens`` in blocks of τ."""

    prompt_tokens: float
    draft_prompt_tokens: float
    images: int
    trace: Trace | None = None
    max_new_tokens: int | None = None
    new_tokens: int | None = None
    prompt_id: str = ""


def request_specs(
    entry: MethodAcceptance,
    *,
    context_tokens=None,
    new_tokens=None,
    max_new_tokens=None,
    default_context_tokens=None,
) -> list[RequestSpec]:
    """The requests a prediction prices: every greedy trace of ``entry`` from its own prompt, or (no traces,
    or ``new_tokens`` asked for) one request of ``new_tokens`` tokens; ``context_tokens`` overrides the
    prompts (target and draft); ``default_context_tokens`` stands in for a prompt length nobody recorded
    (the profile's verify context: where its latency was read)."""
    traces = [t for t in entry.traces if t.match is not None]
    images = entry.images_per_prompt
    if traces and new_tokens is None:
        out = []
        for t in traces:
            p = (
                context_tokens
                if context_tokens is not None
                else (t.prompt_tokens or entry.target_prompt_tokens)
            )
            p = p or default_context_tokens
            if p is None:
                raise SpecsimError(f"method {entry.method!r}: prompt length unknown (pass --context-tokens)")
            d = t.draft_prompt_tokens or entry.draft_prompt_tokens or p
            d = context_tokens if context_tokens is not None else d
            out.append(
                RequestSpec(float(p), float(d), images, t, max_new_tokens, prompt_id=t.prompt_id or "")
            )
        return out
    p = (
        context_tokens
        if context_tokens is not None
        else (entry.target_prompt_tokens or _mean(traces, "prompt_tokens"))
    )
    p = p or default_context_tokens
    if p is None:
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: the prompt length is unknown "
            "(pass --context-tokens N to walk from an N-token prompt)"
        )
    n = new_tokens or (int(round(np.mean([len(t.match) for t in traces]))) if traces else DEFAULT_NEW_TOKENS)
    d = (
        (entry.draft_prompt_tokens or _mean(traces, "draft_prompt_tokens") or p)
        if context_tokens is None
        else p
    )
    return [RequestSpec(float(p), float(d), images, None, new_tokens=int(n))]


def _mean(traces, name: str) -> float | None:
    """The mean of a per-trace prompt length, when every trace records it."""
    values = [getattr(t, name) for t in traces]
    return float(np.mean(values)) if values and all(v is not None for v in values) else None


def setup_ms(cost: PassCost, profile: Profile, entry: MethodAcceptance, images: int) -> tuple[float, float]:
    """(target-only, SD) set-up ms of one request: the target's vision encoder; SD adds the draft's vision
    encoder (methods that see the images) and a caption per image (methods that read captions)."""
    lat = profile.latency
    if not images:
        return 0.0, 0.0
    vision = cost.encoder_ms(images)
    draft = 0.0
    if entry.uses_draft_vision:
        if lat.draft_vision_encoder_ms_per_image is None:
            raise SpecsimError(
                f"method {entry.method!r} runs the draft's vision encoder, "
                "but draft_vision_encoder_ms_per_image is not measured"
            )
        draft += cost.encoder_ms(images, draft=True)
    if entry.captions_per_prompt:
        if lat.captioner_ms_per_image is None:
            raise SpecsimError(
                f"method {entry.method!r} uses captions, but captioner_ms_per_image is not measured"
            )
        draft += images * lat.captioner_ms_per_image
    return vision, vision + draft


@dataclass(frozen=True)
class Priced:
    """Summed costs of the priced requests: whole requests (first pass fused) and the decode phase (after
    it), SD and target-only; set-up ms (None, with ``setup_note``, when the profile lacks a vision cost);
    drafts proposed in the decode phase; τ = tokens per block over the whole requests."""

    sd_request: RequestCost
    base_request: RequestCost
    sd_decode: RequestCost
    base_decode: RequestCost
    decode_drafts: float
    base_setup_ms: float | None
    sd_setup_ms: float | None
    setup_note: str = ""

    @property
    def tau(self) -> float:
        return self.sd_request.tokens / self.sd_request.blocks

    @property
    def decode_tau(self) -> float:
        """τ of the decode phase: tokens per block after each request's first pass."""
        return self.sd_decode.tokens / max(self.sd_decode.blocks, 1e-12)

    @property
    def target_ms_per_token(self) -> float:
        """Tp: a target-only decode step, ms."""
        return self.base_decode.total_ms / self.base_decode.tokens

    @property
    def sd_ms_per_token(self) -> float:
        return self.sd_decode.total_ms / self.sd_decode.tokens

    @property
    def decode_speedup(self) -> float:
        return self.target_ms_per_token / self.sd_ms_per_token

    @property
    def request_speedup(self) -> float | None:
        if self.base_setup_ms is None:
            return None
        return (self.base_setup_ms + self.base_request.total_ms) / (
            self.sd_setup_ms + self.sd_request.total_ms
        )

    @property
    def extrapolated(self) -> bool:
        return self.sd_request.extrapolated or self.base_request.extrapolated

    def terms_ms_per_block(self) -> dict[str, float]:
        """Decode-phase ms per SD block by term, and ``target_step``: ms per target-only step."""
        blocks = max(self.sd_decode.blocks, 1e-12)
        terms = {t: getattr(self.sd_decode, f"{t}_ms") / blocks for t in TERMS}
        return terms | {"target_step": self.target_ms_per_token}

    def ratios(self) -> dict[str, float]:
        """Decode-phase c (per draft), v and o (per block) in units of Tp, drafts made per block d (below γ
        where the token budget cuts a block short), and the block d·c + v + o (``gamma_c_plus_v``)."""
        tp, blocks = self.target_ms_per_token, max(self.sd_decode.blocks, 1e-12)
        return {
            "drafts": self.decode_drafts / blocks,
            "c": self.sd_decode.draft_ms / max(self.decode_drafts, 1e-12) / tp,
            "v": self.sd_decode.verify_ms / blocks / tp,
            "o": self.sd_decode.overhead_ms / blocks / tp,
            "gamma_c_plus_v": self.sd_decode.total_ms / blocks / tp,
        }


def draft_cost(profile: Profile, draft: Draft) -> GridPassCost:
    """The profile's measured grids that price ``draft``: an n-gram kind's (no draft model: its blocks'
    lookup overhead instead of draft passes), else one request's; SpecsimError when the profile lacks them."""
    if isinstance(draft, NgramSimple):
        return GridPassCost.lookup(profile.latency)
    return GridPassCost.request(profile.latency)


def price(
    profile: Profile,
    entry: MethodAcceptance,
    draft: Draft,
    requests: list[RequestSpec],
    cost: PassCost | None = None,
) -> Priced:
    """Price ``requests`` of ``entry`` at ``draft`` (a fixed γ, a token tree, a draft-length policy or an
    n-gram kind) pass by pass through ``cost`` (default: the profile's measured grids,
    :func:`draft_cost`); SpecsimError names what the source cannot price."""
    cost = cost or draft_cost(profile, draft)
    if not requests:
        raise SpecsimError(f"method {entry.method!r}: no requests to price")
    totals: dict[str, RequestCost | None] = dict.fromkeys(("sd_req", "base_req", "sd_dec", "base_dec"))
    drafts, setups, note = 0.0, np.zeros(2), ""
    for r in requests:
        kw = {
            "target_prompt_tokens": r.prompt_tokens,
            "draft_prompt_tokens": r.draft_prompt_tokens,
            "batch": entry.draft_batch_size,
            "adaptive": entry.adaptive,
        }
        P = r.prompt_tokens
        if cost.first_pass_drafts:
            plan = _plan(entry, draft, r)
            # The decode phase starts after the first pass, unless that pass is the whole request.
            dec, first = plan.after_first(), 1.0
            if dec.tokens == 0:
                dec, first = plan, 0.0
            sd_req, sd_dec = plan_cost(cost, plan, **kw), plan_cost(cost, dec, fused=False, **kw)
        else:
            dec, first = unfused_plan(entry, draft, r), 1.0
            sd_dec = plan_cost(cost, dec, fused=False, **kw)
            sd_req = sd_dec + prompt_pass(cost, P, r.draft_prompt_tokens)
        base_req, base_dec = target_only(cost, P, sd_req.tokens, first)
        parts = {"sd_req": sd_req, "base_req": base_req, "sd_dec": sd_dec, "base_dec": base_dec}
        for k, v in parts.items():
            totals[k] = v if totals[k] is None else totals[k] + v
        drafts += dec.draft_tokens
        if setups is not None:
            try:
                setups = setups + np.array(setup_ms(cost, profile, entry, r.images))
            except SpecsimError as err:
                setups, note = None, str(err)
    return Priced(
        sd_request=totals["sd_req"],
        base_request=totals["base_req"],
        sd_decode=totals["sd_dec"],
        base_decode=totals["base_dec"],
        decode_drafts=drafts,
        base_setup_ms=None if setups is None else float(setups[0]),
        sd_setup_ms=None if setups is None else float(setups[1]),
        setup_note=note,
    )


def target_only(cost: PassCost, prompt_tokens: float, new_tokens: float, first: float = 1.0):
    """(whole request, decode phase) of target-only decoding: the request with its first pass fused with the
    prefill, and the ``new_tokens − first`` steps after that first pass as if the prompt were cached."""
    request = target_request_cost(cost, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    decode = target_request_cost(
        cost, prompt_tokens=prompt_tokens + first, new_tokens=new_tokens - first, fused=False
    )
    return request, decode


def prompt_pass(cost: PassCost, prompt_tokens: float, draft_prompt_tokens: float) -> RequestCost:
    """The prompt's pass of an engine that does not draft in it: the target's prefill and the draft's
    (free for a drafter without a model), emitting the first token."""
    target, out = cost.pass_ms(TARGET, prompt_tokens, 0, 1, kind=PREFILL)
    draft, out_d = cost.pass_ms(DRAFT, draft_prompt_tokens, 0, 1, kind=PREFILL)
    return RequestCost(
        tokens=1.0,
        blocks=1.0,
        prefill_ms=float(target),
        draft_ms=0.0,
        verify_ms=0.0,
        overhead_ms=float(cost.step_overhead_ms()),
        extrapolated=bool(np.any(out) or np.any(out_d)),
        draft_prefill_ms=float(draft),
    )


def unfused_plan(entry: MethodAcceptance, draft: Draft, request: RequestSpec):
    """The blocks after the prompt pass's token (``first_pass_drafts`` false): the trace from its second
    position at γ (N − 1 tokens), or N − 1 tokens in blocks of τ, or an n-gram lookup replayed over the
    trace's prompt and tokens (:func:`specsim.draft_shapes.ngram_lookup.ngram_plan`); starts count the first
    token."""
    if isinstance(draft, NgramSimple):
        t = request.trace
        if t is None or t.tokens is None or t.prompt_ids is None:
            raise SpecsimError(
                f"n-gram drafting ({draft.label}) replays the target's tokens from their prompt: method "
                f"{entry.method!r} has no traces with tokens and prompt_ids "
                "(calibrate acceptance --engine llama.cpp)"
            )
        return ngram_plan(t.prompt_ids, t.tokens, draft, request.max_new_tokens)
    if not isinstance(draft, (int, np.integer)):
        raise SpecsimError(
            "trees and draft-length policies are priced for engines whose prompt pass drafts; this profile's "
            "engine (llama.cpp) runs fixed-gamma chains"
        )
    gamma = int(draft)
    if request.trace is not None:
        match = request.trace.match
        budget = len(match) if request.max_new_tokens is None else int(request.max_new_tokens)
        plan = greedy_plan(match[1:budget], gamma, budget - 1)  # a run of fewer tokens than the trace
    else:
        tau, _ = tau_with_source(entry, gamma)
        plan = expected_plan(tau, gamma, request.new_tokens - 1)
    return replace(plan, start=plan.start + 1.0, first_rows=np.minimum(plan.first_rows, 1.0))


def _plan(entry: MethodAcceptance, draft: Draft, request: RequestSpec):
    """The request's blocks: its trace's exact schedule, or N tokens in blocks of τ at a fixed γ."""
    if isinstance(draft, NgramSimple):
        raise SpecsimError(f"{draft.label}: n-gram drafting is priced for llama.cpp's profiles only")
    if request.trace is not None:
        return draft_plan(draft, request.trace, request.max_new_tokens)
    if not isinstance(draft, (int, np.integer)):
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: trees and policies are replayed from "
            "greedy traces, and this request has none"
        )
    gamma = int(draft)
    tau, _ = tau_with_source(entry, gamma)
    traces = [t for t in entry.traces if t.match is not None]
    if traces:
        full = float(replay_survival(traces, gamma)[-1])
    else:
        full = float(alpha_from_tau(tau, gamma)) ** gamma if tau < gamma + 1 else 1.0
    return expected_plan(tau, gamma, request.new_tokens, full)
