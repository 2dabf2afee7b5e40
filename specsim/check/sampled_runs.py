"""The measured side of a sampled-mode ``specsim check`` (temperature T > 0) and the β traces it is
predicted from: seeded runs reduced to τ and speedups (:func:`measure_sampled`), the timing noise of their
ratio (:func:`timing_halfwidth`), and each prompt's acceptance along its sampled target paths. The
prediction with its intervals is :mod:`specsim.check.sampled`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from specsim.check.comparison import RequestRun, ratio_halfwidth
from specsim.errors import SpecsimError, warn
from specsim.predict.pricing import TERMS
from specsim.profile_format import MethodAcceptance, Trace

# An SD run carries the timing noise of one run, the target-only side of a round the mean of two:
# var(ratio) ≈ σ² + σ²/2 = 3·(σ²/2), so the ratio's half-width is √3 × the target-only mean's.
TIMING_FACTOR = math.sqrt(3.0)


# --------------------------------------------------------------------------- measured
@dataclass(frozen=True)
class SampledMeasured:
    """The measured side of one sampled row: τ and speedups pooled over every prompt × seed, their
    relative 95% half-widths over the rounds, the timing-noise half-width, ms per block by term, and the
    tokens of every run per prompt (the design the prediction repeats)."""

    tau: float
    decode_speedup: float
    decode_halfwidth: float
    request_speedup: float
    request_halfwidth: float
    timing_halfwidth: float
    terms_ms_per_block: dict
    sd_tokens: dict
    base_tokens: dict
    rounds: int
    prompts: int
    new_tokens: int


def _decode_tokens(run: RequestRun) -> int:
    return run.tokens - run.first_tokens


def timing_halfwidth(base_rate: np.ndarray) -> float:
    """Relative 95% half-width of the measured speedup from timing alone: √3 × that of Σ_p mean_r of the
    target-only ms per token ``base_rate`` [prompts, rounds] (their work is fixed, so their spread is
    timing; Student t with Σ_p (R − 1) degrees of freedom)."""
    from scipy.stats import t as student_t

    rate = np.asarray(base_rate, dtype=float)
    rounds = rate.shape[1]
    if rounds < 2:
        return float("inf")
    rel_var = rate.var(1, ddof=1).sum() / rounds / rate.mean(1).sum() ** 2
    return float(TIMING_FACTOR * student_t.ppf(0.975, rate.shape[0] * (rounds - 1)) * np.sqrt(rel_var))


def measure_sampled(
    base: dict[str, list[tuple[RequestRun, RequestRun]]], sd: dict[str, list[RequestRun]]
) -> SampledMeasured:
    """Reduce a row's runs: per prompt, per round the target-only runs before and after, and one SD run."""
    ids = sorted(sd)
    if not ids:
        raise SpecsimError("check: no runs to measure")
    rounds = min(min(len(sd[p]), len(base[p])) for p in ids)
    if rounds < 2:
        raise SpecsimError(f"check: a sampled check needs at least 2 runs (seeds) per prompt, got {rounds}")
    s = [sd[p][:rounds] for p in ids]
    b = [base[p][:rounds] for p in ids]
    grid = lambda runs, f: np.array([[f(r) for r in row] for row in runs], dtype=float)  # noqa: E731
    s_ms, s_tok = grid(s, lambda r: r.decode_ms), grid(s, _decode_tokens)
    b_ms = grid(b, lambda r: r[0].decode_ms + r[1].decode_ms)
    b_tok = grid(b, lambda r: _decode_tokens(r[0]) + _decode_tokens(r[1]))
    if s_tok.sum() == 0 or b_tok.sum() == 0:
        raise SpecsimError(
            "check: every run emitted all its tokens in its first pass, so there is no decode "
            "phase to compare (expected a larger --max-new-tokens)"
        )
    s_rate, b_rate = s_ms / np.maximum(s_tok, 1), b_ms / np.maximum(b_tok, 1)
    b_tot = grid(b, lambda r: (r[0].total_ms + r[1].total_ms) / 2)
    s_tot = grid(s, lambda r: r.total_ms)
    later = max(sum(r.blocks - 1 for row in s for r in row), 1)
    terms = {t: float(sum(getattr(r, f"{t}_ms") for row in s for r in row) / later) for t in TERMS}
    return SampledMeasured(
        tau=float(sum(r.tokens for row in s for r in row) / sum(r.blocks for row in s for r in row)),
        decode_speedup=float((b_ms.sum() / b_tok.sum()) / (s_ms.sum() / s_tok.sum())),
        decode_halfwidth=ratio_halfwidth(b_rate, s_rate),
        request_speedup=float(b_tot.mean(1).sum() / s_tot.mean(1).sum()),
        request_halfwidth=ratio_halfwidth(b_tot, s_tot),
        timing_halfwidth=timing_halfwidth(b_rate),
        terms_ms_per_block=terms,
        sd_tokens={p: tuple(r.tokens for r in row) for p, row in zip(ids, s)},
        base_tokens={p: tuple(t for r in row for t in (r[0].tokens, r[1].tokens)) for p, row in zip(ids, b)},
        rounds=rounds,
        prompts=len(ids),
        new_tokens=int(max(r.tokens for row in s for r in row)),
    )


