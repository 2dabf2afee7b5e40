"""Measure the server loop's costs (:class:`specsim.profile_format.batched_cost.ServerLoopCosts`) against the
batched grid, and the batched cost as ``calibrate latency`` measures it (:func:`measure_batched`: grid, then
loop).

The loop (:mod:`calibrate.run.server_loop`) is timed per B and γ (0: target-only) on 2B synthetic requests
arriving near saturation. A step's loop overhead = a + b·(requests decoding) + c·(requests joining or
leaving), so 2c per request; plus the prefills' set-up, cold passes and pass scales after an admission.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from calibrate.measure.batch_grid_sweep import BatchSweepPlan, batched_costs, ragged_requests, run_rounds
from calibrate.models.loaded_model import LoadedModel
from calibrate.run.batch_engine import PaddedCache, batch_prefill_phase, batch_target_step
from calibrate.run.engine import unwrap
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import TARGET, draft_steps_ms
from specsim.errors import SpecsimError
from specsim.profile_format.batched_cost import BatchedCosts, ServerLoopCosts

PASS_SCALE_STEPS = 8  # buckets of steps since an admission: 0 .. 6 and 7 or later
# More than a server CPU's last-level cache share: after streaming it, every weight comes from memory again.
FLUSH_BYTES = 64 * 2**20


@dataclass(frozen=True)
class LoopPass:
    """One decode step of the loop as a pass record: steps since the last admission, γ, requests decoding, the
    target's cache width, and the draft's and the target's ms."""

    since_admission: int
    gamma: int
    decoding: int
    width: int
    draft_ms: float
    verify_ms: float


def loop_passes(run) -> list[LoopPass]:
    """The decode steps of a :class:`calibrate.run.server_loop.LoopRun` as :class:`LoopPass` records."""
    out, since = [], 0
    for st in run.steps:
        since = 0 if st.admitted else since + 1
        if st.decoding:
            out.append(LoopPass(since, st.gamma, st.decoding, st.width, st.draft_ms, st.verify_ms))
    return out


