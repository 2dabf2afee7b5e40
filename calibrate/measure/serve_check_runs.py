"""Real runs for ``specsim check --serve-rates``: the server loop (:mod:`calibrate.run.server_loop`) at each
request rate, target-only and SD per (method, γ), interleaved, in rounds.

Arrivals are a Poisson process at the rate, seeded by (``seed``, rate index). Rounds stop from
``min_rounds`` on once every side's p50 TPOT, p90 TTFT and output tokens/s have a relative 95% half-width
≤ ``halfwidth``, or at ``max_rounds`` / ``max_seconds``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from calibrate.run.timing import out_of_time


@dataclass
class ServeRuns:
    """Per (rate, side) the rounds' :class:`specsim.check.serve_comparison.ServedTimes`; a side is
    ("target", 0) or (method, γ). ``order``: each request's (scenario group, prompt index) in the workload;
    ``image_tokens``: the prompt positions one image fills."""

    runs: dict[tuple, list] = field(default_factory=dict)
    arrivals: dict[float, np.ndarray] = field(default_factory=dict)
    order: list[tuple[int, int]] = field(default_factory=list)
    image_tokens: int = 0  # prompt positions one image fills (0: no images)
    rounds: int = 0
    seconds: float = 0.0


def workload_order(setup, requests: int) -> list[tuple[int, int]]:
    """(group, index in the group) of each request: the groups interleaved, each group's prompts in turn."""
    groups = list(setup.groups)
    seen = dict.fromkeys(groups, 0)
    out = []
    for i in range(requests):
        g = groups[i % len(groups)]
        out.append((g, seen[g] % len(setup.groups[g])))
        seen[g] += 1
    return out


def image_count(request) -> int:
    """Images of ``request`` (rows of its ``pixel_values``; 0 without)."""
    pixels = request.target_kwargs.get("pixel_values")
    return 0 if pixels is None else int(pixels.shape[0])


def served_times(run, images: list[int], image_tokens: int):
    """A :class:`calibrate.run.server_loop.LoopRun` as ServedTimes (prompt text tokens = positions − images ×
    image positions)."""
    from specsim.check.serve_comparison import ServedTimes

    reqs, steps = run.requests, run.steps
    sd = [s for s in steps if s.gamma]
    return ServedTimes(
        arrival_s=tuple(r.arrival_s for r in reqs),
        first_token_s=tuple(r.first_token_s for r in reqs),
        finish_s=tuple(r.finish_s for r in reqs),
        token_times_s=tuple(r.token_times_s for r in reqs),
        prompt_tokens=tuple(r.prompt_tokens - n * image_tokens for r, n in zip(reqs, images)),
        images=tuple(images),
        draft_tokens=sum(s.gamma * s.decoding for s in sd),
        accepted_tokens=sum(sum(s.accepted) for s in sd),
        sd_blocks=sum(s.decoding for s in sd),
        steps=len(steps),
        busy_s=sum(s.end_s - s.start_s for s in steps),
        target_passes=tuple((s.gamma + 1, s.width, s.decoding, s.verify_ms) for s in steps if s.decoding),
    )