# --------------------------------------------------------------------------- β traces
_BETA_T = re.compile(r"beta at T=([0-9.eE+-]+)")


def beta_temperature(entry: MethodAcceptance) -> float | None:
    """The temperature the entry's β was measured at, as ``calibrate acceptance`` notes it ("beta at
    T=1.0")."""
    found = _BETA_T.search(entry.notes or "")
    try:
        return float(found.group(1)) if found else None
    except ValueError:
        return None


def check_sampling_entry(entry: MethodAcceptance, temperature: float) -> None:
    """SpecsimError unless the entry has β traces (or sampled paths) measured at ``temperature`` (a warning
    when it does not say, and when it has no sampled paths)."""
    where = f"acceptance entry {entry.method}/{entry.scenario}"
    if not entry.traces or any(t.beta is None and not t.accept_paths for t in entry.traces):
        raise SpecsimError(
            f"{where}: a sampled check needs beta traces for every prompt (run 'specsim calibrate "
            f"acceptance --temperature {temperature:g}' on the same prompts)"
        )
    measured_at = beta_temperature(entry)
    if measured_at is None:
        warn(f"{where} does not say at which temperature its beta was measured; assuming T={temperature:g}")
    elif not math.isclose(measured_at, temperature, rel_tol=1e-6):
        raise SpecsimError(
            f"{where}: beta was measured at T={measured_at:g}, but --temperature is {temperature:g} "
            f"(expected the same T; run 'specsim calibrate acceptance --temperature {temperature:g}' "
            "into another profile)"
        )
    if not all(t.accept_paths for t in entry.traces):
        warn(
            f"{where} has beta on the target's greedy output only, while a sampled run follows its own "
            "tokens (their acceptance can differ, and the intervals then miss); measure the target's sampled "
            "paths with "
            f"'specsim calibrate acceptance --temperature {temperature:g} --sample-paths 8'"
        )


def beta_at_length(beta, n: int) -> tuple[np.ndarray, bool]:
    """β over a run of ``n`` tokens: the trace's first n values, continued at its mean when the run is
    longer (True then)."""
    b = np.asarray(beta, dtype=float)
    if b.size == 0:
        raise SpecsimError("check: a beta trace has no positions")
    if n <= b.size:
        return b[:n], False
    return np.concatenate([b, np.full(n - b.size, b.mean())]), True


def acceptance_paths(trace: Trace, n: int) -> tuple[np.ndarray, bool]:
    """[K, n] acceptance probabilities of a simulated run of ``n`` tokens: the trace's K sampled paths or,
    without them, its β on the greedy output (K = 1); each cut at n or continued at its mean (True then)."""
    cut = [beta_at_length(row, n) for row in (trace.accept_paths or (trace.beta,))]
    return np.stack([b for b, _ in cut]), any(longer for _, longer in cut)


def replicate_runs(rng: np.random.Generator, resample: np.ndarray, pool_runs: int, count: int) -> np.ndarray:
    """Pool indices [replicates, count] of ``count`` runs per replicate: each run takes a path of its
    replicate's resample ``resample`` [replicates, K] and one of that path's pool runs (pool run i follows
    path i mod K). With one path, plain draws from the pool."""
    reps, k = resample.shape
    if k == 1:
        return rng.integers(0, pool_runs, size=(reps, count))
    path = np.take_along_axis(resample, rng.integers(0, k, size=(reps, count)), axis=1)
    return path + k * rng.integers(0, pool_runs // k, size=(reps, count))
