"""Closed forms of speculative decoding: block efficiency τ, its inverse α(τ), speedup, optimal γ.

All functions are vectorised: array arguments broadcast against each other (numpy rules).
References: Leviathan et al. 2023 (Eq. 1 for τ under i.i.d. acceptance, speedup with v = 1);
IbED (Lee et al. 2024) Eq. 2 for speedup = τ / (γ·c + v(γ)) with the measured v = Tv(γ)/Tp.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from specsim.bounds import MAX_GAMMA
from specsim.errors import SpecsimError

# Below this distance from α = 1 the ratio form loses digits; the Taylor series is exact enough.
_ALPHA_SERIES_EPS = 1e-6


def as_gammas(gamma) -> np.ndarray:
    """γ (scalar or array) as int64: integers in 1..MAX_GAMMA (:mod:`specsim.bounds`), checked before any
    array is built from them (γ near 2**63 would overflow γ+1)."""
    g = np.asarray(gamma)
    integral = g.dtype.kind in "iu" or (
        g.dtype.kind == "f" and np.all(np.isfinite(g)) and np.all(g == np.round(g))
    )
    if not integral or np.any(g < 1):
        raise SpecsimError(f"gamma: expected integers >= 1, got {_clip(gamma)}")
    if np.any(g > MAX_GAMMA):
        raise SpecsimError(f"gamma: expected at most {MAX_GAMMA} (the cap on gamma), got {_clip(gamma)}")
    return g.astype(np.int64)


def _clip(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_prob(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise SpecsimError(f"{name}: expected probabilities in [0, 1], got {x!r}")
    return a


def tau_iid(alpha, gamma):
    """τ = (1 − α^(γ+1)) / (1 − α) = Σ_{i=0..γ} α^i, tokens per block under i.i.d. acceptance α.

    Near α = 1 uses the series (γ+1) − d·γ(γ+1)/2 + d²·(γ+1)γ(γ−1)/6 with d = 1 − α, which avoids
    the 0/0 of the ratio form; α = 1 gives exactly γ+1 and α = 0 exactly 1.
    """
    a = _as_prob(alpha, "alpha")
    g = as_gammas(gamma).astype(float)
    a, g = np.broadcast_arrays(a, g)
    d = 1.0 - a
    near = d < _ALPHA_SERIES_EPS
    safe_d = np.where(near, 1.0, d)
    # -expm1((γ+1)·log α) = 1 − α^(γ+1) without cancellation for α just below 1
    with np.errstate(divide="ignore"):
        log_a = np.log(np.where(a > 0, a, 1.0))
    ratio = np.where(a > 0, -np.expm1((g + 1.0) * log_a) / safe_d, 1.0)
    series = (g + 1.0) - d * g * (g + 1.0) / 2.0 + d * d * (g + 1.0) * g * (g - 1.0) / 6.0
    out = np.where(near, series, ratio)
    return out if out.ndim else float(out)


def survival_iid(alpha, gamma: int) -> np.ndarray:
    """a_i = α^i for i = 1..γ (the i.i.d. survival curve), shape (..., γ)."""
    a = _as_prob(alpha, "alpha")
    i = np.arange(1, int(as_gammas(gamma)) + 1)
    return np.power(a[..., None], i)


def survival_past(survival, alpha: float, gamma: int) -> np.ndarray:
    """a_1..a_γ from a measured curve a_1..a_K: its own up to K, then each later draft accepted at the i.i.d.
    ``alpha`` (a_{K+j} = a_K·α^j), so the curve never rises (τ carried whole by an i.i.d. α can: its a_{K+1}
    may exceed the measured a_K). An extrapolation: callers say so."""
    a = np.asarray(survival, dtype=float)
    g = int(as_gammas(gamma))
    if g <= a.size:
        return a[:g].copy()
    return np.concatenate([a, a[-1] * np.power(float(alpha), np.arange(1, g - a.size + 1))])


def tau_from_survival(survival):
    """τ = 1 + Σ_{i=1..γ} a_i, with a_i = P(at least i drafts accepted); last axis is i."""
    a = _as_prob(survival, "survival")
    if a.ndim == 0:
        raise SpecsimError("survival: expected a sequence a_1..a_gamma, got a scalar")
    if np.any(np.diff(a, axis=-1) > 1e-12):
        raise SpecsimError("survival: expected a non-increasing sequence a_1 >= a_2 >= ...")
    out = 1.0 + a.sum(axis=-1)
    return out if np.ndim(out) else float(out)


def survival_from_histogram(hist) -> np.ndarray:
    """a_i = P(accepted ≥ i) for i = 1..γ from counts h[k] of blocks that accepted exactly k drafts."""
    h = np.asarray(hist, dtype=float)
    if h.ndim == 0 or h.shape[-1] < 2:
        raise SpecsimError(f"histogram: expected counts for k = 0..gamma (at least 2 bins), got {hist!r}")
    if np.any(h < 0) or np.any(~np.isfinite(h)):
        raise SpecsimError(f"histogram: expected non-negative counts, got {hist!r}")
    total = h.sum(axis=-1, keepdims=True)
    if np.any(total == 0):
        raise SpecsimError("histogram: expected at least one block, got all zeros")
    tail = np.flip(np.cumsum(np.flip(h, axis=-1), axis=-1), axis=-1)  # tail[k] = #blocks with ≥ k
    return tail[..., 1:] / total


def tau_from_histogram(hist):
    """τ = 1 + E[accepted] from the accepted-length histogram h[k], k = 0..γ (bonus token counted)."""
    return tau_from_survival(survival_from_histogram(hist))


def tau_from_histogram_at(hist, gamma: int) -> float:
    """τ(γ) for γ ≤ K from counts h[k] of blocks that accepted exactly k of K drafts, k = 0..K.

    τ(γ) = 1 + E[min(accepted, γ)] = 1 + Σ_{i≤γ} a_i: the first γ drafts of a K-draft block are the
    γ drafts a γ-block would propose (an autoregressive draft does not look ahead), so a_i for i ≤ γ is
    read off the K-draft blocks (the per-position reading of vLLM's acceptance counters; a real run at
    γ would start its blocks at other positions, which this does not model). Computed as one integer
    ratio, so it equals Σ_b (1 + min(acc_b, γ)) / N to the last bit. γ > K is not answerable from the
    counts (callers extrapolate and say so).
    """
    h = [int(x) for x in hist]
    if len(h) < 2 or any(x < 0 for x in h) or sum(h) == 0:
        raise SpecsimError(
            f"histogram: expected non-negative counts for k = 0..K with at least one block, got {hist!r}"
        )
    g = int(as_gammas(gamma))
    if g > len(h) - 1:
        raise SpecsimError(f"gamma: the histogram covers gamma <= {len(h) - 1}, got {g}")
    blocks = sum(h)
    return (blocks + sum(min(k, g) * n for k, n in enumerate(h))) / blocks


def alpha_from_tau(tau, gamma):
    """The i.i.d. α with tau_iid(α, γ) = τ (inverse of the closed form; root of a monotone function).

    Used to carry τ measured at one γ to another γ; that carry is an i.i.d. extrapolation and
    callers must say so.
    """
    t, g = _as_tau(tau, gamma)
    out = np.empty(t.shape, dtype=float)
    for idx in np.ndindex(t.shape):
        ti, gi = float(t[idx]), int(g[idx])
        if ti <= 1.0:
            out[idx] = 0.0
        elif ti >= gi + 1 - 1e-12:
            out[idx] = 1.0
        else:
            out[idx] = brentq(lambda a, ti=ti, gi=gi: tau_iid(a, gi) - ti, 0.0, 1.0, xtol=1e-14, rtol=1e-14)
    return out if out.ndim else float(out)


def speedup(tau, gamma, c, v):
    """Decode-phase speedup = τ / (γ·c + v), with c = Tq/Tp and v = Tv(γ)/Tp (IbED Eq. 2)."""
    t, g = _as_tau(tau, gamma)
    c, v = _finite(c, "c"), _finite(v, "v")
    if np.any(c < 0) or np.any(v <= 0):
        raise SpecsimError(f"c and v: expected c >= 0 and v > 0, got c={_clip(c)}, v={_clip(v)}")
    out = t / (g * c + v)
    return out if out.ndim else float(out)


def _as_tau(tau, gamma) -> tuple[np.ndarray, np.ndarray]:
    """(τ, γ) broadcast, τ within 1..γ+1: a block emits 1 to γ+1 tokens (1e-9 of slack for float sums)."""
    t, g = np.broadcast_arrays(_finite(tau, "tau"), as_gammas(gamma))
    if np.any(t < 1 - 1e-12) or np.any(t > g + 1 + 1e-9):
        raise SpecsimError(
            f"tau: expected 1 <= tau <= gamma+1, got tau={_clip(tau)} for gamma={_clip(gamma)}"
        )
    return t, g


def _finite(x, name: str) -> np.ndarray:
    """``x`` as a float array of finite values; SpecsimError naming ``name`` otherwise."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise SpecsimError(f"{name}: expected finite numbers, got {_clip(x)}") from None
    if not np.all(np.isfinite(a)):
        raise SpecsimError(f"{name}: expected finite numbers, got {_clip(x)}")
    return a