def run_serve_check(
    setup,
    rates: list[float],
    sides: list[tuple[str, int]],
    *,
    requests: int,
    max_new_tokens: int,
    max_num_seqs: int,
    seed: int,
    halfwidth: float,
    min_rounds: int,
    max_rounds: int,
    max_seconds: float | None = None,
    progress: Callable | None = None,
    before_round: Callable[[int], None] | None = None,
    acceptance=None,
) -> ServeRuns:
    """Interleaved server-loop runs in rounds (module docstring); ``sides`` the SD (method, γ) pairs;
    ``before_round(rnd)`` runs before each round (``check --remeasure-batched``: a round of the batched cost's
    sweep); ``acceptance``: the synthetic schedule SD sides accept by."""
    from calibrate.drafting.contexts import image_runs
    from calibrate.measure.batch_check_runs import members_of
    from calibrate.run.server_loop import serve_loop
    from specsim.check.serve_comparison import headline_halfwidth
    from specsim.serve.arrivals import poisson_arrivals

    out = ServeRuns(order=workload_order(setup, requests))
    reqs = [setup.groups[g][i] for g, i in out.order]
    images = [image_count(r) for r in reqs]
    image_tokens = out.image_tokens = max((image_runs(r)[1] for r in reqs), default=0)
    members = {m: members_of(setup.drafter(m)) for m in {m for m, _ in sides}}
    all_sides = [("target", 0), *sides]
    for k, rate in enumerate(rates):
        out.arrivals[rate] = poisson_arrivals(requests, rate, np.random.default_rng([seed, k]))
        for side in all_sides:
            out.runs[(rate, side)] = []

    def serve(side, arrival_s, reqs_=reqs):
        m, g = side
        return serve_loop(
            setup.target,
            setup.draft,
            reqs_,
            list(arrival_s),
            gamma=g,
            max_new_tokens=max_new_tokens,
            max_num_seqs=max_num_seqs,
            members=members.get(m),  # pads are masked, so the loop's default pad id serves
            eos_token_id=setup.eos,
            method=m,
            acceptance=acceptance,
        )

    for side in all_sides:  # warm-up: first-call allocations, thrown away
        serve(side, [0.0] * min(2, requests), reqs[:2])
    active = {(rate, side) for rate in rates for side in all_sides}
    t0 = time.perf_counter()
    for rnd in range(max_rounds):
        if before_round:
            before_round(rnd)
        order = rates[rnd % len(rates) :] + rates[: rnd % len(rates)]
        for i, rate in enumerate(progress(order, rnd) if progress else order):
            j = (i + rnd) % len(all_sides)
            for side in all_sides[j:] + all_sides[:j]:
                if (rate, side) in active:
                    run = serve(side, out.arrivals[rate])
                    out.runs[(rate, side)].append(served_times(run, images, image_tokens))
        out.rounds = rnd + 1
        if rnd + 1 >= min_rounds:
            active = {key for key in active if headline_halfwidth(out.runs[key]) > halfwidth}
        if not active or out_of_time(t0, max_seconds, rnd + 1, min_rounds):
            break
    out.seconds = time.perf_counter() - t0
    return out


def serve_check_rows(
    runs: ServeRuns,
    profile,
    *,
    entries: dict,
    traces: dict,
    groups: list,
    sides: list[tuple[str, int]],
    scenario: str,
    rates,
    new_tokens: int,
    max_num_seqs: int,
    seed: int,
):
    """Per rate, target-only and every SD side: the simulation of the measured requests (each replaying its
    own prompt's trace, :func:`specsim.check.serve_comparison.predicted_run`) beside the rounds' runs, one
    :class:`~specsim.profile_format.ServeCheckRow` each; and the host's pass drift against the profile."""
    from specsim.check.serve_comparison import pass_drift, predicted_run, serve_check_row

    drift = pass_drift(profile, [t for times in runs.runs.values() for t in times])
    rows = []
    for rate in rates:
        for side in [("target", 0), *sides]:
            measured = runs.runs[(rate, side)]
            m, g = side
            predicted = predicted_run(
                profile,
                measured[0].requests(),
                gamma=g,
                entries=[entries[(grp, m)] for grp in groups] if g else [],
                traces=traces.get(m, []),
                image_tokens_per_image=runs.image_tokens,
                max_num_seqs=max_num_seqs,
            )
            rows.append(
                serve_check_row(
                    measured,
                    predicted,
                    method=m,
                    scenario=scenario,
                    gamma=g,
                    rate_per_s=rate,
                    new_tokens=new_tokens,
                    max_num_seqs=max_num_seqs,
                    seed=seed,
                    drift=drift,
                )
            )
    return rows, drift
