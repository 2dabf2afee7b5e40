"""Where SD stops paying as batch grows: published batch sweeps against the runtime-aware roofline.

A *sweep*: a source's SD rows with a published speedup that differ only in batch size. Per sweep the runtime
is fitted on the other sources; τ is the row's own, else calibrated on the smallest batch (τ̂ = S·block/Tp);
the best-γ speedup on batches 1..4096 gives ``pays_from`` and ``stops_from``; ``crossover_ok``: where SD
stops paying at the sweep's γ and τ, predicted within a factor 1.5 of published.
:func:`crossover_grid`: the same crossover for the sweep's pair on other devices, runtimes and contexts.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from specsim.acceptance.theory import alpha_from_tau, tau_iid
from specsim.hardware.batch_limit import crossover_batch, interpolated_crossover, paying_range
from specsim.hardware.parallel import largest_fitting_batch
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION
from specsim.hardware.runtime import Runtime
from specsim.validation.published_set import PublishedSet, Row
from specsim.validation.row_predict import device, models, row_model
from specsim.validation.runtime_fit import fit_without

_SAME = (
    "source",
    "target",
    "draft",
    "device",
    "runtime",
    "gpus",
    "parallel",
    "draft_tp",
    "weights_dtype",
    "draft_weights_dtype",
    "kv_dtype",
    "target_context_tokens",
    "draft_context_tokens",
)
GRID_BATCHES = tuple(2**i for i in range(13))  # 1 .. 4096
GRID_GAMMAS = tuple(range(1, 9))


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    gamma: float
    tau: float
    tau_note: str  # "published", "calibrated" (this point fixed τ) or "iid from calibrated"
    published: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


@dataclass(frozen=True)
class SweepComparison:
    """One published sweep against specsim (see module docstring)."""

    label: str
    source: str
    device: str
    gpus: int
    runtime: str
    context_tokens: float
    alpha: float  # i.i.d. acceptance implied by the calibrated τ
    points: tuple[SweepPoint, ...]
    published_below_one: tuple[int, ...]  # published batches with speedup < 1
    pays_from: int | None  # predicted: smallest grid batch with best-γ speedup >= 1 (None: never pays)
    stops_from: int | None  # predicted: SD stops paying from this batch on (None: never pays, or pays up to
    #                         the grid's largest batch)
    max_fit_batch: int  # largest grid batch whose weights + KV fit the catalog's GPUs (0: none)
    grid_batches: tuple[int, ...] = ()  # the doubling grid ...
    grid_best_speedup: tuple[float, ...] = ()  # ... and the predicted best-γ speedup at each
    # where SD stops paying at the sweep's own γ and τ: published (interpolated between its batches) and
    # predicted (continuous batch axis); None: still pays at the sweep's largest batch / the search's
    published_crossover: float | None = None
    predicted_crossover: float | None = None

    @property
    def largest_batch(self) -> int:
        return max(p.batch for p in self.points)

    @property
    def crossover_ok(self) -> bool:
        """The predicted crossover within a factor 1.5 of the published one; where the published sweep never
        stops paying, at or beyond its largest batch."""
        pub, pred = self.published_crossover, self.predicted_crossover
        if pub is None:
            return pred is None or pred >= self.largest_batch
        return pred is not None and 1 / 1.5 <= pred / pub <= 1.5

    def to_json(self) -> dict:
        points = [asdict(p) | {"error": p.error} for p in self.points]
        return asdict(self) | {"points": points, "crossover_ok": self.crossover_ok}


def published_sweeps(ps: PublishedSet) -> list[list[Row]]:
    """Groups of SD rows with a published speedup that differ only in batch size (>= 2 batch sizes)."""
    groups: dict[tuple, list[Row]] = {}
    for row in ps.rows:
        if row.kind == "sd" and row.speedup is not None and not row.served_only:
            groups.setdefault(tuple(getattr(row, k) for k in _SAME), []).append(row)
    return [
        sorted(g, key=lambda r: (r.batch, r.gamma)) for g in groups.values() if len({r.batch for r in g}) > 1
    ]


def _priced(ps: PublishedSet, row: Row, batch: int, gamma: float, tau: float) -> Row:
    """A copy of ``row`` at another batch/γ/τ, compared as a plain speedup (for pricing only)."""
    return replace(
        row,
        batch=batch,
        gamma=float(gamma),
        tau=float(tau),
        speedup=1.0,
        ratio_to=None,
        speedup_ratio=None,
        sd_ms_per_token=None,
    )


def _speedups(ps: PublishedSet, rows: list[Row], rt: Runtime) -> np.ndarray:
    return row_model(ps, rows).predict(rt)


def max_fit_batch(ps: PublishedSet, row: Row, batches=GRID_BATCHES) -> int:
    """Largest of ``batches`` whose weights + KV caches fit USABLE_MEMORY_FRACTION of every GPU (0: none)."""
    target, draft = models(ps, row)
    fit = largest_fitting_batch(
        target,
        draft,
        device(row.device).memory_bytes * USABLE_MEMORY_FRACTION,
        row.target_context_tokens,
        row.gpus,
        row.draft_tp,
        draft_context=row.target_context_tokens
        if row.draft_context_tokens is None
        else row.draft_context_tokens,
        shared_weights=row.draft == row.target,
        split=row.split,
    )
    return max((b for b in batches if fit is None or b <= fit), default=0)


def _grid_model(ps: PublishedSet, row: Row, alpha: float, fitting_only: bool):
    """(grid batches, the RowModel of ``row``'s setup at every grid batch × γ under i.i.d. α, or None where no
    batch fits): its passes do not depend on the runtime, so one model prices it under several."""
    fit = max_fit_batch(ps, row) if fitting_only else GRID_BATCHES[-1]
    batches = [b for b in GRID_BATCHES if b <= fit]
    if not batches:
        return [], None
    grid = [_priced(ps, row, b, g, float(tau_iid(alpha, g))) for b in batches for g in GRID_GAMMAS]
    return batches, row_model(ps, grid)


def _best(batches: list[int], model, rt: Runtime) -> np.ndarray:
    """The best-γ speedup at each grid batch under ``rt``."""
    if model is None:
        return np.zeros(0)
    return model.predict(rt).reshape(len(batches), len(GRID_GAMMAS)).max(axis=1)


def best_speedups(
    ps: PublishedSet, row: Row, rt: Runtime, alpha: float, *, fitting_only: bool = True
) -> tuple[list[int], np.ndarray]:
    """(grid batches, best-γ predicted speedup at each) for ``row``'s setup under i.i.d. α; ``fitting_only``:
    only the batches whose weights and KV caches fit the catalog's GPUs."""
    batches, model = _grid_model(ps, row, alpha, fitting_only)
    return batches, _best(batches, model, rt)


