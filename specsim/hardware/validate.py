"""Predicted vs published: runtime-aware roofline and the textbook formula on the published GPU set.

For an ``sd`` row (DESIGN.md): Tp = decode(target), Tq = decode(draft, one GPU), Tv = verify(target,
γ+1 rows), block = γ·Tq + Tv + runtime.overhead_ms_per_block; speedup = τ·Tp / block and SD ms per
token = block / τ. A ``decode`` row compares Tp with the published ms per token.
Textbook (Leviathan et al. 2023): speedup = τ / (γ·c + 1) with c = draft weight bytes / target weight
bytes (the memory-bound ratio) and v = 1; ms per token from bytes / peak bandwidth, no overhead.

Fitting: the parameters each runtime lists in ``fit`` are least-squares fitted on log(predicted /
measured), with a weak pull toward neutral values (no overhead, 80 % of bandwidth, 60 % of peak
FLOP/s) so a parameter few rows see stays near them. Leave-one-source-out refits on every other
source; a runtime no other source covers keeps its file values, and those rows are flagged
``in_source`` (not a held-out prediction).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specsim.errors import SpecsimError
from specsim.hardware.device import Device, load_device
from specsim.hardware.published_set import PublishedSet, Row
from specsim.hardware.roofline import decode_ms, forward_bytes, verify_ms
from specsim.hardware.runtime import PARAM_BOUNDS, Runtime, load_runtime

NEUTRAL = Runtime(name="neutral")
PRIOR_WEIGHT = 0.05  # residual units per unit of log-parameter (efficiencies) or per ms (overheads)


@dataclass(frozen=True)
class RowResult:
    """One row: published value, specsim's and the textbook's prediction, signed relative errors."""

    id: str
    source: str
    runtime: str
    device: str
    observable: str
    measured: float
    predicted: float
    textbook: float
    in_source: bool  # True: the runtime's parameters were fitted on this row's own source
    batch: int = 1
    context_tokens: float = 0.0

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def textbook_error(self) -> float:
        return self.textbook / self.measured - 1.0

    def to_json(self) -> dict:
        return asdict(self) | {"error": self.error, "textbook_error": self.textbook_error}


@functools.lru_cache(maxsize=64)
def _device(name: str) -> Device:
    return load_device(name)


@functools.lru_cache(maxsize=256)
def _spec(ps_key: int, ps: PublishedSet, name: str, dtype: str, kv_dtype: str):
    """ModelSpecs are rebuilt thousands of times by a fit: cache them per set (``ps_key`` = id of the set)."""
    return ps.model(name, dtype, kv_dtype)


def _models(ps: PublishedSet, row: Row):
    target = _spec(id(ps), ps, row.target, row.weights_dtype, row.kv_dtype)
    draft = None if row.draft is None else _spec(id(ps), ps, row.draft, row.draft_weights_dtype, row.kv_dtype)
    return target, draft


def predict_row(ps: PublishedSet, row: Row, rt: Runtime) -> float:
    """specsim's prediction of the row's observable under runtime ``rt``."""
    target, draft = _models(ps, row)
    dev = _device(row.device)
    ctx = row.target_context_tokens
    tp = decode_ms(target, dev, rt, ctx, row.batch, tp=row.tp)
    if row.kind == "decode":
        return float(tp)
    d_ctx = ctx if row.draft_context_tokens is None else row.draft_context_tokens
    tq = decode_ms(draft, dev, rt, d_ctx, row.batch)
    tv = verify_ms(target, dev, rt, row.gamma, ctx, row.batch, tp=row.tp)
    block = row.gamma * tq + tv + rt.overhead_ms_per_block
    return float(row.tau * tp / block) if row.observable == "speedup" else float(block / row.tau)


def textbook_row(ps: PublishedSet, row: Row) -> float:
    """The textbook prediction: v = 1, c = weight-bytes ratio; ms from bytes / peak bandwidth."""
    target, draft = _models(ps, row)
    dev = _device(row.device)
    ideal_tp = float(forward_bytes(target, row.batch, row.target_context_tokens, 1) / row.tp
                     / dev.memory_bandwidth_bytes_per_s * 1e3)
    if row.kind == "decode":
        return ideal_tp
    c = draft.weight_bytes / target.weight_bytes
    speedup = row.tau / (row.gamma * c + 1.0)
    return speedup if row.observable == "speedup" else ideal_tp / speedup


def _is_log(name: str) -> bool:
    return "efficiency" in name


def _pack(runtimes: dict[str, Runtime], names: list[str]) -> tuple[list[tuple[str, str]], np.ndarray]:
    keys = [(r, k) for r in names for k in runtimes[r].fit]
    x0 = np.array([np.log(getattr(runtimes[r], k)) if _is_log(k) else getattr(runtimes[r], k) for r, k in keys])
    return keys, x0


def _unpack(runtimes: dict[str, Runtime], keys, theta, source: str) -> dict[str, Runtime]:
    out = dict(runtimes)
    for (r, k), v in zip(keys, theta):
        out[r] = out[r].with_values(source, **{k: float(np.exp(v)) if _is_log(k) else float(v)})
    return out


def fit_runtimes(ps: PublishedSet, rows: list[Row], runtimes: dict[str, Runtime],
                 source: str) -> dict[str, Runtime]:
    """Refit every runtime's ``fit`` parameters on ``rows`` (those runtimes that have rows)."""
    rows = [r for r in rows if r.observable is not None]
    names = sorted({r.runtime for r in rows if runtimes[r.runtime].fit})
    keys, x0 = _pack(runtimes, names)
    if not keys:
        return runtimes
    prior = np.array([np.log(getattr(NEUTRAL, k)) if _is_log(k) else getattr(NEUTRAL, k) for _, k in keys])
    measured = np.array([r.measured for r in rows])
    lo = np.array([np.log(PARAM_BOUNDS[k][0]) if _is_log(k) else PARAM_BOUNDS[k][0] for _, k in keys])
    hi = np.array([np.log(PARAM_BOUNDS[k][1]) if _is_log(k) else min(PARAM_BOUNDS[k][1], 100.0) for _, k in keys])

    def residuals(theta: np.ndarray) -> np.ndarray:
        rts = _unpack(runtimes, keys, theta, source)
        pred = np.array([predict_row(ps, r, rts[r.runtime]) for r in rows])
        return np.concatenate([np.log(pred / measured), PRIOR_WEIGHT * (theta - prior)])

    starts = [np.clip(x0, lo, hi), np.clip(prior, lo, hi)]
    best = min((least_squares(residuals, s, bounds=(lo, hi), method="trf", x_scale=1.0) for s in starts),
               key=lambda res: res.cost)
    return _unpack(runtimes, keys, best.x, source)


