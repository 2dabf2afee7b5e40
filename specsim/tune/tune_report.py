"""What ``specsim tune`` reports from a finished study: the best deployment per device, with its predicted
metrics, the same deployment served target-only, the validation of the planner where it lies, and the
engine settings that paste; and the latency-throughput front of the feasible trials.

Validation: :func:`specsim.validation.regime_error.regime_error` at the deployment's runtime, its mean
decode batch (as ``specsim serve`` reads it) and a decoding request's mean context. The front: feasible
trials not beaten on both output tokens/s per GPU (higher) and p50 TPOT (lower). More: ARCHITECTURE.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.draft_shapes.policies import GammaPolicy
from specsim.hardware.device import load_device
from specsim.hardware.runtime import DEFAULT_RUNTIMES
from specsim.tune.objective import Objective
from specsim.tune.paste import EngineConfigs, engine_configs
from specsim.tune.study import StudyOutcome, TrialRecord
from specsim.tune.trial import TrialConfig, TrialResult, TuneContext, decode_batch, run_trial, step_cost


@dataclass(frozen=True)
class DeviceBest:
    """The best feasible trial on one device and what is said about it."""

    device: str
    record: TrialRecord
    target_only: TrialResult
    validation: object  # a RegimeError
    batch: int
    context_tokens: float
    configs: EngineConfigs

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "trial": self.record.to_json(),
            "target_only": self.target_only.to_json(),
            "validation": self.validation.to_json()
            | {"batch": self.batch, "context_tokens": self.context_tokens},
            "engine_configs": self.configs.to_json(),
        }


@dataclass(frozen=True)
class FrontPoint:
    """A trial on the latency-throughput front."""

    number: int
    tokens_per_s_per_gpu: float
    tpot_p50_ms: float
    label: str

    def to_json(self) -> dict:
        return vars(self).copy()


def front(outcome: StudyOutcome) -> list[FrontPoint]:
    """The feasible trials no other beats on both tokens/s per GPU and p50 TPOT, by throughput."""
    pts = {}
    for r in outcome.records:
        m = r.result.metrics
        if r.feasible and m is not None and m.tpot_ms.p50 is not None and r.deployment not in pts:
            per_gpu = m.output_tokens_per_s / r.result.gpus
            pts[r.deployment] = FrontPoint(r.number, per_gpu, m.tpot_ms.p50, describe(r))
    out, best_tpot = [], np.inf
    for p in sorted(pts.values(), key=lambda p: (-p.tokens_per_s_per_gpu, p.tpot_p50_ms)):
        if p.tpot_p50_ms < best_tpot:
            out.append(p)
            best_tpot = p.tpot_p50_ms
    return out


def describe(record: TrialRecord) -> str:
    d = record.deployment
    runtime = f", runtime {d.runtime}" if d.runtime else ""
    return (
        f"{d.device} tp {d.tp}{runtime}, draft {d.draft.label}, {d.policy.describe(d.max_num_seqs)}, "
        f"max_num_seqs {d.max_num_seqs}"
    )


def device_best(
    outcome: StudyOutcome,
    objective: Objective,
    context: TuneContext,
    devices,
    ids: dict[str, str] | None = None,
) -> list[DeviceBest]:
    """For every device with a feasible trial, its best (module docstring); one more simulation each (two
    for a result read back as JSON)."""
    from specsim.validation.regime_error import regime_error

    out = []
    for device in devices:
        rec = outcome.best(objective, device)
        if rec is None:
            continue
        dep = rec.deployment
        baseline = run_trial(TrialConfig(context, dep.with_policy(GammaPolicy(0))))
        batch = decode_batch(context, dep, rec.result)
        ctx_tokens = mean_context_tokens(context, rec)
        runtime = dep.runtime or DEFAULT_RUNTIMES[load_device(device).kind]
        out.append(
            DeviceBest(
                device,
                rec,
                baseline,
                regime_error(runtime, batch, ctx_tokens),
                batch,
                ctx_tokens,
                engine_configs(
                    rec,
                    context.target,
                    max_num_batched_tokens=context.max_num_batched_tokens,
                    ids=ids,
                    batch=batch,
                ),
            )
        )
    return out


def mean_context_tokens(context: TuneContext, record: TrialRecord) -> float:
    """Mean KV positions of a decoding request: text + images × image tokens + half the output."""
    dep, w = record.deployment, context.workload
    cost = step_cost(context.target, dep.draft, dep.device, dep.runtime, dep.tp, context.image_size)
    if w.trace is not None:
        t = w.trace
        images, prompt, output = t.images.mean(), t.prompt_tokens.mean(), t.output_tokens.mean()
    else:
        mix = w.image_mix or ((w.images, 1.0),)
        images, prompt, output = sum(k * s for k, s in mix), w.prompt_tokens, w.output_tokens
    return float(prompt + images * cost.image_tokens_per_image + output / 2)