def block_speedup(tau, target_ms_per_token, block_ms):
    """Decode-phase speedup of blocks that take ``block_ms`` and emit τ tokens each, against target-only
    steps of Tp = ``target_ms_per_token``: τ·Tp / block_ms, i.e. :func:`speedup` with the block's ms in units
    of Tp (γ·c + v, plus whatever else a block pays). Vectorised; ms in any one unit."""
    out = (
        np.asarray(tau, dtype=float)
        * np.asarray(target_ms_per_token, dtype=float)
        / np.asarray(block_ms, dtype=float)
    )
    return out if out.ndim else float(out)


def sd_block_ms(draft_forwards, draft_ms, verify_ms, overhead_ms=0.0):
    """ms of one speculative block: ``draft_forwards`` draft steps of ``draft_ms`` (γ, plus any extra
    forward a runtime runs), one verification of ``verify_ms`` and ``overhead_ms`` outside the models."""
    return draft_forwards * draft_ms + verify_ms + overhead_ms


def optimal_gamma(alpha, c, v_of_gamma=None, gamma_max: int = 16):
    """argmax over γ = 1..gamma_max of speedup(tau_iid(α, γ), γ, c, v(γ)).

    ``v_of_gamma``: array of v for γ = 1..gamma_max (shape (gamma_max,)), or None for v = 1.
    Returns (best_gamma, best_speedup), each broadcast over α and c.
    """
    integer = isinstance(gamma_max, (int, np.integer)) and not isinstance(gamma_max, bool)
    if not integer or not 1 <= gamma_max <= MAX_GAMMA:
        raise SpecsimError(f"gamma_max: expected an integer in 1..{MAX_GAMMA}, got {_clip(gamma_max)}")
    gammas = np.arange(1, int(gamma_max) + 1)
    v = np.ones(gammas.shape) if v_of_gamma is None else _finite(v_of_gamma, "v_of_gamma")
    if v.shape != gammas.shape:
        raise SpecsimError(
            f"v_of_gamma: expected {gamma_max} values (gamma = 1..{gamma_max}), got shape {v.shape}"
        )
    a = np.asarray(alpha, dtype=float)[..., None]
    cc = _finite(c, "c")[..., None]
    s = speedup(tau_iid(a, gammas), gammas, cc, v)
    best = np.argmax(s, axis=-1)
    best_s = np.take_along_axis(s, best[..., None], axis=-1)[..., 0]
    best_g = gammas[best]
    return (best_g if best_g.ndim else int(best_g)), (best_s if best_s.ndim else float(best_s))


def as_acceptance(acceptance) -> np.ndarray:
    """Per-depth, per-rank acceptance as an array (..., D, K); a 1-D array is one row for every depth."""
    a = np.asarray(acceptance, dtype=float)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim < 2 or a.shape[-1] < 1 or a.shape[-2] < 1:
        raise SpecsimError(
            f"acceptance: expected an array (depth, rank) of probabilities, got shape {a.shape}"
        )
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise SpecsimError("acceptance: expected probabilities in [0, 1]")
    if np.any(a.sum(axis=-1) > 1 + 1e-9):
        raise SpecsimError(
            "acceptance: the ranks of one depth are exclusive events; expected each row to sum to <= 1, "
            f"got up to {a.sum(axis=-1).max():.6g}"
        )
    return a