def load_runtimes(ps: PublishedSet, overrides: dict[str, Runtime] | None = None) -> dict[str, Runtime]:
    """Runtime of every row (shipped files unless ``overrides`` names one)."""
    overrides = overrides or {}
    return {name: overrides.get(name) or load_runtime(name) for name in sorted({r.runtime for r in ps.rows})}


def _result(ps: PublishedSet, row: Row, rt: Runtime, in_source: bool) -> RowResult:
    return RowResult(row.id, row.source, row.runtime, row.device, row.observable, float(row.measured),
                     predict_row(ps, row, rt), textbook_row(ps, row), in_source, row.batch,
                     row.target_context_tokens)


def leave_one_source_out(ps: PublishedSet, runtimes: dict[str, Runtime]) -> list[RowResult]:
    """Each source's rows predicted with runtime parameters fitted on the other sources only."""
    usable = [r for r in ps.rows if r.observable is not None]
    out: list[RowResult] = []
    for key in sorted({r.source for r in usable}):
        train = [r for r in usable if r.source != key]
        fitted = fit_runtimes(ps, train, runtimes, f"fitted leave-one-source-out without {key}")
        covered = {r.runtime for r in train}
        out += [_result(ps, r, fitted[r.runtime], r.runtime not in covered and bool(runtimes[r.runtime].fit))
                for r in usable if r.source == key]
    return out


def fit_all(ps: PublishedSet, runtimes: dict[str, Runtime], command: str) -> dict[str, Runtime]:
    """Fit every runtime on the whole set (what the shipped runtime files hold); ``command`` is cited."""
    usable = [r for r in ps.rows if r.observable is not None]
    counts = {name: sorted({r.source for r in usable if r.runtime == name}) for name in runtimes}
    fitted = fit_runtimes(ps, usable, runtimes, "")
    return {name: replace(rt, sources={**rt.sources, **{
        k: f"fitted: `{command}` on the published set's rows of {', '.join(counts[name]) or 'no source'}"
        for k in rt.fit}}) if counts[name] else runtimes[name] for name, rt in fitted.items()}


@dataclass(frozen=True)
class Summary:
    rows: int
    median_abs_error: float
    max_abs_error: float
    textbook_median_abs_error: float
    textbook_max_abs_error: float


def summarize(results: list[RowResult], *, held_out_only: bool = False) -> Summary | None:
    """Median and max |relative error| of specsim and of the textbook formula."""
    rs = [r for r in results if not (held_out_only and r.in_source)]
    if not rs:
        return None
    e = np.abs([r.error for r in rs])
    t = np.abs([r.textbook_error for r in rs])
    return Summary(len(rs), float(np.median(e)), float(e.max()), float(np.median(t)), float(t.max()))


def check_runtime_kinds(ps: PublishedSet, runtimes: dict[str, Runtime]) -> None:
    """A GPU row needs a GPU runtime."""
    for row in ps.rows:
        rt = runtimes[row.runtime]
        if rt.kind != _device(row.device).kind:
            raise SpecsimError(f"row {row.id}: runtime {rt.name!r} runs on {rt.kind} devices but "
                               f"{row.device!r} is a {_device(row.device).kind}")
