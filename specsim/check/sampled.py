"""Sampled-mode ``specsim check`` (T > 0): measured τ and speedup of seeded runs vs 95% prediction intervals
from a Monte Carlo over the profile's traces; measured by :func:`specsim.check.sampled_runs.measure_sampled`.

:func:`predict_sampled`: a simulated run picks one of the prompt's K sampled target paths y
(``Trace.accept_paths``) and accepts at t with probability r_t = min(1, q_t(y_t) / p_t(y_t)), exact given y
(Leviathan et al. 2023, §3.5; E[r_t] = β_t); blocks priced by :func:`specsim.predict.chain_costs.block_ms`.
A replicate resamples the K paths and draws one run per measured run; the central 95% of the replicates is
the interval, widened by timing noise. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from specsim.acceptance.montecarlo import central_interval
from specsim.acceptance.theory import tau_iid
from specsim.check.comparison import PromptSpec, compared_row
from specsim.check.sampled_runs import SampledMeasured, acceptance_paths, replicate_runs
from specsim.costs.grid_pass_cost import GridPassCost
from specsim.draft_shapes.block_plans import BlockPlan, greedy_plan
from specsim.errors import SpecsimError
from specsim.predict.chain_costs import block_ms, sd_request_cost, target_request_cost
from specsim.predict.pricing import TERMS, setup_ms, target_only
from specsim.profile_format import CheckRow, MethodAcceptance, Profile

CI = 0.95
POOL_RUNS = 256  # simulated runs per prompt and run length (at least 32 per sampled path)
REPLICATES = 4000  # simulated repeats of the whole measurement (percentile error ~0.3% of the tail mass)


# --------------------------------------------------------------------------- predicted
@dataclass(frozen=True)
class RunPool:
    """``runs`` simulated SD runs of one prompt at one length: blocks, decode-phase tokens and drafts
    (blocks after the first) and, with a cost model, decode-phase ms by term and request ms (the fused
    first block plus the decode phase; set-up excluded)."""

    blocks: np.ndarray
    decode_tokens: np.ndarray
    drafts: np.ndarray
    terms_ms: dict | None
    request_ms: np.ndarray | None
    extrapolated: bool = False

    @property
    def decode_ms(self) -> np.ndarray:
        return sum(self.terms_ms.values())


def simulate_pool(
    beta: np.ndarray,
    spec: PromptSpec,
    gamma: int,
    *,
    rng: np.random.Generator,
    runs: int,
    cost=None,
    batch: int = 1,
    adaptive: bool = False,
) -> RunPool:
    """Simulated runs of one prompt at γ over acceptance probabilities ``beta``: [n] (one value per emitted
    token) or [K, n] (K paths; run i follows path i mod K); see the module docstring."""
    paths = np.atleast_2d(beta)
    n = paths.shape[1]
    draws = rng.random((runs, n)) < paths[np.arange(runs) % paths.shape[0]]
    plans = [greedy_plan(row, gamma, spec.max_new_tokens) for row in draws]
    blocks = np.array([p.blocks for p in plans])
    decode_tokens = np.array([n - p.emitted[0] for p in plans])
    rest = [p.after_first() for p in plans]
    owner = np.repeat(np.arange(runs), [r.start.size for r in rest])
    big = BlockPlan(
        *(
            np.concatenate([getattr(r, f) for r in rest])
            for f in ("start", "drafts", "emitted", "first_rows", "weight")
        )
    )
    per_run = lambda x: np.bincount(owner, weights=x, minlength=runs)  # noqa: E731
    if cost is None:
        return RunPool(blocks, decode_tokens, per_run(big.drafts), None, None)
    kw = {
        "target_prompt_tokens": spec.prompt_tokens,
        "draft_prompt_tokens": spec.draft_prompt_tokens,
        "batch": batch,
        "adaptive": adaptive,
    }
    ms = block_ms(cost, big, **kw)
    smp = cost.sampling  # what drawing tokens adds to the greedy-calibrated walk (None: not measured)
    added = (0.0, 0.0) if smp is None else (big.drafts * smp.draft_step_ms, smp.accept_ms_at(big.drafts))
    terms = {
        "draft": per_run(ms.draft_first_ms + ms.draft_next_ms + added[0]),
        "verify": per_run(ms.verify_ms),
        "overhead": per_run(ms.overhead_ms + added[1]),
    }
    g0 = plans[0].drafts[:1]  # the first block is the same in every run: it starts at 0
    first = sd_request_cost(cost, BlockPlan(np.zeros(1), g0, np.ones(1), np.ones(1), np.ones(1)), **kw)
    first_ms = first.total_ms + (0.0 if smp is None else float(smp.block_ms(g0)[0]))
    return RunPool(
        blocks,
        decode_tokens,
        per_run(big.drafts),
        terms,
        first_ms + sum(terms.values()),
        extrapolated=ms.extrapolated or first.extrapolated,
    )


@dataclass(frozen=True)
class SampledPrediction:
    """The predicted side of one sampled row: means and central intervals over the replicates; the decode
    interval covers acceptance randomness only (the row widens it by timing noise)."""

    tau: float
    tau_interval: tuple[float, float]
    decode_speedup: float
    decode_interval: tuple[float, float]
    request_speedup: float | None
    terms_ms_per_block: dict
    c: float
    alpha: float
    note: str


def _base_ms(cost, spec: PromptSpec, tokens: int) -> tuple[float, float, float]:
    """Target-only (decode-phase ms, decode-phase tokens, request ms without set-up) of one run of
    ``tokens``: :func:`specsim.predict.pricing.target_only`, plus a draw instead of an argmax per step."""
    step = 0.0 if cost.sampling is None else cost.sampling.target_step_ms
    if tokens < 2:
        request = target_request_cost(cost, prompt_tokens=spec.prompt_tokens, new_tokens=tokens)
        return 0.0, 0.0, request.total_ms + tokens * step
    request, dec = target_only(cost, spec.prompt_tokens, tokens)
    return dec.total_ms + (tokens - 1) * step, float(tokens - 1), request.total_ms + tokens * step


def _base_sums(cost, spec: PromptSpec, runs: tuple[int, ...], setup_ms: float) -> Counter:
    """Target-only decode-phase ms and tokens summed over a prompt's ``runs`` (their tokens), and their mean
    request ms with set-up."""
    out = Counter()
    for n in runs:
        dec_ms, dec_tok, req_ms = _base_ms(cost, spec, n)
        out.update({"dec_ms": dec_ms, "dec_tok": dec_tok, "req": (setup_ms + req_ms) / len(runs)})
    return out


def predict_sampled(
    profile: Profile,
    entry: MethodAcceptance,
    gamma: int,
    prompts: list[PromptSpec],
    measured: SampledMeasured,
    *,
    rng: np.random.Generator,
    pool_runs: int = POOL_RUNS,
    replicates: int = REPLICATES,
    ci: float = CI,
) -> SampledPrediction:
    """Replicates of the measured design (see the module docstring); ``rng`` drives every draw."""
    cost = GridPassCost.request(profile.latency)
    traces = {t.prompt_id: t for t in entry.traces if t.beta is not None or t.accept_paths}
    acc = {k: np.zeros(replicates) for k in ("tokens", "blocks", "dec_ms", "dec_tok", "req")}
    pooled = Counter()  # expected decode-phase sums over the design: ms by term, blocks, drafts
    base = Counter()
    extended = extrapolated = False
    betas, paths = [], set()
    for spec in prompts:
        if spec.prompt_id not in traces:
            raise SpecsimError(
                f"check: method {entry.method!r} has no beta trace for prompt {spec.prompt_id!r} "
                "(run 'specsim calibrate acceptance' on the same prompts)"
            )
        lengths, trace = measured.sd_tokens[spec.prompt_id], traces[spec.prompt_id]
        base_ms, sd_setup = setup_ms(cost, profile, entry, spec.images)
        k = len(trace.accept_paths or (None,))
        paths.update([k] if trace.accept_paths else [])
        # one resample of the paths per replicate and prompt (nothing to resample with one path)
        resample = rng.integers(0, k, size=(replicates, k)) if k > 1 else np.zeros((replicates, 1), dtype=int)
        for n, count in sorted(Counter(lengths).items()):
            beta, longer = acceptance_paths(trace, n)
            extended |= longer
            betas.append(np.repeat(beta.mean(0)[None], count, axis=0).ravel())
            # keeps the pool's own error of the mean <= 0.18 of the interval's sd; a whole number per path
            size = k * -(-max(pool_runs, 32 * count, 32 * k) // k)
            pool = simulate_pool(
                beta,
                spec,
                gamma,
                rng=rng,
                runs=size,
                cost=cost,
                batch=entry.draft_batch_size,
                adaptive=entry.adaptive,
            )
            idx = replicate_runs(rng, resample, size, count)
            acc["tokens"] += n * count
            acc["blocks"] += pool.blocks[idx].sum(1)
            acc["dec_tok"] += pool.decode_tokens[idx].sum(1)
            pooled.update({"blocks": count * (pool.blocks.mean() - 1), "drafts": count * pool.drafts.mean()})
            extrapolated |= pool.extrapolated
            acc["dec_ms"] += pool.decode_ms[idx].sum(1)
            acc["req"] += (sd_setup + pool.request_ms[idx]).sum(1) / len(lengths)
            pooled.update({t: count * pool.terms_ms[t].mean() for t in TERMS})
        base.update(_base_sums(cost, spec, measured.base_tokens[spec.prompt_id], base_ms))
    if np.any(acc["dec_tok"] == 0) or not base["dec_tok"]:
        raise SpecsimError("check: simulated runs emit all their tokens in the first block; no decode phase")
    tau = acc["tokens"] / acc["blocks"]
    alpha = float(np.concatenate(betas).mean())
    base_rate = base["dec_ms"] / base["dec_tok"]
    decode = base_rate / (acc["dec_ms"] / acc["dec_tok"])
    request = float(np.mean(base["req"] / acc["req"]))
    c = pooled["draft"] / max(pooled["drafts"], 1e-12) / base_rate
    terms = {t: float(pooled[t] / max(pooled["blocks"], 1e-12)) for t in TERMS}
    note = "cost-model walk of simulated blocks" + (
        "; a context outside the measured grid was extrapolated" if extrapolated else ""
    )
    note += (
        ""
        if cost.sampling
        else "; sampling cost not measured (re-run 'specsim calibrate latency'): greedy costs"
    )
    note += (
        "; runs longer than their path continue at its mean acceptance" if extended else ""
    ) + _paths_note(paths)
    return SampledPrediction(
        tau=float(tau.mean()),
        tau_interval=central_interval(tau, ci),
        decode_speedup=float(decode.mean()),
        decode_interval=central_interval(decode, ci),
        request_speedup=request,
        terms_ms_per_block=terms,
        c=float(c),
        alpha=alpha,
        note=f"Monte Carlo of acceptance ({pool_runs} runs per prompt, {replicates} replicates): " + note,
    )


def _paths_note(paths: set[int]) -> str:
    """What the acceptance came from: K sampled target paths per prompt, or β on the greedy output."""
    if not paths:
        return "; beta on the target's greedy output (no sampled paths)"
    return (
        f"; acceptance along {'/'.join(map(str, sorted(paths)))} sampled target paths per prompt, resampled "
        "in every replicate"
    )


def widen(center: float, interval: tuple[float, float], rel_halfwidth: float) -> tuple[float, float]:
    """``interval`` around ``center`` with each side's log-width combined in quadrature with
    log(1 + ``rel_halfwidth``) (independent noises; timing noise multiplies a speedup, so the lower end stays
    above 0: combined linearly it reached 0 past ±100 % and took in any measurement)."""
    lo, hi = interval
    noise = math.log1p(rel_halfwidth)
    down = math.hypot(math.log(center / lo), noise) if lo > 0 else math.inf
    up = math.hypot(math.log(hi / center), noise)
    return center * math.exp(-down), center * math.exp(up)


def sampled_row(
    profile: Profile,
    entry: MethodAcceptance,
    gamma: int,
    prompts: list[PromptSpec],
    measured: SampledMeasured,
    *,
    temperature: float,
    rng: np.random.Generator,
    **mc,
) -> CheckRow:
    """Predicted (Monte Carlo, with intervals) vs ``measured`` at one γ and temperature as a
    :class:`CheckRow`."""
    pred = predict_sampled(profile, entry, gamma, prompts, measured, rng=rng, **mc)
    hw = measured.timing_halfwidth
    if not math.isfinite(hw):
        raise SpecsimError("check: a sampled check needs at least 2 rounds (seeds) for its timing noise")
    textbook = float(tau_iid(pred.alpha, gamma)) / (gamma * pred.c + 1.0)
    return compared_row(
        entry,
        gamma,
        measured,
        tau=pred.tau,
        decode_speedup=pred.decode_speedup,
        request_speedup=pred.request_speedup,
        textbook=textbook,
        terms=pred.terms_ms_per_block,
        notes=f"{pred.note}; speedup interval widened by timing noise ±{hw:.1%}; textbook: v=1, iid "
        f"alpha = mean beta = {pred.alpha:.3f}",
        temperature=float(temperature),
        tau_interval=pred.tau_interval,
        speedup_interval=widen(pred.decode_speedup, pred.decode_interval, hw),
    )
