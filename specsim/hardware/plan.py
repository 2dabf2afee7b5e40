"""Hardware planning: rank devices for a target/draft pair by predicted tokens/s and SD speedup.

For each device, batch size B, context L and γ, the roofline gives Tp = decode(target), Tq =
decode(draft, batch B·k for a k-member ensemble), Tv(γ) = verify(target, γ+1 positions); then
speedup = τ(γ)·Tp / ((γ + e)·Tq + Tv(γ) + o) = τ / ((γ + e)·c + v + o/Tp) (decode phase; e and o are the
runtime's extra draft forwards and overhead per block, 0 for the textbook) and the best γ is kept. τ(γ)
comes from a profile through :func:`specsim.predict.tau_at_gamma.tau_with_source`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from specsim.acceptance.theory import block_speedup, sd_block_ms
from specsim.costs.pass_cost import DRAFT, TARGET
from specsim.errors import SpecsimError
from specsim.hardware.batch_limit import StopPaying
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.parallel import (
    check_split_mode,
    check_splittable,
    check_tp,
    largest_fitting_batch,
    per_gpu_resident_bytes,
    timing_gpus,
)
from specsim.hardware.plan_notes import image_tokens_note, v_below_one_note
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION, Efficiency
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.predict.acceptance_source import MethodTau
from specsim.predict.tau_at_gamma import extrapolated

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

    def crossover(self, device: str, method: str, context: int) -> StopPaying:
        """Where SD stops paying on ``device`` at ``context``, with the largest batch that fits."""
        fit = next((b for *key, b in self.fitting_limits if tuple(key) == (device, method, context)), None)
        at = [
            r for r in self.limit_rows if (r.device, r.method, r.context_tokens) == (device, method, context)
        ]
        rows = self.select(device=device, method=method, context=context)
        return StopPaying.from_rows(device, method, context, rows, fit, at[0].speedup if at else None)

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
    whether the draft is split the same way (else it runs whole on GPU 0)."""

    tp: int = 1
    draft_sharded: bool = False
    split: str = "tensor"

    def __post_init__(self) -> None:
        check_split_mode(self.split)


def _device_rows(
    target: ModelSpec,
    draft: ModelSpec,
    dev: Device,
    eff,
    mt: MethodTau,
    batches: np.ndarray,
    contexts: np.ndarray,
    par: Parallel,
) -> list[PlanRow]:
    b, ctx = batches[:, None, None], contexts[None, :, None]
    g = np.asarray(mt.gammas, dtype=float)[None, None, :]
    d_tp = par.tp if par.draft_sharded else 1
    gpus = timing_gpus(par.tp, par.split), timing_gpus(d_tp, par.split)
    cost = RooflinePassCost(target, draft, dev, eff, *gpus)
    tp = cost.pass_ms(TARGET, 1, ctx, b).ms  # [B, L, 1]
    tq = cost.pass_ms(DRAFT, 1, ctx, b * mt.draft_batch_size).ms  # [B, L, 1]
    tv = cost.pass_ms(TARGET, g + 1, ctx, b).ms  # [B, L, G]
    tau = np.asarray(mt.tau)[None, None, :]
    block_ms = sd_block_ms(g + cost.extra_draft_forwards, tq, tv, cost.block_overhead_ms(g, b))
    speedups = block_speedup(tau, tp, block_ms)  # = τ / ((γ + e)·c + v + o / Tp)
    best = np.argmax(speedups, axis=-1)  # [B, L]
    bound = cost.compute_bound(TARGET, 1, ctx, b)[..., 0]
    kv_positions, gpus, split = _memory_terms(mt, par, ctx[..., 0])
    per_gpu = per_gpu_resident_bytes(target, draft, b[..., 0], kv_positions, *gpus, split=split)
    fits = per_gpu <= _usable_bytes(dev)
    rows = []
    for i, j in np.ndindex(best.shape):
        k = int(best[i, j])
        sd_tps = float(batches[i] * tau[0, 0, k] * 1e3 / block_ms[i, j, k])
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
                c=float(tq[i, j, 0] / tp[i, j, 0]),
                v=float(tv[i, j, k] / tp[i, j, 0]),
                speedup=float(speedups[i, j, k]),
                target_ms_per_step=float(tp[i, j, 0]),
                target_tokens_per_s=float(batches[i] * 1e3 / tp[i, j, 0]),
                sd_tokens_per_s=sd_tps,
                target_compute_bound=bool(bound[i, j]),
                fits_memory=bool(fits[i, j]),
                usd_per_million_tokens=None if price is None else price * par.tp / (sd_tps * 3600.0) * 1e6,
                tp=par.tp,
                per_gpu_bytes=float(per_gpu[i, j]),
            )
        )
    return rows


