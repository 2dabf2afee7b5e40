"""Teacher-forced acceptance traces: one forward of each model over the target's own greedy output.

For a prompt x and the target's greedy output y (:func:`calibrate.run.engine.target_decode`), p_t and q_t are
the target's and the draft's next-token distributions given x + y_{<t} (IbED, Lee et al. 2024, §3):
``match[t]`` = [argmax q_t == y_t]; ``beta[t]`` = Σ_x min(p_t(x), q_t(x)) at temperature T (Leviathan et
al. 2023, §3.5); with ``top_k`` = K > 0, ``draft_rank`` and ``draft_top_probs``; along sampled path k,
``accept_paths[k][t]`` = min(1, q_t(y_t) / p_t(y_t)).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np
import torch

from calibrate.drafting.ensemble import AdaptiveEnsembleDrafter
from calibrate.measure.trace_fields import (
    BETA_DECIMALS,
    adaptive_trace,
    member_features,
    trace_from_logits,
    trace_from_probs,
)
from calibrate.run.engine import Request, target_decode, unwrap
from specsim.draft_shapes.adaptive import replay_at
from specsim.errors import SpecsimError
from specsim.profile_format import MethodAcceptance, Trace

# SeedSequence keys of sampled paths: (seed, 2, prompt id digest, path); check runs use 0 and 1
PATH_SEED_KEY = 2
# positions per softmax when only the sampled token's probability is kept (a [16, 151936] fp32 block: 10 MB)
PROB_ROWS = 16


@dataclass(frozen=True)
class PromptTrace:
    """A prompt's trace plus what produced it: the target's greedy tokens and the prompt length."""

    trace: Trace
    output_tokens: tuple[int, ...]
    prompt_tokens: int
    draft_prompt_tokens: int

    def to_json(self) -> dict:
        return {
            "trace": self.trace.to_json(),
            "output_tokens": list(self.output_tokens),
            "prompt_tokens": self.prompt_tokens,
            "draft_prompt_tokens": self.draft_prompt_tokens,
        }

    @classmethod
    def from_json(cls, d: dict, where: str = "partial") -> PromptTrace:
        """Validated (SpecsimError naming the field): a trace with a prompt id, token ids, token counts."""
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {type(d).__name__}")
        if "trace" not in d:
            raise SpecsimError(f"{where}.trace: missing")
        trace = Trace.from_json(d["trace"], f"{where}.trace")
        if trace.prompt_id is None:
            raise SpecsimError(f"{where}.trace.prompt_id: missing")
        tokens = d.get("output_tokens")
        if not isinstance(tokens, list) or not all(type(t) is int and t >= 0 for t in tokens):
            raise SpecsimError(f"{where}.output_tokens: expected a list of token ids >= 0")
        if trace.match is None or len(trace.match) != len(tokens):
            raise SpecsimError(f"{where}.trace.match: expected one 0/1 per output token ({len(tokens)})")
        counts = [d.get(k) for k in ("prompt_tokens", "draft_prompt_tokens")]
        for k, v in zip(("prompt_tokens", "draft_prompt_tokens"), counts):
            if type(v) is not int or v < 1:
                raise SpecsimError(f"{where}.{k}: expected an integer >= 1, got {v!r:.60}")
        return cls(
            trace=trace, output_tokens=tuple(tokens), prompt_tokens=counts[0], draft_prompt_tokens=counts[1]
        )


@torch.inference_mode()
def next_token_logits(model, context_ids: torch.Tensor, n_positions: int, **kwargs) -> torch.Tensor:
    """Logits [n, V] of the last ``n_positions`` positions of one uncached forward over [1, S]."""
    out = unwrap(model)(input_ids=context_ids, use_cache=False, logits_to_keep=n_positions, **kwargs)
    return out.logits[0, -n_positions:].float()


def acceptance_trace(
    target,
    draft,
    request: Request,
    *,
    max_new_tokens: int,
    eos_token_id=None,
    temperature: float = 1.0,
    draft_input_ids: torch.Tensor | None = None,
    device="cpu",
    top_k: int = 0,
    paths: tuple[TargetPath, ...] = (),
) -> PromptTrace:
    """Greedy target output, then one teacher-forced forward of each model over it → a :class:`Trace`;
    with sampled ``paths`` (:func:`target_paths`) one draft forward over each adds ``accept_paths``.

    ``draft_input_ids`` [1, S'] is the draft's own prompt (default: the target's ``input_ids``).
    """
    ref = target_reference(
        target, request, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, device=device
    )
    y = torch.tensor(ref.tokens, dtype=torch.long, device=request.input_ids.device)  # [N]
    draft_prompt = request.input_ids if draft_input_ids is None else draft_input_ids
    drf = next_token_logits(draft, torch.cat([draft_prompt[0], y[:-1]])[None], y.numel())
    trace = trace_from_logits(ref.logits, drf.cpu(), y.cpu(), temperature, request.prompt_id, top_k=top_k)
    tokens = ref.tokens
    del ref, drf  # the greedy [N, V] logits are done with: the paths need only one probability per position
    if paths:
        trace = replace(
            trace, accept_paths=tuple(_plain_accept_path(draft, draft_prompt, p, temperature) for p in paths)
        )
    return PromptTrace(
        trace=trace,
        output_tokens=tokens,
        prompt_tokens=request.input_ids.shape[1],
        draft_prompt_tokens=draft_prompt.shape[1],
    )


def acceptance_entry(
    traces: list[PromptTrace],
    *,
    method: str,
    scenario: str,
    images_per_prompt: int = 0,
    task: str = "",
    reference_gamma: int = 5,
    notes: str = "",
    **costs,
) -> MethodAcceptance:
    """A profile acceptance entry: the traces, plus τ and the accepted-length histogram replayed at
    ``reference_gamma`` (what a single-γ measurement would have recorded; adaptive ensembles replay their
    weights block by block). ``costs``: the method's cost fields of :class:`MethodAcceptance`
    (draft_batch_size, uses_draft_vision, captions_per_prompt, weights)."""
    if not traces:
        raise SpecsimError("acceptance: expected at least one prompt trace, got none")
    raw = [t.trace for t in traces]
    tau, hist = replay_at(raw, reference_gamma)
    return MethodAcceptance(
        method=method,
        scenario=scenario,
        images_per_prompt=images_per_prompt,
        task=task,
        gamma=reference_gamma,
        tau=tau,
        accepted_histogram=tuple(int(h) for h in hist),
        traces=tuple(
            replace(t.trace, prompt_tokens=t.prompt_tokens, draft_prompt_tokens=t.draft_prompt_tokens)
            for t in traces
        ),
        draft_prompt_tokens=float(np.mean([t.draft_prompt_tokens for t in traces])),
        target_prompt_tokens=float(np.mean([t.prompt_tokens for t in traces])),
        notes=notes,
        **costs,
    )


@dataclass(frozen=True)
class TargetReference:
    """The target's greedy output for one request and its logits [N, V] at every output position."""

    tokens: tuple[int, ...]
    logits: torch.Tensor


@torch.inference_mode()
def target_reference(
    target, request: Request, *, max_new_tokens: int, eos_token_id=None, device="cpu"
) -> TargetReference:
    """Greedy target decoding, then one teacher-forced target forward over prompt + output (shared by
    methods)."""
    base = target_decode(
        target, request, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, device=device
    )
    y = torch.tensor(base.tokens, dtype=torch.long, device=request.input_ids.device)
    logits = next_token_logits(
        target, torch.cat([request.input_ids[0], y[:-1]])[None], y.numel(), **request.target_kwargs
    )
    return TargetReference(tokens=base.tokens, logits=logits.cpu())


@torch.inference_mode()
def drafter_trace(
    target,
    drafter,
    request: Request,
    *,
    max_new_tokens: int,
    eos_token_id=None,
    temperature: float = 1.0,
    seed: int = 0,
    device="cpu",
    reference: TargetReference | None = None,
    top_k: int = 0,
    paths: tuple[TargetPath, ...] = (),
) -> PromptTrace:
    """A teacher-forced trace through the drafting protocol, so any method (ensembles, adaptive) is traced.

    After ``drafter.prefill``, per output position t: ``propose(1)`` at ``temperature`` gives q_t, then
    ``accept(0, y_t)`` commits the target's token; ``match[t]`` = [argmax q_t == y_t]. ``reference`` (from
    :func:`target_reference`) saves the target's work; ``top_k`` > 0 adds the top-k fields of q at T = 1;
    sampled ``paths`` (:func:`target_paths`) add ``accept_paths``.
    More: ARCHITECTURE.md, Notes by module.
    """
    if top_k > 0 and temperature != 1.0:
        raise SpecsimError(
            f"--top-k: ranks and top-k probabilities are of the greedy draft distribution (T = 1); "
            f"run with --temperature 1, got {temperature}"
        )
    ref = reference or target_reference(
        target, request, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, device=device
    )
    y = torch.tensor(ref.tokens, dtype=torch.long)  # [N]
    gen = torch.Generator(device=str(unwrap(target).device)).manual_seed(seed)  # drafts draw on the device
    members = [] if isinstance(drafter, AdaptiveEnsembleDrafter) else None
    q = _drafter_probs(drafter, request, ref.tokens, temperature, gen, members)  # [N, V]
    trace = trace_from_probs(
        torch.softmax(ref.logits / temperature, -1),
        q,
        y,
        top_k_probs=q,
        top_k=top_k,
        prompt_id=request.prompt_id,
        tokens=tuple(ref.tokens),
    )
    if members is not None:
        trace = replace(trace, adaptive=adaptive_trace(drafter, members, ref.tokens))
    del q  # [N, V]: a path needs only q_t(y_t)
    if paths:
        trace = replace(
            trace,
            accept_paths=tuple(
                accept_path(path, _drafter_probs(drafter, request, path.tokens, temperature, gen, token=True))
                for path in paths
            ),
        )
    context = getattr(drafter, "context_tokens", None) or [request.input_ids.shape[1]]
    return PromptTrace(
        trace=trace,
        output_tokens=ref.tokens,
        prompt_tokens=request.input_ids.shape[1],
        draft_prompt_tokens=int(max(context)),
    )


def _drafter_probs(
    drafter,
    request: Request,
    tokens,
    temperature: float,
    gen: torch.Generator,
    members: list | None = None,
    *,
    token: bool = False,
) -> torch.Tensor:
    """q_t [N, V] of the drafting protocol teacher-forced along ``tokens``: prefill, then per position
    ``propose(1)`` (its q) and ``accept(0, y_t)`` (commit the target's token). ``members`` (a list)
    collects an ensemble's member features per position (:func:`member_features`). ``token``: keep only
    q_t(y_t) [N] (what a sampled path needs), so no [N, V] tensor is built."""
    drafter.prefill(request)
    qs = []
    for tok in tokens:
        q = drafter.propose(1, temperature=temperature, generator=gen).q_probs[0]  # [V]
        qs.append((q[int(tok)] if token else q).float().cpu())
        if members is not None:
            members.append(member_features(drafter.member_probs[0], int(tok)))
        drafter.accept(0, int(tok))
    return torch.stack(qs)


# --------------------------------------------------------------------------- sampled paths
def path_seed(seed: int, prompt_id: str | None, path: int) -> int:
    """The 63-bit generator seed of sampled path ``path`` of a prompt: from the user's ``seed`` and the
    prompt's id (not its position, so a path does not change with --limit or the prompt order)."""
    digest = int.from_bytes(hashlib.sha256(str(prompt_id).encode()).digest()[:4], "big")
    return int(
        np.random.SeedSequence([seed, PATH_SEED_KEY, digest, path]).generate_state(1, np.uint64)[0]
    ) & (2**63 - 1)


@dataclass(frozen=True)
class TargetPath:
    """One seeded sampled continuation of the target: its tokens y [N] and p_t(y_t) [N] at the temperature."""

    tokens: tuple[int, ...]
    p_token: torch.Tensor


@torch.inference_mode()
def target_paths(
    target,
    request: Request,
    *,
    paths: int,
    temperature: float,
    seed: int = 0,
    max_new_tokens: int,
    eos_token_id=None,
    device="cpu",
) -> tuple[TargetPath, ...]:
    """``paths`` sampled target continuations at ``temperature`` (each from its own ``torch.Generator``,
    :func:`path_seed`; the engine's own target-only decoding) and one teacher-forced target forward over
    each for p_t(y_t). Shared by every method traced on the prompt."""
    if temperature <= 0:
        raise SpecsimError(f"sampled paths: expected a temperature > 0, got {temperature}")
    out = []
    for k in range(paths):
        gen = torch.Generator(device=str(unwrap(target).device)).manual_seed(
            path_seed(seed, request.prompt_id, k)
        )
        run = target_decode(
            target,
            request,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            generator=gen,
            eos_token_id=eos_token_id,
            device=device,
        )
        y = torch.tensor(run.tokens, dtype=torch.long, device=request.input_ids.device)  # [N]
        logits = next_token_logits(
            target, torch.cat([request.input_ids[0], y[:-1]])[None], y.numel(), **request.target_kwargs
        )  # [N, V]
        out.append(TargetPath(tokens=run.tokens, p_token=token_probs(logits, run.tokens, temperature)))
    return tuple(out)


def token_probs(logits: torch.Tensor, tokens, temperature: float, rows: int = PROB_ROWS) -> torch.Tensor:
    """softmax(logits[t] / T)[y_t] [N] (float32) from logits [N, V], ``rows`` positions at a time, so no
    second [N, V] tensor is made. Bitwise equal to gathering from the whole softmax: it is per row."""
    y = torch.as_tensor(tokens, dtype=torch.long).cpu()[:, None]  # [N, 1]
    parts = [
        torch.softmax(logits[i : i + rows].float().cpu() / temperature, -1).gather(1, y[i : i + rows])[:, 0]
        for i in range(0, y.shape[0], rows)
    ]
    return torch.cat(parts)  # [N]


def _plain_accept_path(draft, draft_prompt: torch.Tensor, path: TargetPath, temperature: float):
    """:func:`accept_path` of one path with the plain draft: one uncached forward over its tokens."""
    ctx = torch.tensor(path.tokens[:-1], dtype=torch.long, device=draft_prompt.device)  # [N-1]
    logits = next_token_logits(draft, torch.cat([draft_prompt[0], ctx])[None], len(path.tokens))  # [N, V]
    return accept_path(path, token_probs(logits, path.tokens, temperature))


def accept_path(path: TargetPath, q_token: torch.Tensor) -> tuple[float, ...]:
    """min(1, q_t(y_t) / p_t(y_t)) along ``path`` from the draft's probabilities q_t(y_t) [N] of the path's
    tokens."""
    qy = q_token.float().cpu().double()
    r = torch.clamp(qy / path.p_token.double().clamp_min(1e-300), 0.0, 1.0).numpy()
    return tuple(float(b) for b in np.round(r, BETA_DECIMALS))
