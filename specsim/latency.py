"""Reading measured latency tables: Tp(context), Tq(context, batch), v(γ) = Tv(γ)/Tp, prefill(tokens),
and the cost of one block γ·c + v in units of Tp.

Linear interpolation between measured points; a query outside the measured range is refused with a
:class:`SpecsimError` rather than silently extrapolated (a single-point table answers only its x).
"""

from __future__ import annotations

import numpy as np

from specsim.errors import SpecsimError
from specsim.profile import Curve, LatencySection
from specsim.tau import check_gamma

# Tolerance for "inside the measured range", relative to the range, so 512.0000001 counts as 512.
_RANGE_EPS = 1e-9


def interp_curve(curve: Curve | None, x, *, name: str):
    """y_ms at ``x`` by linear interpolation in ``curve``; SpecsimError if absent or out of range."""
    if curve is None:
        raise SpecsimError(f"{name}: not measured in this profile")
    xs = np.asarray(curve.x, dtype=float)
    ys = np.asarray(curve.ms, dtype=float)
    q = np.asarray(x, dtype=float)
    span = max(xs[-1] - xs[0], 1.0) * _RANGE_EPS
    if np.any(q < xs[0] - span) or np.any(q > xs[-1] + span):
        bad = q[(q < xs[0] - span) | (q > xs[-1] + span)].ravel()[0]
        raise SpecsimError(f"{name}: {bad:g} is outside the measured range {xs[0]:g}..{xs[-1]:g} "
                           "(specsim does not extrapolate measured tables)")
    out = np.interp(q, xs, ys)
    return out if out.ndim else float(out)


def curve_covers(curve: Curve | None, x) -> bool:
    """True when ``curve`` exists and every ``x`` lies inside its measured range."""
    if curve is None:
        return False
    q = np.asarray(x, dtype=float)
    return bool(np.all(q >= curve.x[0]) and np.all(q <= curve.x[-1]))


def default_context_tokens(latency: LatencySection) -> float | None:
    """The context length at which decode-phase ratios are read when the caller gives none."""
    if latency.verify_context_tokens is not None:
        return float(latency.verify_context_tokens)
    if latency.target_decode_ms_by_context is not None:
        return float(latency.target_decode_ms_by_context.x[0])
    return None


def target_decode_ms(latency: LatencySection, context_tokens=None):
    """Tp (ms) at ``context_tokens`` (default: the profile's verify context)."""
    ctx = default_context_tokens(latency) if context_tokens is None else context_tokens
    return interp_curve(latency.target_decode_ms_by_context, ctx, name="Tp (target_decode_ms_by_context)")


def draft_decode_ms(latency: LatencySection, context_tokens=None, batch_size: int = 1):
    """Tq (ms) at ``context_tokens`` for a batch of ``batch_size`` draft contexts (ensembles).

    Batch > 1 scales Tq(context) by Tq(batch)/Tq(1) from ``draft_decode_ms_by_batch`` (measured at
    one context), i.e. the batch cost is assumed to be a context-independent factor.
    """
    ctx = default_context_tokens(latency) if context_tokens is None else context_tokens
    tq = interp_curve(latency.draft_decode_ms_by_context, ctx, name="Tq (draft_decode_ms_by_context)")
    if batch_size == 1:
        return tq
    by_batch = latency.draft_decode_ms_by_batch
    factor = (interp_curve(by_batch, batch_size, name="draft_decode_ms_by_batch")
              / interp_curve(by_batch, 1, name="draft_decode_ms_by_batch"))
    return tq * factor


def verify_ms(latency: LatencySection, gamma):
    """Tv(γ) (ms) from the measured table, interpolated between measured γ."""
    return interp_curve(latency.target_verify_ms_by_gamma, gamma, name="Tv(gamma) (target_verify_ms_by_gamma)")


def prefill_ms(curve: Curve | None, tokens, *, name: str):
    """Prefill time (ms) for a prompt of ``tokens`` tokens (0 tokens costs 0 ms)."""
    t = np.asarray(tokens, dtype=float)
    if np.all(t == 0):
        return 0.0 if t.ndim == 0 else np.zeros_like(t)
    return interp_curve(curve, tokens, name=name)


def latency_ratios(latency: LatencySection, gamma: int, *, context_tokens=None, batch_size: int = 1,
                   textbook: bool = False) -> tuple[float, float]:
    """(c, v) = (Tq/Tp, Tv(γ)/Tp) from measured tables; v = 1 when ``textbook``.

    Raises SpecsimError when the profile cannot give them separately.
    """
    gamma = check_gamma(gamma)
    tp = target_decode_ms(latency, context_tokens)
    tq = draft_decode_ms(latency, context_tokens, batch_size)
    v = 1.0 if textbook else verify_ms(latency, gamma) / tp
    return tq / tp, v


def block_cost(latency: LatencySection, gamma: int, *, context_tokens=None, batch_size: int = 1,
               textbook: bool = False) -> tuple[float | None, float | None, float | None, str]:
    """(γ·c + v, c, v, note): the block's cost in units of Tp, with whatever parts are known."""
    try:
        c, v = latency_ratios(latency, gamma, context_tokens=context_tokens, batch_size=batch_size,
                              textbook=textbook)
        return gamma * c + v, c, v, ""
    except SpecsimError as err:
        reason = str(err)
    bc = latency.block_cost
    if bc is None:
        return None, None, None, reason
    batch_note = ""
    if batch_size > 1:
        # IbED §6.1 measures a batch-2 draft step at well under 1% of the speedup; with no batch
        # table we take its claim, and say so.
        batch_note = f"; the {batch_size}-context draft batch is assumed to cost as batch 1 (IbED, Lee et al. 2024, §6.1)"
    if bc.gamma == gamma and not textbook:
        return bc.gamma_c_plus_v, None, None, "gamma*c+v from the profile's block_cost" + batch_note
    if textbook:
        # v = 1 turns the one known γ·c + v into c, which then carries to any γ.
        c = (bc.gamma_c_plus_v - 1.0) / bc.gamma
        return gamma * c + 1.0, c, 1.0, f"textbook: v=1, c from gamma*c+v at gamma={bc.gamma}" + batch_note
    reason = (f"Tv(gamma) unknown away from gamma={bc.gamma}: the profile gives gamma*c+v only at "
              f"gamma={bc.gamma} (pass --textbook to assume v=1)")
    return None, None, None, reason