def plan_hardware(
    target: ModelSpec,
    draft: ModelSpec,
    devices: list[Device],
    methods: list[MethodTau],
    *,
    efficiency=None,
    batches=DEFAULT_BATCHES,
    contexts=DEFAULT_CONTEXTS,
    notes: tuple[str, ...] = (),
    parallel: Parallel | None = None,
) -> Plan:
    """Predicted throughput and best-γ speedup for every device × method × batch × context.

    ``efficiency``: an Efficiency or Runtime for every device, or a dict device name -> one of them.
    ``parallel``: GPUs per replica and their split (tokens/s are per replica of ``tp`` GPUs; $/Mtok counts tp
    GPUs).
    """
    par = parallel or Parallel()
    for dev in devices:
        check_tp(par.tp, dev)
    check_splittable(target, par.tp, par.split, "target")
    if par.draft_sharded:
        check_splittable(draft, par.tp, par.split, "draft")
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

    def rows_at(dev: Device, mt: MethodTau, b: np.ndarray, c: np.ndarray) -> list[PlanRow]:
        return _device_rows(target, draft, dev, effs.get(dev.name, Efficiency()), mt, b, c, par)

    rows = [row for dev in devices for mt in methods for row in rows_at(dev, mt, batches_a, contexts_a)]
    limits = [
        (dev, mt, int(c), _largest_fitting_batch(target, draft, dev, mt, c, par))
        for dev in devices
        for mt in methods
        for c in contexts_a
    ]
    at_limit = tuple(
        rows_at(dev, mt, np.array([b], float), np.array([c], float))[0] for dev, mt, c, b in limits if b
    )
    v_notes = tuple(
        note
        for dev in devices
        if (
            note := v_below_one_note(
                [r for r in rows if r.device == dev.name], effs.get(dev.name, Efficiency())
            )
        )
    )
    return Plan(
        tuple(rows),
        _assumptions(target, draft, methods, effs, par) + _scale_out(devices, par) + tuple(notes) + v_notes,
        tuple(d.name for d in devices),
        tuple(m.method for m in methods),
        tuple(int(b) for b in batches_a),
        tuple(int(c) for c in contexts_a),
        {k: e.to_json() for k, e in effs.items()},
        tuple((dev.name, mt.method, c, b) for dev, mt, c, b in limits),
        at_limit,
        tuple(sorted({g for m in methods for g in m.gammas})),
    )


def _memory_terms(mt: MethodTau, par: Parallel, context):
    """How the plan counts memory, for :func:`per_gpu_resident_bytes` and :func:`largest_fitting_batch`
    alike: (KV positions per sequence = context + γ_max + 1, (target GPUs, draft GPUs), split)."""
    return context + max(mt.gammas) + 1, (par.tp, par.tp if par.draft_sharded else 1), par.split


def _usable_bytes(dev: Device) -> float:
    return USABLE_MEMORY_FRACTION * dev.memory_bytes


