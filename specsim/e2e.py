"""End-to-end request latency (ms) of one request, with and without speculative decoding.

    plain = vision + target_prefill + N·Tp
    sd    = vision + target_prefill + draft_setup + (N/τ)·(γ·Tq_k + Tv(γ))
    draft_setup = draft_prefill(draft prompt tokens) + images·draft_vision (if the method sees images)
                  + captions·captioner

Vision encoding and prefill are not accelerated by SD, so the end-to-end speedup plain/sd is always
below the decode-phase speedup. The draft set-up is charged serially (no overlap with the target's
prefill assumed), and N/τ blocks is the expected count (the last block may be cut by max tokens).

With a cost model (profile schema 2) the request is walked instead (:mod:`specsim.predict_walk`): each
pass priced at its own rows, context and batch, the prefill fused with the first block as the engine runs
it (the target's first pass over prompt + γ rows, the draft's over its prompt). Then ``target_prefill_ms``
is the plain request's first pass, ``decode_ms`` the rest of the SD request (its first pass included,
beyond that) and ``draft_setup_ms`` the draft's vision encoder and captions only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from specsim import latency as lat
from specsim.errors import SpecsimError
from specsim.latency import block_cost
from specsim.profile import MethodAcceptance, Profile
from specsim.tau import tau_with_source


@dataclass(frozen=True)
class RequestLatency:
    """Per-stage ms of one request of ``new_tokens`` output tokens."""

    method: str
    scenario: str
    gamma: int
    new_tokens: int
    vision_ms: float
    target_prefill_ms: float
    draft_setup_ms: float
    decode_ms: float
    plain_decode_ms: float

    @property
    def sd_total_ms(self) -> float:
        return self.vision_ms + self.target_prefill_ms + self.draft_setup_ms + self.decode_ms

    @property
    def plain_total_ms(self) -> float:
        return self.vision_ms + self.target_prefill_ms + self.plain_decode_ms

    @property
    def speedup(self) -> float:
        return self.plain_total_ms / self.sd_total_ms

    def to_json(self) -> dict:
        return asdict(self) | {"sd_total_ms": self.sd_total_ms, "plain_total_ms": self.plain_total_ms,
                               "speedup": self.speedup}


def draft_setup_ms(profile: Profile, entry: MethodAcceptance) -> float:
    """The method's draft-side set-up: draft prefill over its own context, draft vision, captions."""
    latency = profile.latency
    ms = 0.0
    if entry.draft_prompt_tokens:
        # An ensemble prefills its k contexts as one batch; the longest one sets the time.
        ms += lat.prefill_ms(latency.draft_prefill_ms_by_tokens, entry.draft_prompt_tokens,
                             name="draft prefill (draft_prefill_ms_by_tokens)")
    if entry.uses_draft_vision and entry.images_per_prompt:
        if latency.draft_vision_encoder_ms_per_image is None:
            raise SpecsimError(f"method {entry.method!r} runs the draft's vision encoder, "
                               "but draft_vision_encoder_ms_per_image is not measured")
        ms += entry.images_per_prompt * latency.draft_vision_encoder_ms_per_image
    if entry.captions_per_prompt:
        if latency.captioner_ms_per_image is None:
            raise SpecsimError(f"method {entry.method!r} uses captions, but captioner_ms_per_image is not measured")
        ms += entry.captions_per_prompt * latency.captioner_ms_per_image
    return ms


def request_latency(profile: Profile, entry: MethodAcceptance, gamma: int, new_tokens: int, *,
                    context_tokens=None) -> RequestLatency:
    """Per-stage latency of one request; SpecsimError names the first table the profile lacks."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise SpecsimError(f"new_tokens: expected an integer >= 1, got {new_tokens!r}")
    if profile.latency.cost_model is not None:
        return _walked(profile, entry, gamma, new_tokens, context_tokens)
    latency = profile.latency
    tp = lat.target_decode_ms(latency, context_tokens)
    cost, _, _, note = block_cost(latency, gamma, context_tokens=context_tokens,
                                  batch_size=entry.draft_batch_size)
    if cost is None:
        raise SpecsimError(note)
    tau, _ = tau_with_source(entry, gamma)
    vision = 0.0
    if entry.images_per_prompt:
        if latency.vision_encoder_ms_per_image is None:
            raise SpecsimError("vision_encoder_ms_per_image: not measured in this profile")
        vision = entry.images_per_prompt * latency.vision_encoder_ms_per_image
    target_prefill = 0.0
    if entry.target_prompt_tokens:
        target_prefill = lat.prefill_ms(latency.target_prefill_ms_by_tokens, entry.target_prompt_tokens,
                                        name="target prefill (target_prefill_ms_by_tokens)")
    return RequestLatency(
        method=entry.method, scenario=entry.scenario, gamma=gamma, new_tokens=new_tokens,
        vision_ms=vision, target_prefill_ms=target_prefill, draft_setup_ms=draft_setup_ms(profile, entry),
        decode_ms=new_tokens / tau * cost * tp, plain_decode_ms=new_tokens * tp,
    )


def _vision_ms(profile: Profile, entry: MethodAcceptance) -> float:
    if not entry.images_per_prompt:
        return 0.0
    if profile.latency.vision_encoder_ms_per_image is None:
        raise SpecsimError("vision_encoder_ms_per_image: not measured in this profile")
    return entry.images_per_prompt * profile.latency.vision_encoder_ms_per_image


def _walked(profile: Profile, entry: MethodAcceptance, gamma: int, new_tokens: int, context_tokens) -> RequestLatency:
    """One request of ``new_tokens`` walked through the cost model, first pass fused (module docstring)."""
    from specsim.predict_walk import walk_cost, walks
    from specsim.tau import tau_with_source

    tau, _ = tau_with_source(entry, gamma)
    (walk,) = walks(entry, gamma, tau, prompt_tokens=context_tokens, new_tokens=new_tokens)
    cost = walk_cost(profile, entry, [walk], fused=True)
    setup = draft_setup_ms(replace(profile, latency=replace(profile.latency, draft_prefill_ms_by_tokens=None)),
                           replace(entry, draft_prompt_tokens=None))
    prefill = cost.base.prefill_ms
    return RequestLatency(method=entry.method, scenario=entry.scenario, gamma=gamma, new_tokens=new_tokens,
                          vision_ms=_vision_ms(profile, entry), target_prefill_ms=prefill, draft_setup_ms=setup,
                          decode_ms=cost.sd.total_ms - prefill, plain_decode_ms=cost.base.total_ms - prefill)
