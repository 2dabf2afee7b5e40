"""Published rows measured under a serving load, replayed in ``specsim serve``'s simulation.

A row with a ``load`` (:mod:`specsim.validation.load_spec`) publishes a serving benchmark's output throughput
with SD over without it. Its load is served twice by :func:`specsim.serve.compare.served`: SD at the row's γ
with i.i.d. α from its published τ (:func:`specsim.acceptance.theory.alpha_from_tau`), and target-only; the
prediction is the ratio of their output tokens per second. Leave-one-source-out: the runtime is fitted
(:mod:`.runtime_fit`) on the other sources' rows only.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from specsim.acceptance.theory import alpha_from_tau
from specsim.draft_shapes.policies import GammaPolicy
from specsim.hardware.batch_limit import paying_range
from specsim.hardware.runtime import Runtime
from specsim.serve.compare import TARGET_ONLY, ServeSetup, Workload, served
from specsim.serve.roofline_cost import RooflineStepCost
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.speculation import IidAcceptance
from specsim.validation.published_set import PublishedSet, Row
from specsim.validation.row_predict import device, models, row_model
from specsim.validation.runtime_fit import fit_without


@dataclass(frozen=True)
class LoadRowResult:
    """One load row: published throughput ratio, the served simulation's and the decode-phase prediction."""

    id: str
    source: str
    sweep: str  # what the rows of one sweep share: pair and γ (the concurrency varies)
    runtime: str
    context_tokens: float  # the row's mean cached context
    batch: int  # the benchmark's concurrency
    published: float
    served: float
    decode_phase: float

    @property
    def error(self) -> float:
        return self.served / self.published - 1.0

    @property
    def decode_phase_error(self) -> float:
        return self.decode_phase / self.published - 1.0

    def to_json(self) -> dict:
        return asdict(self) | {"error": self.error, "decode_phase_error": self.decode_phase_error}


def served_ratio(ps: PublishedSet, row: Row, rt: Runtime, seed: int = 0) -> float:
    """SD output tokens/s over target-only's, each serving ``row.load`` in the simulation (module
    docstring)."""
    load = row.load
    target, draft = models(ps, row)
    cost = RooflineStepCost(
        target,
        draft,
        device(row.device),
        rt,
        tp=row.tp,
        split=row.split,
        draft_kind=row.draft_kind,
        draft_tp=row.draft_tp,
    )
    gamma = int(round(row.gamma))
    workload = Workload(load.requests, load.prompt_tokens, 0, load.output_tokens)
    acceptance = IidAcceptance(float(alpha_from_tau(row.tau, gamma)))

    def tokens_per_s(policy: GammaPolicy, kv: int | None) -> float:
        scheduler = SchedulerConfig(
            load.max_concurrency,
            load.max_num_batched_tokens,
            None,
            True,
            kv if kv is not None else cost.kv_cache_tokens(),
        )
        setup = ServeSetup(cost, workload, policy, acceptance, scheduler, None, seed)
        return served(setup, policy, load.rate_per_s).output_tokens_per_s

    sd = tokens_per_s(GammaPolicy(gamma), load.sd_kv_cache_tokens)
    return sd / tokens_per_s(TARGET_ONLY, load.target_kv_cache_tokens)


def load_rows(ps: PublishedSet) -> list[Row]:
    """The rows that carry a serving load, a published speedup and τ (``served_only`` ones included)."""
    return [r for r in ps.rows if r.load is not None and r.speedup is not None and r.tau is not None]


def compare_load_rows(
    ps: PublishedSet, runtimes: dict[str, Runtime], seed: int = 0, rows: list[Row] | None = None
) -> list[LoadRowResult]:
    """Every load row (or those of ``rows``) served with its runtime fitted on the other sources (module
    docstring)."""
    out = []
    fitted: dict[tuple[str, str], Runtime] = {}
    for row in load_rows(ps) if rows is None else rows:
        key = (row.runtime, row.source)
        if key not in fitted:
            fitted[key] = fit_without(ps, runtimes[row.runtime], row.source, runtimes)
        rt = fitted[key]
        # the decode phase of a served-only row too (as its speedup), beside what served it
        decode = float(row_model(ps, [replace(row, served_only=False)]).predict(rt)[0])
        out.append(
            LoadRowResult(
                row.id,
                row.source,
                f"{row.target} / {row.draft}, gamma {row.gamma:g}",
                row.runtime,
                row.target_context_tokens,
                row.batch,
                float(row.speedup),
                served_ratio(ps, row, rt, seed),
                decode,
            )
        )
    return out


def stops_by_sweep(results: list[LoadRowResult]) -> list[dict]:
    """Per sweep: the concurrency from which SD stops paying for good (:func:`paying_range`; None: it still
    pays at the largest published), published and served."""
    out = []
    for sweep in dict.fromkeys(r.sweep for r in results):
        rows = sorted((r for r in results if r.sweep == sweep), key=lambda r: r.batch)
        batches = [r.batch for r in rows]
        out.append(
            {
                "sweep": sweep,
                "source": rows[0].source,
                "published_stops_from": paying_range(batches, [r.published for r in rows])[1],
                "served_stops_from": paying_range(batches, [r.served for r in rows])[1],
                "largest_concurrency": batches[-1],
            }
        )
    return out


def summarize_load_rows(results: list[LoadRowResult]) -> dict | None:
    """Median and max |error| of the served predictions and of the decode-phase ones (None: no rows)."""
    if not results:
        return None
    e = np.abs([r.error for r in results])
    d = np.abs([r.decode_phase_error for r in results])
    return {
        "rows": len(results),
        "sources": sorted({r.source for r in results}),
        "median_abs_error": float(np.median(e)),
        "max_abs_error": float(e.max()),
        "decode_phase_median_abs_error": float(np.median(d)),
        "decode_phase_max_abs_error": float(d.max()),
        "stop_paying": stops_by_sweep(results),
    }
