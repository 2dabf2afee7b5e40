"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023) with KV caches, in phase-named steps.

After gpt-fast: :func:`vision_phase`, the drafter's ``propose``, :func:`verify_phase`, :func:`accept_phase`,
:func:`crop_cache` (one block: :func:`sd_block`), glued by :func:`speculative_decode`; :func:`target_decode`
is the target-only baseline through the same forward. The prefill is fused with the first forward, then one
token is pending, so greedy trace replay is exact from position 0; γ ≤ tokens left − 1. Sampling is
lossless; T = 0 gives the target's greedy output. Records: :mod:`calibrate.run.decode_records`. Shapes:
batch 1, ``logits`` [n, V]. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import TYPE_CHECKING, Any

import torch

from calibrate.run.decode_records import BlockRecord, DecodeResult
from calibrate.run.proposal import Drafter, Proposal, Request
from calibrate.run.synthetic_acceptance import SyntheticAcceptance, scripted_accept
from calibrate.run.timing import timed
from specsim.draft_shapes.policies import as_policy
from specsim.errors import SpecsimError

if TYPE_CHECKING:
    from specsim.draft_shapes.policies import GammaPolicy


# --------------------------------------------------------------------------- primitives
def unwrap(model):
    """The ``torch.nn.Module`` of a model or of a ``calibrate.models.loaded_model.LoadedModel``."""
    return model if isinstance(model, torch.nn.Module) else model.model


@functools.cache
def _cache_keyword(model_class) -> str:
    """``cache`` where the model's forward takes it (transformers 5.x, which deprecates the old name for
    removal in 5.40), else ``past_key_values`` (transformers 4.x)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """The forward keyword argument that hands ``model`` its KV cache, by the name its transformers takes."""
    return {_cache_keyword(type(model)): cache}


def new_cache():
    """An empty KV cache (transformers ``DynamicCache``)."""
    from transformers import DynamicCache

    return DynamicCache()


def forward(model, input_ids: torch.Tensor, cache, *, last_only: bool = False, **kwargs) -> torch.Tensor:
    """One cached forward over ``input_ids`` [1, n]; returns float logits [n, V] (or [1, V])."""
    out = model(
        input_ids=input_ids,
        **with_cache(model, cache),
        use_cache=True,
        logits_to_keep=1 if last_only else 0,
        **kwargs,
    )
    return out.logits[0]


def crop_cache(cache, length_tokens: int) -> None:
    """Roll a transformers ``DynamicCache`` back to its first ``length_tokens`` positions, in place (the KV
    of rejected drafts goes); no-op at that length already, SpecsimError when it holds fewer.

    ``crop`` with a negative value removes that many positions (transformers 4.x and 5.x; 5.x refuses
    positive values).
    """
    current = cache.get_seq_length()
    if length_tokens > current:
        raise SpecsimError(f"cannot crop a KV cache of {current} tokens to {length_tokens}")
    if length_tokens < current:
        cache.crop(length_tokens - current)


def probs_of(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float32, over the last axis."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """(token, probs): argmax when T = 0 (probs None), else a sample from softmax(logits / T)."""
    if temperature == 0:
        return int(torch.argmax(logits)), None
    p = probs_of(logits, temperature)
    return int(torch.multinomial(p, 1, generator=generator)), p


def check_args(gamma: int, max_new_tokens: int, temperature: float, request: Request, synthetic=0) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise SpecsimError(f"gamma: expected an integer >= 1, got {gamma!r}")
    if max_new_tokens < 1:
        raise SpecsimError(f"max_new_tokens: expected an integer >= 1, got {max_new_tokens!r}")
    if not temperature >= 0 or (synthetic and temperature):  # synthetic acceptance is greedy
        raise SpecsimError(f"temperature: expected {'0' if synthetic else '>= 0'}, got {temperature!r}")
    ids = request.input_ids
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise SpecsimError(f"input_ids: expected shape [1, S] with S >= 1, got {tuple(ids.shape)}")


# --------------------------------------------------------------------------- phases
def vision_phase(model, request: Request, device="cpu") -> tuple[dict[str, Any], dict[str, float]]:
    """The target's image encoder, run once and apart (its cost is reported apart): (first-pass kwargs,
    {"target_vision_ms": ms}) for a VLM request whose model takes precomputed ``mm_encoder_outputs``
    (e.g. LLaVA); otherwise the request's own kwargs and no stage."""
    kwargs = dict(request.target_kwargs)
    if "pixel_values" not in kwargs or not _takes_encoder_outputs(model):
        return kwargs, {}
    with timed(device) as t:
        kwargs["mm_encoder_outputs"] = {
            "image": model.model.get_image_features(pixel_values=kwargs.pop("pixel_values"), return_dict=True)
        }
    return kwargs, {"target_vision_ms": t.ms}


def _takes_encoder_outputs(model) -> bool:
    inner = getattr(model, "model", None)
    return (
        hasattr(inner, "get_image_features")
        and "mm_encoder_outputs" in inspect.signature(model.forward).parameters
    )


