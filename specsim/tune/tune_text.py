"""Plain-text report of a tuning study: the study, the best deployment per device, the front."""

from __future__ import annotations

from specsim.report import fmt, format_table
from specsim.tune.objective import Objective
from specsim.tune.space import SearchSpace
from specsim.tune.study import StudyOutcome
from specsim.tune.trial import TrialResult, TuneContext
from specsim.tune.tune_report import DeviceBest, FrontPoint, describe


def workload_text(context: TuneContext) -> str:
    w = context.workload
    if w.trace is not None:
        return f"trace of {len(w.trace)} requests"
    if w.image_mix:
        images = "images " + ",".join(f"{k}:{s:.2f}" for k, s in w.image_mix)
    else:
        images = f"{w.images} image{'' if w.images == 1 else 's'}"
    return (
        f"{w.requests} requests at {context.rate_per_s:g} req/s ({w.prompt_tokens} text tokens + {images} -> "
        f"{w.output_tokens} output tokens), burstiness {w.burstiness:g}"
    )


def header_text(
    context: TuneContext, space: SearchSpace, objective: Objective, outcome: StudyOutcome, where: str
) -> str:
    searched = ", ".join(f"{n} {','.join(map(str, c))}" for n, c in space.searched()) or "nothing"
    slo = f", SLO {context.slo.describe()}" if context.slo is not None else ""
    feasible = sum(r.feasible for r in outcome.records)
    part = ""
    if outcome.search == "exhaustive" and len(outcome.records) < space.size:  # --trials below the space
        part = (
            f"; {len(outcome.records)} of them tried, so the best below is the best of those (--trials "
            f"{space.size} covers them all, or run again with the same --storage to go on)"
        )
    return "\n".join(
        [
            f"target {context.target}; workload: {workload_text(context)}, seed {context.seed}",
            f"objective: {objective.describe()}{slo}",
            f"search: {outcome.search} over {space.size} deployments (searched: {searched}){part}",
            f"trials: {len(outcome.records)} ({feasible} feasible), {outcome.simulations} simulations this "
            f"run, {where}",
        ]
    )


def metrics_text(result: TrialResult) -> str:
    m = result.metrics
    good = (
        f"goodput {fmt(m.goodput_requests_per_s, 3)} req/s ({m.slo_met_fraction:.1%} meet the SLO), "
        if m.goodput_requests_per_s is not None
        else ""
    )
    tau = f", tau {m.mean_acceptance_length:.2f}" if m.mean_acceptance_length is not None else ""
    return (
        f"{good}{m.output_tokens_per_s:.0f} output tok/s ({m.output_tokens_per_s / result.gpus:.0f} per "
        f"GPU), TTFT p50 {fmt(m.ttft_ms.p50, 1)} ms, TPOT p50 {fmt(m.tpot_ms.p50, 2)} / p90 "
        f"{fmt(m.tpot_ms.p90, 2)} ms, E2E p50 {fmt(m.e2e_ms.p50, 0)} ms{tau}"
    )


def best_text(best: DeviceBest, objective: Objective) -> str:
    rec, base = best.record, best.target_only
    lines = [
        f"best on {best.device}: {objective.name} {fmt(rec.value, 4)} {objective.unit} (trial {rec.number})",
        f"  deployment: {describe(rec)}",
        f"  predicted: {metrics_text(rec.result)}",
    ]
    if base.fits and base.metrics is not None and rec.result.metrics.tpot_ms.p50:
        speedup = base.metrics.tpot_ms.p50 / rec.result.metrics.tpot_ms.p50
        lines.append(f"  target-only there: {metrics_text(base)} (TPOT p50 speedup {speedup:.2f}x)")
    lines.append(
        f"  validation (at batch {best.batch}, the mean decode batch; context {best.context_tokens:.0f} "
        f"tokens): {best.validation.text()}"
    )
    c = best.configs
    lines += [f"  note: {n}" for n in c.notes]
    for engine, command in c.commands:
        lines.append(f"  {engine}: {command}")
        if engine == "TensorRT-LLM" and c.trtllm_yaml is not None:
            lines.append(f"    spec.yaml: {c.trtllm_yaml}")
    return "\n".join(lines)


def no_best_text(outcome: StudyOutcome, device: str, goodput: bool = False) -> str:
    """Why ``device`` has no best: none of its trials fits (the first reason), or none meets the SLO (for
    ``goodput``: in none does a request meet it)."""
    mine = [r for r in outcome.records if r.deployment.device == device]
    unfit = [r.result.reason for r in mine if not r.result.fits]
    if not mine:
        return f"no trial on {device}"
    if len(unfit) == len(mine):
        return f"no deployment on {device} fits: {unfit[0]}"
    short = "in none does a request meet the SLO" if goodput else "none meets the SLO attainment"
    return f"no feasible deployment on {device} among its {len(mine)} trials ({short})"


def front_text(points: list[FrontPoint]) -> str:
    if not points:
        return "latency-throughput front: no feasible trial"
    rows = [[p.label, f"{p.tokens_per_s_per_gpu:.0f}", f"{p.tpot_p50_ms:.2f}", str(p.number)] for p in points]
    table = format_table(["deployment", "tok/s/GPU", "TPOT p50 ms", "trial"], rows)
    return "latency-throughput front (feasible trials):\n" + table
