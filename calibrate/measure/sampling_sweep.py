"""Timing of what sampling adds to the engine (:class:`specsim.profile_format.sampling_cost.SamplingCost`).

The engine's own token choice (:func:`calibrate.run.engine.pick`) for a draft token and a target-only
token, and its acceptance (:func:`calibrate.run.engine.accept_phase`) of a block of γ drafts, on random
logits of the models' vocabularies, greedy (T = 0) and sampled (T = 1), interleaved. The profile keeps
the sampled − greedy medians, clipped at 0: the greedy costs are already inside the engine-shaped grids.
The work depends on the vocabulary and γ, not on the context or the logits' values.
"""

from __future__ import annotations

from calibrate.models.loaded_model import LoadedModel
from calibrate.run.timing import Timing, measure_interleaved
from specsim.profile_format.sampling_cost import SamplingCost

SAMPLING_KEY = "sampling"  # the unit's own key in the latency partial file
TEMPERATURES = (0.0, 1.0)


def _key(what: str, t: float) -> str:
    return f"sampling.{what}.T={t:g}"


def sampling_timings(
    models: dict[str, LoadedModel],
    gammas,
    *,
    generator,
    warmup: int,
    min_repeats: int,
    max_repeats: int,
    target_rel_halfwidth: float,
    max_seconds: float | None,
) -> dict[str, Timing]:
    """Timings of draws and acceptances (keys :func:`_key`), plus the unit's own key."""
    import torch

    from calibrate.run.engine import accept_phase, pick
    from calibrate.run.proposal import Proposal

    target = models["target"]
    device = target.device
    draw = torch.Generator(device=str(device)).manual_seed(
        int(torch.randint(0, 2**31, (1,), generator=generator))
    )
    calls = {}
    for role in ("draft", "target"):
        row = torch.randn(models[role].vocab_size, generator=generator).to(models[role].device)
        for t in TEMPERATURES:
            calls[_key(role, t)] = (lambda row=row, t=t: pick(row, t, draw), None)
    vocab = target.vocab_size
    logits = torch.randn(max(gammas) + 1, vocab, generator=generator).to(device)
    for g in (0, *gammas):
        proposal = Proposal(
            tokens=torch.randint(0, vocab, (g,), generator=generator).to(device),
            q_probs=torch.softmax(torch.randn(g, vocab, generator=generator), -1).to(device),
            model_ms=0.0,
        )
        for t in TEMPERATURES:
            calls[_key(f"accept.g={g}", t)] = (
                lambda p=proposal, g=g, t=t: accept_phase(logits[: g + 1], p, t, draw),
                None,
            )
    with torch.inference_mode():
        out = measure_interleaved(
            calls,
            device=device,
            warmup=warmup,
            min_repeats=min_repeats,
            max_repeats=max_repeats,
            target_rel_halfwidth=target_rel_halfwidth,
            max_seconds=max_seconds,
        )
    return out | {SAMPLING_KEY: out[_key("target", 1.0)]}


def sampling_cost(timings: dict[str, Timing], gammas) -> SamplingCost | None:
    """The added ms of sampling from a finished run's timings; None when they were not measured."""
    gs = (0, *sorted(gammas))
    keys = [_key(w, t) for w in ("draft", "target", *(f"accept.g={g}" for g in gs)) for t in TEMPERATURES]
    if not all(k in timings for k in keys):
        return None

    def added(what: str) -> float:
        return max(0.0, timings[_key(what, 1.0)].median_ms - timings[_key(what, 0.0)].median_ms)

    return SamplingCost(
        draft_step_ms=added("draft"),
        target_step_ms=added("target"),
        accept_gammas=gs,
        accept_ms=tuple(added(f"accept.g={g}") for g in gs),
    )
