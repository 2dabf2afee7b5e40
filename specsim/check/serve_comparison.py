"""A serving check: the requests a real server loop served (``specsim check --serve-rates``) against the
simulation of the same workload, SD at a fixed γ or target-only.

Measured and predicted share one summary (:func:`specsim.serve.metrics.summarize`): :func:`measured_run`
turns the loop's stamps into a :class:`specsim.serve.simulator.ServeRun`; :func:`predicted_run` simulates
the same requests, arrivals, scheduler and greedy traces, every step priced from the profile. A row compares
:data:`specsim.profile_format.SERVE_METRICS` (mean over rounds, relative 95% half-width).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import TARGET
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.profile_format import SERVE_METRICS, MethodAcceptance, Profile, ServeCheckRow
from specsim.serve.arrivals import Requests
from specsim.serve.metrics import ServeMetrics, summarize
from specsim.serve.profile_cost import ProfileStepCost
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.simulator import ServeRun, simulate
from specsim.serve.speculation import ReplayAcceptance

HEADLINE = ("tpot_p50_ms", "ttft_p90_ms", "output_tokens_per_s")  # the three figures


@dataclass(frozen=True)
class ServedTimes:
    """One loop run in plain numbers: per request arrival, first token and finish (s), every token's stamp
    (s), prompt text tokens and images; the loop's drafts, accepted drafts, SD blocks, steps and busy s."""

    arrival_s: tuple[float, ...]
    first_token_s: tuple[float, ...]
    finish_s: tuple[float, ...]
    token_times_s: tuple[tuple[float, ...], ...]
    prompt_tokens: tuple[int, ...]
    images: tuple[int, ...]
    draft_tokens: int = 0
    accepted_tokens: int = 0
    sd_blocks: int = 0
    steps: int = 0
    busy_s: float = 0.0
    target_passes: tuple[tuple[int, int, int, float], ...] = ()  # (rows per request, width, B, ms) per step

    def requests(self) -> Requests:
        """The workload the loop served, its output tokens as emitted."""
        return Requests(
            np.asarray(self.arrival_s, dtype=float),
            np.asarray(self.prompt_tokens, dtype=np.int64),
            np.asarray(self.images, dtype=np.int64),
            np.asarray([len(t) for t in self.token_times_s], dtype=np.int64),
        )


def measured_run(times: ServedTimes) -> ServeRun:
    """The loop's run as a :class:`ServeRun`: ITL gaps from each request's successive stamps (a step that
    emits several tokens gives one gap and zeros, as the simulator counts them)."""
    gaps = [np.diff(np.asarray(t, dtype=float)) * 1e3 for t in times.token_times_s]
    all_gaps = np.concatenate(gaps) if gaps else np.empty(0)
    return ServeRun(
        times.requests(),
        np.asarray(times.first_token_s, dtype=float),
        np.asarray(times.finish_s, dtype=float),
        all_gaps[all_gaps > 0].astype(np.float32),
        int(np.sum(all_gaps <= 0)),
        times.steps,
        times.busy_s,
        times.draft_tokens,
        times.accepted_tokens,
        times.sd_blocks,
    )


def predicted_run(
    profile: Profile,
    requests: Requests,
    *,
    gamma: int,
    entries: Sequence[MethodAcceptance],
    traces: Sequence,
    image_tokens_per_image: int,
    max_num_seqs: int,
    cost=None,
    scheduler: SchedulerConfig | None = None,
) -> ServeRun:
    """The simulation of ``requests`` (module docstring); ``traces``: request i's greedy trace (its match
    array replayed), used when ``gamma`` > 0; ``entries``: the drafting method's acceptance entries; ``cost``
    and ``scheduler`` stand in for another server's (llama-server's: :mod:`specsim.serve.llama_step_cost`)."""
    if cost is None:
        cost = ProfileStepCost.from_profile(profile, image_tokens_per_image, entries if gamma else ())
    cost.passes.check_batch(max_num_seqs, "--max-num-seqs")
    prompts = requests.prompt_tokens + requests.images * image_tokens_per_image
    budget = int(max_num_seqs * (gamma + 1) + prompts.sum())  # every decode and every prompt fit a step
    scheduler = scheduler or SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=min(budget, 2**24), chunked_prefill=False
    )
    acceptance = None
    if gamma:
        if len(traces) != len(requests):
            raise SpecsimError(
                f"serving check: expected one trace per request ({len(requests)}), got {len(traces)}"
            )
        acceptance = ReplayAcceptance.from_matches([t.match for t in traces])
    return simulate(
        requests,
        cost=cost,
        policy=GammaPolicy(gamma),
        acceptance=acceptance,
        rng=np.random.default_rng(0),  # unused: trace replay draws nothing
        scheduler=scheduler,
    )


