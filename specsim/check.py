"""Predicted vs measured speculative decoding: CheckRows, relative errors and the printed table.

Predicted: τ(γ) from the profile's acceptance (greedy traces replayed over the same prompts when
they are there) and speedup = τ / (γ·c + v(γ)) with c = Tq/Tp and v = Tv(γ)/Tp from the profile's
latency tables (seed 003, Eq. 2). Textbook: what Leviathan et al.'s formula gives with v = 1 and
τ from an i.i.d. α fitted to τ at one reference γ. Measured: wall-clock ms per token of real
speculative decoding vs target-only decoding in the same run. Relative error = (pred − meas)/meas.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.profile import CheckRow, MethodAcceptance, Profile
from specsim.theory import alpha_from_tau, speedup, tau_iid


@dataclass(frozen=True)
class Measured:
    """One γ measured by ``specsim check``: τ and decode-phase ms per token of SD and of the target."""

    gamma: int
    tau: float
    sd_ms_per_token: float
    target_ms_per_token: float
    prompts: int
    new_tokens: int

    @property
    def speedup(self) -> float:
        return self.target_ms_per_token / self.sd_ms_per_token


def relative_error(predicted, measured):
    """(predicted − measured) / measured, vectorised."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    out = (p - m) / m
    return out if out.ndim else float(out)


def textbook_speedup(tau_reference: float, gamma_reference: int, gamma: int, c: float) -> float:
    """Leviathan's prediction: τ from i.i.d. α = α(τ_ref at γ_ref), speedup = τ / (γ·c + 1)."""
    tau = tau_iid(alpha_from_tau(tau_reference, gamma_reference), gamma)
    return float(speedup(tau, gamma, c, 1.0))


def predicted_tau(entry: MethodAcceptance, gamma: int, prompt_ids=None) -> tuple[float, str]:
    """(τ, source): replay of the traces of ``prompt_ids`` when all have greedy traces, else the
    profile's best τ at γ (:func:`specsim.predict.tau_with_source`)."""
    from specsim.predict import tau_with_source
    from specsim.replay import replay_traces_tau

    if prompt_ids:
        by_id = {t.prompt_id: t for t in entry.traces if t.match is not None and t.prompt_id is not None}
        if all(p in by_id for p in prompt_ids):
            return float(replay_traces_tau([by_id[p] for p in prompt_ids], gamma)), "replay (same prompts)"
    return tau_with_source(entry, gamma)


def reference_tau(entry: MethodAcceptance, fallback_gamma: int) -> tuple[float, int]:
    """(τ_ref, γ_ref) the textbook fit starts from: the entry's own single-γ τ, else τ at ``fallback_gamma``."""
    from specsim.predict import tau_with_source
    from specsim.theory import tau_from_histogram

    if entry.gamma is not None and entry.tau is not None:
        return entry.tau, entry.gamma
    if entry.gamma is not None and entry.accepted_histogram is not None:
        return float(tau_from_histogram(entry.accepted_histogram)), entry.gamma
    return tau_with_source(entry, fallback_gamma)[0], fallback_gamma


def check_row(profile: Profile, entry: MethodAcceptance, measured: Measured, *, prompt_ids=None,
              context_tokens: float | None = None, reference_gamma: int | None = None) -> CheckRow:
    """Predicted (profile) vs ``measured`` at one γ as a :class:`CheckRow`."""
    from specsim.predict import latency_ratios

    g = measured.gamma
    try:
        c, v = latency_ratios(profile.latency, g, context_tokens=context_tokens, batch_size=entry.draft_batch_size)
        where = f"context {context_tokens:g}" if context_tokens is not None else "default context"
    except SpecsimError:
        if context_tokens is None:
            raise
        c, v = latency_ratios(profile.latency, g, batch_size=entry.draft_batch_size)
        where = "default context (mean context outside the measured range)"
    tau, source = predicted_tau(entry, g, prompt_ids)
    tau_ref, g_ref = reference_tau(entry, reference_gamma or g)
    return CheckRow(
        method=entry.method, scenario=entry.scenario, gamma=g, tau_predicted=tau, tau_measured=measured.tau,
        speedup_predicted=float(speedup(tau, g, c, v)), speedup_measured=measured.speedup,
        speedup_textbook=textbook_speedup(tau_ref, g_ref, g, c),
        target_ms_per_token=measured.target_ms_per_token, sd_ms_per_token=measured.sd_ms_per_token,
        prompts=measured.prompts, new_tokens=measured.new_tokens,
        notes=f"tau: {source}; c={c:.4f}, v={v:.4f} at {where}; textbook: v=1, iid alpha from tau={tau_ref:.3f} "
              f"at gamma={g_ref}",
    )


