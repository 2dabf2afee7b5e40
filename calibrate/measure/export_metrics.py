"""The project's own speculative-decoding runs written as vLLM's spec-decode counters (Prometheus text).

Per block with γ ≥ 1 drafts (vLLM's ``SpecDecodingStats.observe_draft``): ``num_drafts`` += 1,
``num_draft_tokens`` += γ, ``num_accepted_tokens`` += accepted, ``num_accepted_tokens_per_pos[i]`` += 1 for
i < accepted. :func:`engine_tau` is the engine's own τ(k): mean over draft blocks of 1 + min(accepted, k).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Iterable

from calibrate.run.decode_records import DecodeResult
from specsim.engines import vllm
from specsim.engines.vllm import SpecCounters
from specsim.errors import SpecsimError

_HELP = {  # vLLM's documentation strings (vllm/v1/spec_decode/metrics.py, SpecDecodingProm)
    vllm.DRAFTS: "Number of spec decoding drafts.",
    vllm.DRAFT_TOKENS: "Number of draft tokens.",
    vllm.ACCEPTED: "Number of accepted tokens.",
    vllm.PER_POS: "Accepted tokens per draft position.",
}


def _draft_blocks(results: Iterable[DecodeResult]):
    results = list(results)
    gammas = {r.gamma for r in results}
    if len(gammas) != 1 or 0 in gammas:
        raise SpecsimError(
            f"export: expected speculative runs at one gamma >= 1, got gammas {sorted(gammas)}"
        )
    return gammas.pop(), [b for r in results for b in r.blocks if b.gamma > 0]


def counters_from_results(results: Iterable[DecodeResult]) -> SpecCounters:
    """vLLM's four counters for these runs (K = their γ)."""
    k, blocks = _draft_blocks(results)
    per_pos = [0] * k
    for b in blocks:
        for i in range(b.accepted):
            per_pos[i] += 1
    return SpecCounters(
        drafts=len(blocks),
        draft_tokens=sum(b.gamma for b in blocks),
        accepted=sum(b.accepted for b in blocks),
        accepted_per_pos=tuple(per_pos),
    )


def engine_tau(results: Iterable[DecodeResult], k: int) -> float:
    """The engine's τ(k) for k ≤ K: Σ over draft blocks of (1 + min(accepted, k)) / blocks (one integer
    ratio)."""
    big_k, blocks = _draft_blocks(results)
    if not 1 <= k <= big_k:
        raise SpecsimError(f"k: expected 1..{big_k}, got {k}")
    if not blocks:
        raise SpecsimError("export: no draft blocks in these runs")
    return sum(1 + min(b.accepted, k) for b in blocks) / len(blocks)


def exposition_text(counters: SpecCounters, model_name: str, engine: str = "0") -> str:
    """``GET /metrics`` text of vLLM's spec-decode counters (``_total`` samples plus ``_created``)."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    values = {
        vllm.DRAFTS: counters.drafts,
        vllm.DRAFT_TOKENS: counters.draft_tokens,
        vllm.ACCEPTED: counters.accepted,
    }
    for name, value in values.items():
        Counter(name, _HELP[name], labelnames=labels, registry=registry).labels(model_name, engine).inc(value)
    per_pos = Counter(
        vllm.PER_POS, _HELP[vllm.PER_POS], labelnames=labels + [vllm.POSITION_LABEL], registry=registry
    )
    for pos, value in enumerate(counters.accepted_per_pos):
        per_pos.labels(model_name, engine, str(pos)).inc(value)
    return generate_latest(registry).decode("utf-8")
