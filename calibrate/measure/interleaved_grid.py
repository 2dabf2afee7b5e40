"""A profile's batched cost measured again inside a check, in rounds between the check's own rounds.

``check --remeasure-batched`` runs the batched sweep of :mod:`calibrate.measure.batch_grid_sweep` in the
check's process, alternating with the check's rounds, so that grid and rows are timed in the same minutes of
a shared CPU host whose speed drifts; the grid is fitted from all its rounds at the end.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from dataclasses import replace

from calibrate.measure.batch_grid_sweep import (
    BatchSweepPlan,
    Samples,
    batched_costs,
    run_rounds,
    runs_unpadded,
    sweep_prompt_lengths,
)
from calibrate.measure.server_loop_costs import mean_loop_costs, server_loop_costs, with_pass_scales


class InterleavedGrid:
    """The batched sweep of ``profile``'s grid (batch sizes, γ) for the check ``setup``'s models and prompts,
    one round at a time (module docstring); ``seconds`` it has run."""

    def __init__(self, profile, setup, *, seed: int = 0):
        old = profile.latency.forward_costs().batched
        self.profile = profile
        self.models = {"target": setup.target, "draft": setup.draft}
        positions = sorted(int(r.input_ids.shape[1]) for r in setup.requests)
        self.plan = BatchSweepPlan(
            batch_sizes=old.batch_sizes,
            gammas=tuple(old.overhead_ms_per_block.gamma),
            prompt_tokens=sweep_prompt_lengths(positions[0], positions[len(positions) // 2], positions[-1]),
            rounds=1,
            seed=seed,
            unpadded=runs_unpadded(positions),
        )
        self.samples, self.rounds, self.seconds = Samples(), {}, 0.0
        self.loop_costs, self.loop_passes, self.kept_loop = [], [], old.server_loop

    def round(self, batch_sizes=None) -> None:
        """One sweep round at ``batch_sizes`` (default: all of the grid's); a new seed every round."""
        sizes = tuple(batch_sizes or self.plan.batch_sizes)
        t0 = time.perf_counter()
        seed = self.plan.seed + 1000 * sum(self.rounds.values())
        self.samples.merge(run_rounds(self.models, replace(self.plan, batch_sizes=sizes, seed=seed)))
        for b in sizes:
            self.rounds[b] = self.rounds.get(b, 0) + 1
        self.seconds += time.perf_counter() - t0

    def measure_server_loop(self) -> None:
        """One round of the server loop's costs and its cold-pass scale, measured now (averaged over the
        rounds, and its pass scales taken against the grid of every round, when the profile is fitted)."""
        t0 = time.perf_counter()
        old = self.profile.latency.forward_costs().batched  # spaces the loop's arrivals as the profile's grid
        plan = replace(self.plan, seed=self.plan.seed + 7919 * len(self.loop_costs))
        costs, passes = server_loop_costs(self.models, plan, old)
        self.loop_costs.append(costs)
        self.loop_passes.extend(passes)
        self.seconds += time.perf_counter() - t0

    def serving_round(self) -> None:
        """What runs before each serving round (module docstring): a sweep round at every batch size, then a
        round of the server loop's costs."""
        self.round()
        self.measure_server_loop()

    def complete(self, min_rounds: int) -> None:
        """Rounds for the grid's batch sizes that have fewer than ``min_rounds`` (at least 1)."""
        for b in self.plan.batch_sizes:
            while self.rounds.get(b, 0) < max(min_rounds, 1):
                self.round((b,))

    def measured_profile(self):
        """``profile`` with the batched cost fitted from every round so far (the server loop's costs as
        measured here, else kept)."""
        plan = self.plan
        costs = batched_costs(self.samples, plan.batch_sizes, sorted(plan.gammas), plan.prompt_tokens)
        loop = mean_loop_costs(self.loop_costs) if self.loop_costs else self.kept_loop
        if self.loop_costs and self.loop_passes:
            loop = with_pass_scales(loop, self.loop_passes, costs)
        costs = replace(costs, server_loop=loop)
        model = replace(self.profile.latency.forward_costs(), batched=costs)
        return replace(self.profile, latency=replace(self.profile.latency, cost_model=model))