def error_rows(rows) -> list[dict]:
    """Per row: γ, τ and speedups with relative errors (JSON-ready)."""
    out = []
    for r in rows:
        d = {"method": r.method, "scenario": r.scenario, "gamma": r.gamma,
             "tau_predicted": r.tau_predicted, "tau_measured": r.tau_measured,
             "tau_rel_err": relative_error(r.tau_predicted, r.tau_measured),
             "speedup_predicted": r.speedup_predicted, "speedup_measured": r.speedup_measured,
             "speedup_rel_err": relative_error(r.speedup_predicted, r.speedup_measured),
             "speedup_textbook": r.speedup_textbook,
             "textbook_rel_err": None if r.speedup_textbook is None
             else relative_error(r.speedup_textbook, r.speedup_measured)}
        out.append(d)
    return out


def summary(rows) -> dict:
    """Median and max |relative error| of the predicted and the textbook speedup."""
    errs = error_rows(rows)
    if not errs:
        raise SpecsimError("check: no rows to summarise")
    pred = np.abs([e["speedup_rel_err"] for e in errs])
    book = np.abs([e["textbook_rel_err"] for e in errs if e["textbook_rel_err"] is not None])
    out = {"rows": len(errs), "median_abs_rel_err": float(np.median(pred)), "max_abs_rel_err": float(pred.max())}
    if book.size:
        out |= {"textbook_median_abs_rel_err": float(np.median(book)), "textbook_max_abs_rel_err": float(book.max())}
    return out


def format_table(rows) -> str:
    """The human-readable predicted-vs-measured table ``specsim check`` prints."""
    scen = len({r.scenario for r in rows}) > 1  # a scenario column only when there is a choice
    head = ((f"{'scenario':<12} " if scen else "") + f"{'method':<12} {'gamma':>5} | {'tau pred':>8} {'tau meas':>8} {'err':>7} | "
            f"{'speedup pred':>12} {'meas':>6} {'err':>7} | {'textbook':>8} {'err':>7} | {'ms/tok SD':>9} {'target':>7}")
    lines = [head, "-" * len(head)]
    for e, r in zip(error_rows(rows), rows):
        book = "-" if r.speedup_textbook is None else f"{r.speedup_textbook:8.3f}"
        book_err = "-" if e["textbook_rel_err"] is None else f"{e['textbook_rel_err']:+7.1%}"
        lines.append(
            (f"{r.scenario:<12.12} " if scen else "") + f"{r.method:<12.12} {r.gamma:>5} | {r.tau_predicted:8.3f} {r.tau_measured:8.3f} {e['tau_rel_err']:+7.1%} | "
            f"{r.speedup_predicted:12.3f} {r.speedup_measured:6.3f} {e['speedup_rel_err']:+7.1%} | "
            f"{book:>8} {book_err:>7} | {r.sd_ms_per_token or float('nan'):9.1f} {r.target_ms_per_token or float('nan'):7.1f}")
    s = summary(rows)
    tail = f"median |err| {s['median_abs_rel_err']:.1%}, max {s['max_abs_rel_err']:.1%}"
    if "textbook_median_abs_rel_err" in s:
        tail += (f"; textbook (v=1, iid alpha): median |err| {s['textbook_median_abs_rel_err']:.1%}, "
                 f"max {s['textbook_max_abs_rel_err']:.1%}")
    return "\n".join(lines + [tail])