def loop_pass_scales(
    passes: list[LoopPass], batched: BatchedCosts, steps: int = PASS_SCALE_STEPS
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(target, draft) Σ loop ms / Σ grid ms by steps since the last admission (module docstring); a bucket
    with no pass takes the nearest later bucket's value, else the nearest earlier one's (empty: none)."""
    sums = np.zeros((2, steps, 2))  # [target/draft, bucket, measured/grid]
    cost = GridPassCost(None, batched)
    for p in passes:
        k = min(p.since_admission, steps - 1)
        sums[0, k] += (p.verify_ms, float(cost.pass_ms(TARGET, p.gamma + 1, float(p.width), p.decoding).ms))
        if p.gamma:
            draft, _ = draft_steps_ms(cost, p.width + np.arange(p.gamma), p.decoding)
            sums[1, k] += (p.draft_ms, float(np.sum(draft)))
    return _filled(sums[0]), _filled(sums[1])


def _filled(sums: np.ndarray) -> tuple[float, ...]:
    have = sums[:, 1] > 0
    if not have.any():
        return ()
    ratio = np.where(have, sums[:, 0] / np.where(have, sums[:, 1], 1.0), np.nan)
    for k in range(len(ratio) - 2, -1, -1):  # from the later bucket
        if np.isnan(ratio[k]):
            ratio[k] = ratio[k + 1]
    for k in range(1, len(ratio)):  # trailing gaps from the earlier one
        if np.isnan(ratio[k]):
            ratio[k] = ratio[k - 1]
    return tuple(float(np.clip(r, 0.1, 10.0)) for r in ratio)


def prefill_setup_ms(steps) -> tuple[float, float]:
    """(target-only, SD) ms per admitted request of the loop's prefills outside the models' forwards:
    Σ (prefill ms − forward ms) / Σ requests admitted over ``steps``
    (:class:`calibrate.run.server_loop.LoopStep` records) with γ = 0 and γ > 0 (0 where none admitted;
    never below 0)."""
    sums = np.zeros((2, 2))
    for s in steps:
        sums[int(s.gamma > 0)] += (s.prefill_ms - s.prefill_forward_ms, s.admitted)
    ms = sums[:, 0] / np.maximum(sums[:, 1], 1.0)
    return float(max(ms[0], 0.0)), float(max(ms[1], 0.0))


def arrival_spacing_s(batched: BatchedCosts, batch: int, new_tokens: int, width: float) -> float:
    """Seconds between arrivals that keep about ``batch`` requests of ``new_tokens`` running: one target-only
    step at B and ``width`` from ``batched``'s grid, × new tokens / B."""
    ms, _ = GridPassCost(None, batched).pass_ms(TARGET, 1, float(width), batch)
    return float(ms) * new_tokens / batch / 1e3


def server_loop_costs(
    models: dict[str, LoadedModel],
    plan: BatchSweepPlan,
    batched: BatchedCosts,
    on_run: Callable[[], None] | None = None,
) -> tuple[ServerLoopCosts, list[LoopPass]]:
    """The server loop's overhead per step and per request and its cold-pass scale (module docstring; arrivals
    spaced by ``batched``'s grid), and its decode steps as pass records (for :func:`with_pass_scales`)."""
    from calibrate.run.server_loop import serve_loop

    target, draft = models["target"], models["draft"]
    gen = torch.Generator().manual_seed(plan.seed + 1)
    rows: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # γ -> (ms, decoding, joined + left)
    admitting: list = []  # the runs' steps that admitted requests (their prefills' set-up)
    passes: list[LoopPass] = []
    gammas = (0, *plan.gammas)
    for rnd in range(plan.rounds + 1):  # the first round warms up and is thrown away
        for batch in plan.batch_sizes:
            spacing = arrival_spacing_s(batched, batch, plan.new_tokens, max(plan.prompt_tokens))
            for g in gammas:
                reqs = [
                    r
                    for n in plan.prompt_tokens
                    for r in ragged_requests(target, max(1, 2 * batch // len(plan.prompt_tokens)), n, gen)
                ][: 2 * batch]
                run = serve_loop(
                    target.model,
                    draft.model,
                    reqs,
                    [i * spacing for i in range(len(reqs))],
                    gamma=g,
                    max_new_tokens=plan.new_tokens,
                    max_num_seqs=batch,
                )
                if on_run:
                    on_run()
                if rnd == 0:
                    continue
                passes.extend(loop_passes(run))
                finish = [r.finish_s for r in run.requests]
                admitting.extend(s for s in run.steps if s.admitted)
                for s in run.steps:
                    other = (s.end_s - s.start_s) * 1e3 - s.prefill_ms - s.draft_ms - s.verify_ms
                    events = s.admitted + sum(1 for f in finish if f == s.end_s)
                    if s.decoding:
                        rows[g].append((other, s.decoding, events))
    fits, per_request = [], []
    for g in gammas:
        data = np.array(rows[g], dtype=float)
        design = np.column_stack([np.ones(len(data)), data[:, 1], data[:, 2]])
        coef, *_ = np.linalg.lstsq(design, data[:, 0], rcond=None)
        fits.append((float(coef[0]), float(coef[1])))
        per_request.append(float(coef[2]))
    gen = torch.Generator().manual_seed(plan.seed + 2)
    middle = plan.prompt_tokens[len(plan.prompt_tokens) // 2]
    scale = cold_pass_scale(target, max(plan.batch_sizes), middle, gen)
    prefill_host = prefill_setup_ms(admitting)
    joins = tuple(max(2.0 * c, 0.0) for c in per_request)
    costs = ServerLoopCosts(
        gammas,
        tuple(fits),
        max(2.0 * float(np.mean(per_request)), 0.0),
        scale,
        prefill_host_ms=prefill_host,
        ms_per_request_by_gamma=joins,
    )
    return costs, passes


def mean_loop_costs(rounds: list[ServerLoopCosts]) -> ServerLoopCosts:
    """The field-by-field mean of server-loop costs measured in several rounds (same γ values); the pass
    scales are left out (:func:`with_pass_scales` takes them from every round's passes)."""
    first = rounds[0]
    if any(r.gammas != first.gammas for r in rounds):
        raise SpecsimError(f"server loop rounds: expected the same gammas in every round, got {first.gammas}")

    def mean(name):
        return np.mean([np.asarray(getattr(r, name), dtype=float) for r in rounds], axis=0)

    return ServerLoopCosts(
        first.gammas,
        tuple(tuple(float(x) for x in pair) for pair in mean("step_ms")),
        float(mean("ms_per_request")),
        float(mean("cold_pass_ms_scale")),
        prefill_host_ms=tuple(float(x) for x in mean("prefill_host_ms")),
        ms_per_request_by_gamma=tuple(float(x) for x in mean("ms_per_request_by_gamma")),
    )


def with_pass_scales(loop: ServerLoopCosts, passes: list[LoopPass], batched: BatchedCosts) -> ServerLoopCosts:
    """``loop`` with its pass scales measured from ``passes`` against ``batched``'s grids."""
    target, draft = loop_pass_scales(passes, batched)
    return replace(loop, target_pass_scale=target, draft_pass_scale=draft)


def measure_batched(
    models: dict[str, LoadedModel],
    plan: BatchSweepPlan,
    on_run: Callable[[], None] | None = None,
    server_loop: bool = True,
) -> tuple[BatchedCosts, tuple[float, float | None]]:
    """Run the sweep (and the server loop's, unless ``server_loop`` is False); the batched costs and the
    seconds the grid and the server loop took (None: not timed)."""
    t0 = time.perf_counter()
    samples = run_rounds(models, plan, on_run)
    costs = batched_costs(samples, plan.batch_sizes, sorted(plan.gammas), plan.prompt_tokens)
    grid_s = time.perf_counter() - t0
    if not server_loop:
        return costs, (grid_s, None)
    loop, passes = server_loop_costs(models, plan, costs, on_run)
    costs = replace(costs, server_loop=with_pass_scales(loop, passes, costs))
    return costs, (grid_s, time.perf_counter() - t0 - grid_s)


def cold_pass_scale(
    target: LoadedModel, batch: int, longest: int, generator, *, steps: int = 60, max_seconds: float = 20.0
) -> float:
    """Median ms of a target-only step of the batched engine right after the CPU's caches are flushed, over
    the median of one right after another step (alternating; at least 8 of each, within ``max_seconds``):
    what a pass pays when the server loop ran prefills or the vision encoder before it instead of another
    pass, as the grid does. About 1 where the weights never stay in cache (a large model)."""
    tm = unwrap(target.model)
    cache = PaddedCache(tm, batch, tm.device)
    inputs, live = batch_prefill_phase(tm, ragged_requests(target, batch, longest, generator), 0)
    junk = torch.zeros(FLUSH_BYTES // 4)
    warm, cold = [], []
    t0 = time.perf_counter()
    with torch.inference_mode():
        nxt, _ = batch_target_step(cache, inputs, live)  # the prompt's pass
        live = torch.ones(batch, 1, dtype=torch.long, device=tm.device)
        for i in range(steps):
            if i >= 16 and time.perf_counter() - t0 > max_seconds:
                break
            if i % 2 == 0:
                junk.add_(1.0)  # stream FLUSH_BYTES through the caches
            nxt, ms = batch_target_step(cache, {"input_ids": nxt[:, None]}, live)
            (cold if i % 2 == 0 else warm).append(ms)
    return float(np.median(cold) / np.median(warm))