def pass_drift(profile: Profile, runs: Sequence[ServedTimes]) -> float | None:
    """Σ measured ms / Σ the profile's batched grid ms over the runs' target passes (decode or
    verification): how much slower (> 1) or faster this host ran than when the profile was measured. A
    diagnostic printed with the rows, not a correction."""
    cost = GridPassCost.batch(profile.latency, f"profile {profile.name!r}: no batched cost")
    measured = predicted = 0.0
    for run in runs:
        for rows, width, batch, ms in run.target_passes:
            grid = cost.pass_ms(TARGET, rows, width, batch).ms
            measured, predicted = measured + ms, predicted + float(grid)
    return measured / predicted if predicted > 0 else None


def metric_values(m: ServeMetrics) -> dict[str, float]:
    """The row metrics of one summary."""
    return {
        "ttft_p50_ms": m.ttft_ms.p50,
        "ttft_p90_ms": m.ttft_ms.p90,
        "tpot_p50_ms": m.tpot_ms.p50,
        "tpot_p90_ms": m.tpot_ms.p90,
        "e2e_p50_ms": m.e2e_ms.p50,
        "output_tokens_per_s": m.output_tokens_per_s,
    }


def rel_halfwidth(values: Sequence[float]) -> float:
    """Relative 95% half-width of the mean of ``values`` (Student t; inf below two values)."""
    from scipy.stats import t as student_t

    x = np.asarray(values, dtype=float)
    if x.size < 2 or x.mean() <= 0:
        return float("inf")
    return float(student_t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size) / x.mean())


def headline_halfwidth(runs: Sequence[ServedTimes]) -> float:
    """The widest relative 95% half-width of :data:`HEADLINE`'s metrics over ``runs`` (rounds of one rate
    and side; inf below two): both serving checks go on while it exceeds their ``--halfwidth``."""
    rounds = [metric_values(summarize(measured_run(t))) for t in runs]
    return max(rel_halfwidth([r[n] for r in rounds]) for n in HEADLINE)


def serve_check_row(
    measured: Sequence[ServedTimes],
    predicted: ServeRun,
    *,
    method: str,
    scenario: str,
    gamma: int,
    rate_per_s: float,
    new_tokens: int,
    max_num_seqs: int,
    seed: int,
    drift: float | None = None,
    runtime: str | None = None,
) -> ServeCheckRow:
    """One row from the rounds' loop runs (same arrivals) and the prediction; ``drift``
    (:func:`pass_drift`) goes into the row's notes."""
    if not measured:
        raise SpecsimError("serving check: no measured runs")
    rounds = [metric_values(summarize(measured_run(t))) for t in measured]
    pred = metric_values(summarize(predicted))
    metrics = {}
    for name in SERVE_METRICS:
        values = [r[name] for r in rounds]
        if pred[name] is None or any(v is None for v in values):
            raise SpecsimError(f"serving check: {name} undefined (requests of one output token?)")
        hw = rel_halfwidth(values)
        metrics[name] = {
            "predicted": float(pred[name]),
            "measured": float(np.mean(values)),
            "halfwidth": hw if np.isfinite(hw) else None,  # one round: no interval (it read ±0.0%)
        }
    return ServeCheckRow(
        method=method if gamma else "target",
        scenario=scenario,
        gamma=gamma,
        rate_per_s=float(rate_per_s),
        requests=len(measured[0].arrival_s),
        new_tokens=new_tokens,
        max_num_seqs=max_num_seqs,
        seed=seed,
        rounds=len(measured),
        metrics=metrics,
        notes="; ".join(
            n
            for n in (
                "" if len(measured) > 1 else "one round: no half-width",
                "" if drift is None else f"target passes ran at {drift:.3f} x the profile's grid ms",
            )
            if n
        ),
        runtime=runtime,
    )


def serve_summary(rows: Sequence[ServeCheckRow]) -> dict:
    """Median and max |relative error| over rows, per headline metric and over all three together."""
    if not rows:
        raise SpecsimError("serving check: no rows to summarise")
    out = {}
    for name in HEADLINE:
        errs = np.abs([r.error(name) for r in rows])
        out[name] = {"median_abs_rel_err": float(np.median(errs)), "max_abs_rel_err": float(errs.max())}
    errs = np.abs([r.error(n) for r in rows for n in HEADLINE])
    out["all"] = {"median_abs_rel_err": float(np.median(errs)), "max_abs_rel_err": float(errs.max())}
    return out


def serve_table(rows: Sequence[ServeCheckRow]) -> str:
    """The rows as a text table: per row, predicted / measured and error of the headline metrics."""
    from specsim.report import format_table

    body = []
    for r in rows:
        side = "target-only" if r.gamma == 0 else f"{r.method} γ={r.gamma}"
        cells = [r.scenario, side, f"{r.rate_per_s:g}"]
        for name in HEADLINE:
            m = r.metrics[name]
            hw = "one round" if m["halfwidth"] is None else f"±{m['halfwidth']:.1%}"
            cells.append(f"{m['predicted']:.4g} / {m['measured']:.4g} ({r.error(name):+.1%} {hw})")
        body.append(cells)
    head = [
        "scenario",
        "side",
        "req/s",
        "p50 TPOT ms pred/meas",
        "p90 TTFT ms pred/meas",
        "out tok/s pred/meas",
    ]
    return format_table(head, body)
