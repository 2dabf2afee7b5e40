"""The one timing primitive of ``calibrate``: every measured millisecond goes through :func:`measure`.

CPU: ``time.perf_counter``; GPU: CUDA events plus a synchronize (vidur's timer, gpt-fast's ``device_sync``).
Warm-up discarded; repeats until the median's 95% half-width is ≤ ``target_rel_halfwidth`` × median or
``max_repeats``. The median's interval is distribution-free, order statistics [x_(k), x_(n+1-k)] (Conover,
*Practical Nonparametric Statistics*, §3.2); below n = 6, [min, max]. More: ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import check_schema_version

SCHEMA_VERSION = 1
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Timing:
    """Median of repeated calls (ms), its spread (interquartile range, ms), n and 95% CI half-width (ms)."""

    median_ms: float
    spread_ms: float
    n: int
    halfwidth_ms: float
    samples_ms: tuple[float, ...]
    schema_version: int = SCHEMA_VERSION

    @property
    def rel_halfwidth(self) -> float:
        """halfwidth_ms / median_ms (inf for a zero median)."""
        return self.halfwidth_ms / self.median_ms if self.median_ms > 0 else math.inf

    def to_json(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "median_ms": self.median_ms,
            "spread_ms": self.spread_ms,
            "n": self.n,
            "halfwidth_ms": self.halfwidth_ms,
            "samples_ms": list(self.samples_ms),
        }

    @classmethod
    def from_json(cls, d: dict, where: str = "timing") -> Timing:
        """Validated: every field present, ms finite and >= 0 (median > 0), n an integer >= 1."""
        check_schema_version(d, SCHEMA_VERSION, where)
        samples = d.get("samples_ms")
        if not isinstance(samples, list):
            raise SpecsimError(f"{where}.samples_ms: expected a list of ms, got {samples!r:.60}")
        n = d.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SpecsimError(f"{where}.n: expected an integer >= 1, got {n!r:.60}")
        median = _ms(d.get("median_ms"), f"{where}.median_ms")
        if median == 0:
            raise SpecsimError(f"{where}.median_ms: expected > 0, got 0")
        return cls(
            median,
            _ms(d.get("spread_ms"), f"{where}.spread_ms"),
            n,
            _ms(d.get("halfwidth_ms"), f"{where}.halfwidth_ms"),
            tuple(_ms(s, f"{where}.samples_ms[{i}]") for i, s in enumerate(samples)),
        )


def _ms(value, where: str) -> float:
    """A finite number of ms in 0..1e8 (specsim.bounds' ms ceiling); SpecsimError naming ``where``."""
    from specsim.bounds import RANGES

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= RANGES["ms"][1]:
        raise SpecsimError(f"{where}: expected a number of ms in 0..{RANGES['ms'][1]:g}, got {value!r:.60}")
    return float(value)


def median_ci_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """1-based rank k of the lower order statistic of a distribution-free CI for the median (0 if none)."""
    from scipy.stats import binom

    alpha_tail = (1.0 - confidence) / 2.0
    # Largest k with P(B < k) = P(B <= k-1) <= alpha_tail, B ~ Binomial(n, 1/2).
    ks = np.arange(1, n // 2 + 1)
    ok = ks[binom.cdf(ks - 1, n, 0.5) <= alpha_tail]
    return int(ok[-1]) if ok.size else 0


def summarize(samples_ms: list[float] | tuple[float, ...], confidence: float = CONFIDENCE) -> Timing:
    """Median, IQR spread, n and the CI half-width of the median of ``samples_ms`` (see module docstring)."""
    if len(samples_ms) == 0:
        raise SpecsimError("timing: expected at least one sample, got none")
    xs = np.sort(np.asarray(samples_ms, dtype=float))
    n = xs.size
    k = median_ci_rank(n, confidence)
    lo, hi = (xs[k - 1], xs[n - k]) if k >= 1 else (xs[0], xs[-1])
    q1, q3 = np.percentile(xs, [25, 75])
    return Timing(
        median_ms=float(np.median(xs)),
        spread_ms=float(q3 - q1),
        n=int(n),
        halfwidth_ms=float(hi - lo) / 2.0,
        samples_ms=tuple(float(s) for s in samples_ms),
    )


def device_sync(device: str | object = "cpu") -> None:
    """Wait for all queued work on ``device`` (no-op on CPU; torch is imported only for CUDA/MPS)."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch

        torch.cuda.synchronize(device)
    elif kind == "mps":
        import torch

        torch.mps.synchronize()


class _Elapsed:
    """Holder of the elapsed ms of one :func:`timed` block (``ms`` is set when the block exits)."""

    ms: float = math.nan


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector collected before a timed run and off during it (reference counting
    still frees what the run drops). A collection of the oldest generation in a process that has loaded
    models and kept earlier runs' records pauses a run for up to a few hundred ms, at moments set by the
    process's history, not by the server it measures (a serving engine such as vLLM freezes its heap after
    start-up for the same reason)."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def timed(device: str | object = "cpu", clock: Callable[[], float] | None = None) -> Iterator[_Elapsed]:
    """Context manager timing one block in ms: CUDA events on GPU, sync + perf_counter elsewhere.

    ``clock`` (seconds, like ``time.perf_counter``) replaces the wall clock, e.g. in tests.
    """
    out = _Elapsed()
    if clock is None and str(device).startswith("cuda"):
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield out
        end.record()
        torch.cuda.synchronize(device)
        out.ms = float(start.elapsed_time(end))
        return
    clock = clock or time.perf_counter
    device_sync(device)
    t0 = clock()
    yield out
    device_sync(device)
    out.ms = (clock() - t0) * 1e3


def measure(
    fn: Callable[[], object],
    *,
    device: str | object = "cpu",
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 50,
    target_rel_halfwidth: float = 0.02,
    clock: Callable[[], float] | None = None,
    setup: Callable[[], object] | None = None,
    max_seconds: float | None = None,
) -> Timing:
    """Time ``fn()`` in ms: ``warmup`` discarded calls, then repeats until the median's 95% CI
    half-width ≤ ``target_rel_halfwidth`` × median (at least ``min_repeats``, at most ``max_repeats``).

    ``setup()`` runs untimed before every call (e.g. cropping a KV cache back to its context);
    ``max_seconds`` (wall time of timed calls) stops early once ``min_repeats`` are done.
    """
    return measure_interleaved(
        {"fn": (fn, setup)},
        device=device,
        warmup=warmup,
        min_repeats=min_repeats,
        max_repeats=max_repeats,
        target_rel_halfwidth=target_rel_halfwidth,
        clock=clock,
        max_seconds=max_seconds,
    )["fn"]


def out_of_time(t0: float, max_seconds: float | None, rounds_done: int, min_rounds: int) -> bool:
    """Whether a check stops starting rounds: ``max_seconds`` past ``t0`` (``time.perf_counter``), and only
    once ``min_rounds`` have run (--max-minutes yields to --min-rounds, "at least this many rounds")."""
    return rounds_done >= min_rounds and max_seconds is not None and time.perf_counter() - t0 > max_seconds


def measure_interleaved(
    calls: dict[str, tuple[Callable[[], object], Callable[[], object] | None]],
    *,
    device: str | object = "cpu",
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 50,
    target_rel_halfwidth: float = 0.02,
    clock: Callable[[], float] | None = None,
    max_seconds: float | None = None,
) -> dict[str, Timing]:
    """:func:`measure` for several calls in round-robin (one call of each per round), so that a slow
    change in machine load hits all of them alike and their ratios (e.g. Tv(γ)/Tp) stay unbiased.

    ``calls`` maps a name to ``(fn, setup)``. Rounds continue until every call's half-width meets the
    target (after ``min_repeats``), ``max_repeats`` rounds, or ``max_seconds`` × len(calls) of timed work.
    """
    if min_repeats < 1 or max_repeats < min_repeats:
        raise SpecsimError(
            f"timing: expected 1 <= min_repeats <= max_repeats, got {min_repeats} and {max_repeats}"
        )
    if warmup < 0:
        raise SpecsimError(f"timing: expected warmup >= 0, got {warmup}")
    if not calls:
        raise SpecsimError("timing: expected at least one call to measure, got none")
    for _ in range(warmup):
        for fn, setup in calls.values():
            if setup is not None:
                setup()
            fn()
            device_sync(device)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    budget_s = None if max_seconds is None else max_seconds * len(calls)
    for rounds in range(1, max_repeats + 1):
        for name, (fn, setup) in calls.items():
            if setup is not None:
                setup()
            with timed(device, clock) as t:
                fn()
            samples[name].append(t.ms)
        if rounds >= max(min_repeats, min(2, max_repeats)):  # one sample has no spread: its half-width is 0
            results = {name: summarize(xs) for name, xs in samples.items()}
            if all(r.halfwidth_ms <= target_rel_halfwidth * r.median_ms for r in results.values()):
                return results
            if budget_s is not None and sum(map(sum, samples.values())) / 1e3 >= budget_s:
                return results
    return {name: summarize(xs) for name, xs in samples.items()}