def verify_phase(
    model, cache, pending: torch.Tensor, drafts: torch.Tensor, device="cpu", **kwargs
) -> tuple[torch.Tensor, float]:
    """One target forward over [pending, d_1..d_γ]: logits [γ+1, V] of the last γ+1 positions and its ms.

    ``pending`` [1, m] holds the tokens not yet in the target's cache: the whole prompt in the first
    block (prefill fused with the first verification, as HF's assisted generation does), then one token.
    """
    ids = torch.cat([pending, drafts[None]], dim=1) if drafts.numel() else pending  # [1, m+γ]
    with timed(device) as t:
        out = model(
            input_ids=ids,
            **with_cache(model, cache),
            use_cache=True,
            logits_to_keep=drafts.numel() + 1,
            **kwargs,
        )
    return out.logits[0], t.ms


def accept_phase(
    logits: torch.Tensor, proposal: Proposal, temperature: float, generator, forced=None
) -> tuple[int, int]:
    """(n accepted drafts, next token) from target logits [γ+1, V] and the proposal; ``forced``: the drafts a
    synthetic-acceptance schedule accepts (:mod:`calibrate.run.synthetic_acceptance`), greedy."""
    if forced is not None:
        n, nxt = scripted_accept(logits[None], [forced])
        return int(n[0]), int(nxt[0])
    drafts = proposal.tokens  # [γ]
    g = drafts.numel()
    if temperature == 0:
        best = torch.argmax(logits, dim=-1)  # [γ+1]
        if not g:
            return 0, int(best[0])
        agree = (best[:g] == drafts).long()
        n = int(torch.cumprod(agree, 0).sum())
        return n, int(best[n])
    p = probs_of(logits, temperature)  # [γ+1, V]
    if g:
        q = proposal.q_probs  # [γ, V]
        rows = torch.arange(g)
        # drawn where the generator lives (a CUDA generator draws on the GPU), compared where p lives
        where = generator.device if generator is not None else p.device
        u = torch.rand(g, generator=generator, dtype=torch.float64, device=where).to(p.device)
        ok = (u * q[rows, drafts].double() < p[rows, drafts].double()).long()  # u < p/q
        n = int(torch.cumprod(ok, 0).sum())
        if n < g:
            residual = torch.clamp(p[n] - q[n], min=0)
            if float(residual.sum()) <= 0:  # p == q: a rejection has probability 0; keep it well defined
                residual = p[n]
            return n, int(torch.multinomial(residual, 1, generator=generator))
    return g, int(torch.multinomial(p[g], 1, generator=generator))


def sd_block(
    model,
    cache,
    drafter: Drafter,
    pending: torch.Tensor,
    g: int,
    *,
    temperature: float,
    generator: torch.Generator | None,
    device="cpu",
    stop_below: float = 0.0,
    forced: int | None = None,
    **kwargs,
) -> tuple[list[int], Proposal, float]:
    """One draft/verify block with up to ``g`` drafts (fewer after a draft below ``stop_below``): propose,
    verify, accept (``forced``: as a synthetic schedule says), roll back both caches.

    Returns (the accepted drafts + the target's next token, the proposal, verify ms). ``kwargs`` go to
    the verify forward (the first block's image features).
    """
    committed = cache.get_seq_length() + pending.shape[1]  # target positions known before the drafts
    stop = {"stop_below": stop_below} if stop_below else {}
    propose = lambda: drafter.propose(g, temperature=temperature, generator=generator, **stop)  # noqa: E731
    proposal = propose() if g > 0 else empty_proposal(model)
    logits, verify_ms = verify_phase(model, cache, pending, proposal.tokens, device, **kwargs)
    n, nxt = accept_phase(logits, proposal, temperature, generator, forced)
    crop_cache(cache, committed + n)  # drop the KV of rejected drafts
    drafter.accept(n, nxt)
    return proposal.tokens[:n].tolist() + [nxt], proposal, verify_ms


def target_step(
    model,
    cache,
    pending: torch.Tensor,
    *,
    temperature: float,
    generator: torch.Generator | None,
    device="cpu",
    **kwargs,
) -> tuple[int, float]:
    """One target-only step over ``pending`` [1, m] (the whole prompt first, then one token): (token, ms)."""
    with timed(device) as t:
        out = model(input_ids=pending, **with_cache(model, cache), use_cache=True, logits_to_keep=1, **kwargs)
    return pick(out.logits[0, -1], temperature, generator)[0], t.ms


# --------------------------------------------------------------------------- loops
def truncate_at_eos(new_tokens: list[int], left: int, eos_token_id) -> tuple[list[int], bool]:
    """Cut at ``left`` tokens and after the first EOS; returns (tokens, stop?)."""
    eos = (
        set()
        if eos_token_id is None
        else ({eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id))
    )
    for i, tok in enumerate(new_tokens[:left]):
        if tok in eos:
            return new_tokens[: i + 1], True
    kept = new_tokens[:left]
    return kept, len(kept) >= left