def _calibrated_tau(ps: PublishedSet, ref: Row, rt: Runtime) -> float:
    """τ̂ that makes specsim reproduce the reference row's speedup (clipped to [1, γ+1])."""
    unit = _speedups(ps, [_priced(ps, ref, ref.batch, ref.gamma, 1.0)], rt)[0]  # speedup at τ = 1 = Tp/block
    return float(np.clip(ref.speedup / unit, 1.0, ref.gamma + 1.0))


def compare_sweep(
    ps: PublishedSet, rows: list[Row], runtime: Runtime, runtimes: dict[str, Runtime] | None = None
) -> SweepComparison:
    """One sweep: runtime fitted on the other sources (its family's other members from ``runtimes`` where it
    names them), τ as in the module docstring, points and crossovers."""
    ref = rows[0]
    rt = fit_without(ps, runtime, ref.source, runtimes)
    tau_ref = ref.tau if ref.tau is not None else _calibrated_tau(ps, ref, rt)
    alpha = float(alpha_from_tau(tau_ref, int(round(ref.gamma))))
    points = []
    for i, row in enumerate(rows):
        if row.tau is not None:
            tau, note = row.tau, "published"
        elif row.gamma == ref.gamma:
            tau, note = tau_ref, "calibrated" if i == 0 else "calibrated at the smallest batch"
        else:
            tau, note = float(tau_iid(alpha, int(round(row.gamma)))), "iid from calibrated"
        pred = _speedups(ps, [_priced(ps, row, row.batch, row.gamma, tau)], rt)[0]
        points.append(SweepPoint(row.batch, row.gamma, float(tau), note, float(row.speedup), float(pred)))
    batches, best = best_speedups(ps, ref, rt, alpha, fitting_only=False)
    last = rows[-1]
    tau_last = points[-1].tau

    def at_sweep_gamma(bs):
        grid = [_priced(ps, last, float(b), last.gamma, tau_last) for b in bs]
        return _speedups(ps, grid, rt)

    published = interpolated_crossover([p.batch for p in points], [p.published for p in points])
    label = f"{ref.source}: {ref.target} / {'self' if ref.draft == ref.target else ref.draft}"
    return SweepComparison(
        label,
        ref.source,
        ref.device,
        ref.gpus,
        ref.runtime,
        ref.target_context_tokens,
        alpha,
        tuple(points),
        tuple(p.batch for p in points if p.published < 1.0),
        *paying_range(batches, best),
        max_fit_batch(ps, ref),
        tuple(batches),
        tuple(float(x) for x in best),
        published,
        crossover_batch(at_sweep_gamma),
    )


