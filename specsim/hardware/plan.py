"""Hardware planning: rank devices for a target/draft pair by predicted tokens/s and SD speedup.

For each device, batch size B, context L and γ, the blocks are priced through the pass-cost seam
(:mod:`specsim.hardware.plan_rows`): speedup = τ(γ)·T / (γ·Tq + Tv(γ) + Σ o-terms) = τ / (γ·c + v + o),
T the target-only step, o the named overhead terms over T (the extra draft forwards and the engine's block
terms); the best γ is kept, and where SD stops paying is also solved on a continuous batch axis. τ(γ) comes
from a profile through :func:`specsim.predict.tau_at_gamma.tau_with_source`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from specsim.costs.pass_cost import TARGET
from specsim.errors import SpecsimError
from specsim.hardware.batch_limit import StopPaying, fitting_crossover
from specsim.hardware.device import Device
from specsim.hardware.dtype_support import dtype_notes
from specsim.hardware.model import ModelSpec
from specsim.hardware.parallel import (
    check_split_mode,
    check_splittable,
    check_tp,
    largest_fitting_batch,
    per_gpu_resident_bytes,
    timing_gpus,
)
from specsim.hardware.plan_assumptions import plan_assumptions, scale_out_notes
from specsim.hardware.plan_notes import v_below_one_note
from specsim.hardware.plan_rows import best_speedup_at, end_to_end_speedup, price_blocks, request_prefills_ms
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION, Efficiency
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.predict.acceptance_source import MethodTau

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_CONTEXTS = (1024, 4096, 8192)


@dataclass(frozen=True)
class PlanRow:
    """Best-γ SD on one device at one (method, batch, context); tokens/s summed over the batch."""

    device: str
    method: str
    batch_size: int
    context_tokens: int
    best_gamma: int
    tau: float
    tau_source: str
    c: float
    v: float
    speedup: float
    target_ms_per_step: float
    target_tokens_per_s: float
    sd_tokens_per_s: float
    target_compute_bound: bool
    fits_memory: bool
    usd_per_million_tokens: float | None = None  # SD, only when the user gave a price per hour
    tp: int = 1
    per_gpu_bytes: float = 0.0
    o: float = 0.0  # the block's overhead over T: sum of o_terms
    o_terms: dict = field(default_factory=dict)  # named overhead terms, each in units of T
    draft_kind: str = "model"
    target_forward_ms: float = 0.0  # Tp, the forward alone (target_ms_per_step adds the step's terms)
    e2e_speedup: float | None = None  # with the plan's prompt/output lengths: prefills on both sides


@dataclass(frozen=True)
class Plan:
    rows: tuple[PlanRow, ...]
    assumptions: tuple[str, ...]
    devices: tuple[str, ...]
    methods: tuple[str, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    efficiencies: dict[str, dict] = field(default_factory=dict)
    # (device, method, context, largest batch that fits: 0 none, None not bounded by memory) and the plan's
    # row at that batch where there is one
    fitting_limits: tuple[tuple[str, str, int, int | None], ...] = ()
    limit_rows: tuple[PlanRow, ...] = ()
    gammas: tuple[int, ...] = ()  # the γ tried (one: a fixed γ, not a best one)
    # (device, method, context, batch on a continuous axis from which SD stays below 1, or None)
    crossovers: tuple[tuple[str, str, int, float | None], ...] = ()

    def crossover(self, device: str, method: str, context: int) -> StopPaying:
        """Where SD stops paying on ``device`` at ``context``, with the largest batch that fits."""
        fit = next((b for *key, b in self.fitting_limits if tuple(key) == (device, method, context)), None)
        at = [
            r for r in self.limit_rows if (r.device, r.method, r.context_tokens) == (device, method, context)
        ]
        rows = self.select(device=device, method=method, context=context)
        cross = next((x for *key, x in self.crossovers if tuple(key) == (device, method, context)), None)
        return StopPaying.from_rows(device, method, context, rows, fit, at[0].speedup if at else None, cross)

    def to_json(self) -> dict:
        limits = {
            m: {d: {str(c): self.crossover(d, m, c) for c in self.contexts} for d in self.devices}
            for m in self.methods
        }
        return {
            "schema_version": 1,
            "assumptions": list(self.assumptions),
            "devices": list(self.devices),
            "methods": list(self.methods),
            "batches": list(self.batches),
            "contexts": list(self.contexts),
            "efficiencies": self.efficiencies,
            "rows": [asdict(r) for r in self.rows],
            "rows_at_largest_fitting_batch": [asdict(r) for r in self.limit_rows],
            "ranking": {m: [r.device for r in ranking(self, m)] for m in self.methods},
            "speedup_below_1_from_batch": {
                m: {
                    d: {c: x.stops_from for c, x in by_context.items()} for d, by_context in by_device.items()
                }
                for m, by_device in limits.items()
            },
            "stop_paying": {
                m: {d: {c: x.to_json() for c, x in by_context.items()} for d, by_context in by_device.items()}
                for m, by_device in limits.items()
            },
        }

    def select(self, *, device=None, method=None, batch=None, context=None) -> list[PlanRow]:
        return [
            r
            for r in self.rows
            if (device is None or r.device == device)
            and (method is None or r.method == method)
            and (batch is None or r.batch_size == batch)
            and (context is None or r.context_tokens == context)
        ]


@dataclass(frozen=True)
class Parallel:
    """GPUs per replica of the target, how it is split over them (:data:`SPLIT_MODES
    <specsim.hardware.parallel.SPLIT_MODES>`: "tensor" divides a pass's time, "layer" only its memory) and
    whether the draft is split the same way (else it runs whole on GPU 0; None: as the runtime places it,
    its ``draft_split``)."""

    tp: int = 1
    draft_sharded: bool | None = None
    split: str = "tensor"

    def draft_split_for(self, eff) -> bool:
        """Whether the draft is split over the target's GPUs under runtime ``eff``."""
        if self.draft_sharded is not None:
            return self.draft_sharded
        return getattr(eff, "draft_split", "single") == "target"

    def __post_init__(self) -> None:
        check_split_mode(self.split)


def _cost(target, draft, dev, eff, par: Parallel, draft_kind: str) -> RooflinePassCost:
    d_tp = par.tp if par.draft_split_for(eff) and draft is not None else 1
    gpus = timing_gpus(par.tp, par.split), timing_gpus(d_tp, par.split)
    return RooflinePassCost(target, draft, dev, eff, *gpus, draft_kind)


def _device_rows(
    target: ModelSpec,
    draft: ModelSpec | None,
    dev: Device,
    eff,
    mt: MethodTau,
    batches: np.ndarray,
    contexts: np.ndarray,
    par: Parallel,
    draft_kind: str = "model",
    lengths: tuple[int, int] | None = None,
) -> list[PlanRow]:
    cost = _cost(target, draft, dev, eff, par, draft_kind)
    p = price_blocks(cost, mt, batches, contexts)
    pre = request_prefills_ms(cost, lengths[0], batches) if lengths else None
    best = np.argmax(p.speedup, axis=-1)  # [B, L]
    ctx = contexts[None, :, None]
    bound = cost.compute_bound(TARGET, 1, ctx, batches[:, None, None])[..., 0]
    kv_positions, gpus, split = _memory_terms(mt, par, ctx[..., 0], eff, draft)
    per_gpu = per_gpu_resident_bytes(target, draft, batches[:, None], kv_positions, *gpus, split=split)
    fits = per_gpu <= _usable_bytes(dev)
    rows = []
    for i, j in np.ndindex(best.shape):
        k = int(best[i, j])
        step = float(p.step_ms[i, j, 0])
        block = float(p.block_ms[i, j, k])
        sd_tps = float(batches[i] * mt.tau[k] * 1e3 / block)
        terms = {name: float(v[i, j, k]) / step for name, v in p.terms_ms.items()}
        e2e = None
        if pre is not None:
            e2e = float(end_to_end_speedup(step, block, mt.tau[k], pre[0][i], pre[1][i], lengths[1]))
        price = dev.price_per_hour_usd
        rows.append(
            PlanRow(
                device=dev.name,
                method=mt.method,
                batch_size=int(batches[i]),
                context_tokens=int(contexts[j]),
                best_gamma=mt.gammas[k],
                tau=mt.tau[k],
                tau_source=mt.tau_source[k],
                c=float(p.draft_ms[i, j, 0]) / step,
                v=float(p.verify_ms[i, j, k]) / step,
                speedup=float(p.speedup[i, j, k]),
                target_ms_per_step=step,
                target_tokens_per_s=float(batches[i] * 1e3 / step),
                sd_tokens_per_s=sd_tps,
                target_compute_bound=bool(bound[i, j]),
                fits_memory=bool(fits[i, j]),
                usd_per_million_tokens=None if price is None else price * par.tp / (sd_tps * 3600.0) * 1e6,
                tp=par.tp,
                per_gpu_bytes=float(per_gpu[i, j]),
                o=sum(terms.values()),
                o_terms=terms,
                draft_kind=draft_kind,
                target_forward_ms=float(p.target_forward_ms[i, j, 0]),
                e2e_speedup=e2e,
            )
        )
    return rows


def plan_hardware(
    target: ModelSpec,
    draft: ModelSpec | None,
    devices: list[Device],
    methods: list[MethodTau],
    *,
    efficiency=None,
    batches=DEFAULT_BATCHES,
    contexts=DEFAULT_CONTEXTS,
    notes: tuple[str, ...] = (),
    parallel: Parallel | None = None,
    draft_kind: str = "model",
    lengths: tuple[int, int] | None = None,
) -> Plan:
    """Predicted throughput and best-γ speedup for every device × method × batch × context.

    ``efficiency``: an Efficiency or Runtime for every device, or a dict device name -> one of them.
    ``parallel``: GPUs per replica and their split (tokens/s are per replica of ``tp`` GPUs; $/Mtok counts tp
    GPUs). ``draft_kind``: how the draft side drafts (:mod:`specsim.draft_kinds`; ``draft`` None for a
    lookup kind). ``lengths``: a request's (prompt, output) tokens: rows add the end-to-end speedup.
    """
    par = parallel or Parallel()
    for dev in devices:
        check_tp(par.tp, dev)
    formats = dtype_notes({"target": target, "draft": draft}, devices)  # float8 below 7.5 is refused here
    check_splittable(target, par.tp, par.split, "target")
    if not devices or not methods:
        raise SpecsimError("plan: need at least one device and one method")
    batches_a = np.asarray(sorted(set(int(x) for x in batches)), dtype=float)
    contexts_a = np.asarray(sorted(set(int(x) for x in contexts)), dtype=float)
    if batches_a.size == 0 or batches_a[0] < 1:
        raise SpecsimError(f"batch sizes: expected integers >= 1, got {list(batches)!r}")
    if contexts_a.size == 0 or contexts_a[0] < 0:
        raise SpecsimError(f"context lengths: expected integers >= 0, got {list(contexts)!r}")
    effs = (
        efficiency if isinstance(efficiency, dict) else {d.name: efficiency or Efficiency() for d in devices}
    )
    for eff in effs.values():
        if draft is not None and par.draft_split_for(eff):
            check_splittable(draft, par.tp, par.split, "draft")

    def eff_of(dev: Device):
        return effs.get(dev.name, Efficiency())

    def cost_of(dev: Device) -> RooflinePassCost:
        return _cost(target, draft, dev, eff_of(dev), par, draft_kind)

    def rows_at(dev: Device, mt: MethodTau, b: np.ndarray, c: np.ndarray) -> list[PlanRow]:
        return _device_rows(target, draft, dev, eff_of(dev), mt, b, c, par, draft_kind, lengths)

    rows = [row for dev in devices for mt in methods for row in rows_at(dev, mt, batches_a, contexts_a)]
    limits = [
        (dev, mt, int(c), _largest_fitting_batch(target, draft, dev, mt, c, par, eff_of(dev)))
        for dev in devices
        for mt in methods
        for c in contexts_a
    ]
    at_limit = tuple(
        rows_at(dev, mt, np.array([b], float), np.array([c], float))[0] for dev, mt, c, b in limits if b
    )
    crossovers = tuple(
        (dev.name, mt.method, c, _crossover(cost_of(dev), mt, c, fit)) for dev, mt, c, fit in limits
    )
    v_notes = tuple(
        note
        for dev in devices
        if (note := v_below_one_note([r for r in rows if r.device == dev.name], eff_of(dev)))
    )
    assumptions = plan_assumptions(target, draft, methods, effs, par, draft_kind)
    return Plan(
        tuple(rows),
        assumptions + scale_out_notes(devices, par) + formats + tuple(notes) + v_notes,
        tuple(d.name for d in devices),
        tuple(m.method for m in methods),
        tuple(int(b) for b in batches_a),
        tuple(int(c) for c in contexts_a),
        {k: e.to_json() for k, e in effs.items()},
        tuple((dev.name, mt.method, c, b) for dev, mt, c, b in limits),
        at_limit,
        tuple(sorted({g for m in methods for g in m.gammas})),
        crossovers,
    )


def _crossover(cost: RooflinePassCost, mt: MethodTau, context: float, fit: int | None) -> float | None:
    """The batch, on a continuous axis, from which the best-γ speedup stays below 1 on a device that holds
    ``fit`` sequences (:func:`fitting_crossover`; None: never)."""
    return fitting_crossover(lambda b: best_speedup_at(cost, mt, b, context), fit)


def _memory_terms(mt: MethodTau, par: Parallel, context, eff=None, draft=None):
    """How the plan counts memory, for :func:`per_gpu_resident_bytes` and :func:`largest_fitting_batch`
    alike: (KV positions per sequence = context + γ_max + 1, (target GPUs, draft GPUs), split)."""
    d_tp = par.tp if draft is not None and par.draft_split_for(eff) else 1
    return context + max(mt.gammas) + 1, (par.tp, d_tp), par.split


def _usable_bytes(dev: Device) -> float:
    return USABLE_MEMORY_FRACTION * dev.memory_bytes


def _largest_fitting_batch(
    target: ModelSpec, draft, dev: Device, mt: MethodTau, context: float, par: Parallel, eff=None
) -> int | None:
    """The largest batch that fits on ``dev`` at ``context``, on :func:`_device_rows`'s ``fits_memory``
    terms."""
    kv_positions, gpus, split = _memory_terms(mt, par, context, eff, draft)
    return largest_fitting_batch(target, draft, _usable_bytes(dev), kv_positions, *gpus, split=split)


def ranking(
    plan: Plan, method: str, *, batch: int | None = None, context: int | None = None
) -> list[PlanRow]:
    """Devices by SD tokens/s at (batch, context) (default: smallest of each); non-fitting ones last."""
    batch = plan.batches[0] if batch is None else batch
    context = plan.contexts[0] if context is None else context
    rows = plan.select(method=method, batch=batch, context=context)
    if not rows:
        raise SpecsimError(f"no plan rows for method {method!r}, batch {batch}, context {context}")
    return sorted(rows, key=lambda r: (not r.fits_memory, -r.sd_tokens_per_s))


def speedup_crossover_batch(plan: Plan, device: str, method: str, context: int) -> int | None:
    """Planned batch size from which the best-γ speedup stays below 1 (SD stops paying); None: it still pays
    at the largest planned batch, or never pays (see :func:`~specsim.hardware.batch_limit.paying_range`)."""
    return plan.crossover(device, method, context).stops_from