@torch.inference_mode()
def speculative_decode(
    target,
    drafter: Drafter,
    request: Request,
    *,
    gamma: int | GammaPolicy,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_token_id=None,
    device="cpu",
    acceptance: SyntheticAcceptance | None = None,
) -> DecodeResult:
    """Speculative decoding of one request with ``drafter`` at fixed γ or under a draft-length policy
    (:mod:`specsim.draft_shapes.policies`: the policy picks each block's γ and hears its outcome); with
    ``acceptance`` each block accepts what that synthetic schedule says (greedy, not lossless)."""
    check_args(0, max_new_tokens, temperature, request, synthetic=acceptance is not None)
    policy = as_policy(gamma)  # an int is a fixed γ; bad values raise naming gamma
    state = policy.initial_state()
    model, cache, setup, kwargs, pending = start_request(target, request, device)
    setup.update(drafter.prefill(request))
    out, blocks, done = [], [], False
    while not done:
        t0 = time.perf_counter()
        g = min(policy.next_gamma(state), max_new_tokens - len(out) - 1)
        context = cache.get_seq_length()
        kept, proposal, verify_ms = sd_block(
            model,
            cache,
            drafter,
            pending,
            g,
            temperature=temperature,
            generator=generator,
            device=device,
            stop_below=policy.stop_below,
            forced=None if acceptance is None else acceptance.accepted(request.prompt_id, len(out), g),
            **kwargs,
        )
        kwargs = {}
        g = proposal.tokens.numel()  # fewer than asked when a confidence stop cut drafting short
        state = policy.update(state, g, len(kept) - 1)
        new, done = truncate_at_eos(kept, max_new_tokens - len(out), eos_token_id)
        out.extend(new)
        rows = pending.shape[1] + g
        # The next block's input is built inside this block's time: every ms of the loop is in a record.
        pending = torch.tensor([[out[-1]]], dtype=torch.long, device=model.device)
        blocks.append(
            BlockRecord(
                gamma=g,
                accepted=len(new) - 1,
                emitted=len(new),
                draft_ms=proposal.model_ms,
                verify_ms=verify_ms,
                block_ms=(time.perf_counter() - t0) * 1e3,
                target_context_tokens=context,
                target_rows=rows,
                draft_context_tokens=proposal.context_tokens,
                draft_first_rows=proposal.first_rows,
                draft_step_ms=proposal.step_ms,
            )
        )
    gamma = max([policy.gamma] + [b.gamma for b in blocks])  # histogram bins: the largest γ drafted
    return DecodeResult(
        tokens=tuple(out),
        prompt_tokens=request.input_ids.shape[1],
        gamma=gamma,
        method=drafter.method,
        setup_ms=setup,
        blocks=tuple(blocks),
        prompt_id=request.prompt_id,
    )


def start_request(target, request: Request, device):
    """(model, empty KV cache, set-up ms (the target's vision encoder), kwargs of the first target pass,
    the first pending tokens [1, S]: the first pass carries the whole prompt)."""
    model = unwrap(target)
    kwargs, setup = vision_phase(model, request, device)
    return model, new_cache(), setup, kwargs, request.input_ids.to(model.device)


def empty_proposal(model) -> Proposal:
    return Proposal(
        tokens=torch.zeros(0, dtype=torch.long, device=model.device), q_probs=None, model_ms=0.0, first_rows=0
    )


@torch.inference_mode()
def target_decode(
    target,
    request: Request,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    eos_token_id=None,
    device="cpu",
) -> DecodeResult:
    """Target-only decoding through the same forward and sampling as :func:`speculative_decode`: the
    first step runs over the whole prompt (the prefill), every later step over one token."""
    check_args(0, max_new_tokens, temperature, request)
    model, cache, setup, kwargs, pending = start_request(target, request, device)
    out, blocks, done = [], [], False
    while not done:
        t0 = time.perf_counter()
        context = cache.get_seq_length()
        nxt, ms = target_step(
            model, cache, pending, temperature=temperature, generator=generator, device=device, **kwargs
        )
        kwargs = {}
        new, done = truncate_at_eos([nxt], max_new_tokens - len(out), eos_token_id)
        out.extend(new)
        rows = pending.shape[1]
        pending = torch.tensor([[nxt]], dtype=torch.long, device=model.device)  # in the step's time, as above
        blocks.append(
            BlockRecord(
                gamma=0,
                accepted=0,
                emitted=1,
                draft_ms=0.0,
                verify_ms=ms,
                block_ms=(time.perf_counter() - t0) * 1e3,
                target_context_tokens=context,
                target_rows=rows,
            )
        )
    return DecodeResult(
        tokens=tuple(out),
        prompt_tokens=request.input_ids.shape[1],
        gamma=0,
        method="target",
        setup_ms=setup,
        blocks=tuple(blocks),
        prompt_id=request.prompt_id,
    )