def crossover_grid(
    ps: PublishedSet,
    rows: list[Row],
    alpha: float,
    devices: list[str],
    runtimes: list[Runtime],
    contexts: list[float],
) -> list[dict]:
    """Where SD pays for a sweep's pair (same GPUs, same τ model) per device × runtime × context."""
    ref = rows[0]
    out = []
    for dev in devices:
        models_at = {}  # per context: its passes, priced below under every runtime
        for ctx in contexts:
            row = replace(
                ref,
                device=dev,
                target_context_tokens=float(ctx),
                draft_context_tokens=ref.draft_context_tokens and min(ref.draft_context_tokens, ctx),
            )
            models_at[ctx] = _grid_model(ps, row, alpha, True)
        for rt in runtimes:
            for ctx in contexts:
                batches, model = models_at[ctx]
                pays, stops = paying_range(batches, _best(batches, model, rt))
                out.append(
                    {
                        "device": dev,
                        "runtime": rt.name,
                        "context_tokens": float(ctx),
                        "pays_from": pays,
                        "stops_from": stops,
                        "max_fit_batch": max(batches, default=0),
                    }
                )
    return out


def describe_range(pays_from: int | None, stops_from: int | None, max_fit_batch: int) -> str:
    """Where SD pays on the batches that fit, in a table cell: never <=64 / 8..64+ (still at the largest that
    fits) / 8..32 (not from 64) / no batch fits."""
    if max_fit_batch < 1:  # not "never pays": the weights and one sequence's cache do not fit
        return "no batch fits"
    if pays_from is None:
        return f"never <={max_fit_batch}"
    if stops_from is None:
        return f"{pays_from}..{max_fit_batch}+"
    return f"{pays_from}..{stops_from // 2}"


def describe_sweep_range(c: SweepComparison) -> str:
    """Where a sweep's SD pays on the whole grid, and where the catalog's device runs out of memory."""
    top = c.grid_batches[-1] if c.grid_batches else GRID_BATCHES[-1]
    if c.pays_from is None:
        text = f"never (at any batch up to {top})"
    elif c.stops_from is None:
        text = f"from {c.pays_from} (still at {top}, the grid's largest)"
    else:
        text = f"{c.pays_from} to {c.stops_from // 2}, not from {c.stops_from}"
    fits = (
        f"up to batch {c.max_fit_batch}"
        if c.max_fit_batch
        else "at no batch (the published card held more memory)"
    )
    return f"{text}; weights and KV caches fit the catalog's {c.device} {fits}"
