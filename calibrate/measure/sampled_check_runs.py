"""Real sampled runs for ``specsim check --temperature T``: every prompt × method × γ once per seed, with
target-only decoding at the same T around them, reduced to :class:`specsim.check.comparison.RequestRun`.

A round is one seed: per prompt, target-only decoding, every method × γ, then target-only decoding again
(the prompt order and the order of the runs rotate from round to round, as in
:mod:`calibrate.measure.check_runs`, so slow drift of the machine hits every row alike). Every run samples
from its own ``torch.Generator``, seeded from (``seed``, round, prompt, run) through numpy's
``SeedSequence``: runs are reproducible and independent of each other and of how many rows run beside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from calibrate.measure.check_runs import prompt_spec, request_run
from specsim.check.comparison import PromptSpec, RequestRun
from specsim.check.sampled import sampled_row
from specsim.check.sampled_runs import SampledMeasured, measure_sampled

WARMUP_KEY = 0  # SeedSequence keys: (0,) warm-up, (1, round, prompt, run) measured runs


def run_seed(seed: int, *keys: int) -> int:
    """A 63-bit generator seed for one run from the user's ``seed`` and the run's indices."""
    import numpy as np

    return int(np.random.SeedSequence([seed, *keys]).generate_state(1, np.uint64)[0]) & (2**63 - 1)


def _generator(seed: int, device):
    import torch

    return torch.Generator(device=str(device)).manual_seed(seed)


@dataclass
class SampledRuns:
    """Per prompt the target-only runs of every round (before, after); per (method, γ) and prompt the SD
    run of every round; where each prompt's walk starts (from the first round); rounds done, seconds."""

    base: dict[str, list[tuple[RequestRun, RequestRun]]] = field(default_factory=dict)
    sd: dict[tuple[str, int], dict[str, list[RequestRun]]] = field(default_factory=dict)
    specs: dict[tuple[str, str], PromptSpec] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0

    def measured(self, method: str, gamma: int, prompt_ids: list[str]) -> SampledMeasured:
        """The measured side of one row (prompts of one scenario group)."""
        runs = self.sd[(method, gamma)]
        return measure_sampled({p: self.base[p] for p in prompt_ids}, {p: runs[p] for p in prompt_ids})


def run_sampled_check(
    setup,
    gammas: list[int],
    *,
    temperature: float,
    seeds: int,
    max_new_tokens: int,
    device="cpu",
    seed: int = 0,
    max_seconds: float | None = None,
    progress: Callable | None = None,
) -> SampledRuns:
    """``seeds`` rounds of sampled runs (see the module docstring); after 2 rounds, no new round starts
    once ``max_seconds`` have passed. ``setup`` is a :class:`calibrate.workload.run_setup.Setup`."""
    from calibrate.run.engine import speculative_decode, target_decode

    kw = {
        "max_new_tokens": max_new_tokens,
        "eos_token_id": setup.eos,
        "device": device,
        "temperature": temperature,
    }
    gen = lambda *keys: _generator(run_seed(seed, *keys), setup.target.device)  # noqa: E731
    drafters = {m: setup.drafter(m) for m in setup.methods}
    rows = [(m, g) for m in setup.methods for g in gammas]
    warm = setup.requests[0]
    target_decode(setup.target, warm, **kw | {"max_new_tokens": 4}, generator=gen(WARMUP_KEY))
    for d in drafters.values():
        speculative_decode(
            setup.target, d, warm, gamma=max(gammas), **kw | {"max_new_tokens": 4}, generator=gen(WARMUP_KEY)
        )
    images = {r.prompt_id: len(p.images) for p, r in zip(setup.prompts, setup.requests)}
    runs = SampledRuns(
        base={r.prompt_id: [] for r in setup.requests},
        sd={row: {r.prompt_id: [] for r in setup.requests} for row in rows},
    )
    indexed = list(enumerate(setup.requests))
    t0 = time.perf_counter()
    for rnd in range(seeds):
        order = indexed[rnd % len(indexed) :] + indexed[: rnd % len(indexed)]
        for j, (i, req) in enumerate(progress(order, rnd) if progress else order):
            before = request_run(target_decode(setup.target, req, **kw, generator=gen(1, rnd, i, 0)))
            first = (j + rnd) % len(rows)
            for k in [*range(first, len(rows)), *range(first)]:
                m, g = rows[k]
                out = speculative_decode(
                    setup.target, drafters[m], req, gamma=g, **kw, generator=gen(1, rnd, i, k + 2)
                )
                runs.sd[(m, g)][req.prompt_id].append(request_run(out))
                if rnd == 0:
                    runs.specs[(m, req.prompt_id)] = prompt_spec(out, images[req.prompt_id], max_new_tokens)
            after = request_run(target_decode(setup.target, req, **kw, generator=gen(1, rnd, i, 1)))
            runs.base[req.prompt_id].append((before, after))
        runs.rounds = rnd + 1
        if rnd >= 1 and max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
    runs.seconds = time.perf_counter() - t0
    return runs


def sampled_rows(
    profile, setup, entries: dict, runs: SampledRuns, gammas: list[int], *, temperature: float, rng
) -> list:
    """Sampled check rows per scenario group × method × γ (:func:`specsim.check.sampled.sampled_row`)."""
    rows = []
    for n, reqs in setup.groups.items():
        ids = [r.prompt_id for r in reqs]
        for m in setup.methods:
            specs = [runs.specs[(m, p)] for p in ids]
            for g in gammas:
                measured, entry = runs.measured(m, g, ids), entries[(n, m)]
                rows.append(sampled_row(profile, entry, g, specs, measured, temperature=temperature, rng=rng))
    return rows