def _largest_fitting_batch(
    target: ModelSpec, draft: ModelSpec, dev: Device, mt: MethodTau, context: float, par: Parallel
) -> int | None:
    """The largest batch that fits on ``dev`` at ``context``, on :func:`_device_rows`'s ``fits_memory``
    terms."""
    kv_positions, gpus, split = _memory_terms(mt, par, context)
    return largest_fitting_batch(target, draft, _usable_bytes(dev), kv_positions, *gpus, split=split)


def _assumptions(
    target: ModelSpec, draft: ModelSpec, methods: list[MethodTau], effs: dict, par: Parallel
) -> tuple[str, ...]:
    out = [
        "decode phase only: speedup = tau/(gamma*c + v); prefill, vision encoding and draft set-up excluded",
        f"weights {target.dtype_bytes:g} (target) / {draft.dtype_bytes:g} (draft) bytes per parameter, "
        f"KV cache {target.kv_element_bytes:g} bytes per element; device peaks are datasheet dense "
        "BF16/FP16 (measured FP32 for the CPU)",
        "tau does not depend on batch size or context (taken from the profile); a batch verifies in lockstep "
        "and emits tau tokens per sequence per block",
        "'fits' = per GPU: "
        + (
            "the most loaded GPU's share of the target's layers (weights and KV)"
            if par.split == "layer"
            else "target weights over tp and KV over tp (over the KV heads when tp exceeds them)"
        )
        + f", the draft {'split the same way' if par.draft_sharded else 'whole on GPU 0'}, "
        f"KV for batch x (context + gamma_max + 1) <= {USABLE_MEMORY_FRACTION:.0%} of device memory",
        f"context = tokens already in the KV cache ({image_tokens_note(target)})",
    ]
    for mt in methods:
        extra = sorted({s for s in mt.tau_source if extrapolated(s)})
        if extra:
            out.append(
                f"method {mt.method} ({mt.scenario}): tau at other gamma is an i.i.d. extrapolation "
                f"({', '.join(extra)}), not measured"
            )
    if par.tp > 1 and par.split == "layer":
        out.append(
            f"layer split over {par.tp} GPUs (whole layers per GPU, run one GPU after another): a pass costs "
            "what it costs on one GPU and only memory divides; draft "
            f"{'split the same way' if par.draft_sharded else 'on one GPU'}; tokens/s are per replica"
        )
    elif par.tp > 1:
        out.append(
            f"tensor parallel over {par.tp} GPUs (Megatron layout, 2 all-reduces per layer over the device's "
            f"interconnect); draft {'sharded the same way' if par.draft_sharded else 'on one GPU'}; tokens/s "
            "are per replica"
        )
    for eff in effs.values():  # one line per runtime, not per device (each device has its own copy)
        out.append(
            f"runtime {eff.name}: {eff.display_name}"
            if hasattr(eff, "fit")
            else f"efficiencies: {eff.source}"
        )
        if eff.extra_draft_forwards_per_block > 0:
            out.append(
                f"draft: γ + {eff.extra_draft_forwards_per_block:g} forwards per block under "
                f"{eff.display_name} (extra_draft_forwards_per_block)"
            )
    return tuple(dict.fromkeys(out))


def _scale_out(devices: list[Device], par: Parallel) -> tuple[str, ...]:
    """One line per device whose tensor-parallel ring leaves the GPUs its interconnect joins."""
    if par.split != "tensor":
        return ()
    return tuple(
        f"{d.name}: {par.tp} GPUs span {-(-par.tp // d.interconnect_gpus)} groups of {d.interconnect_gpus} "
        f"joined by {d.interconnect_link or 'the interconnect'}; all-reduces run at the scale-out link's "
        f"bandwidth ({d.scale_out_link or 'scale-out'}), their latency at the runtime's per-all-reduce "
        "figure for one group (under-estimated)"
        for d in devices
        if d.interconnect_gpus is not None and par.tp > d.interconnect_gpus
    )


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
