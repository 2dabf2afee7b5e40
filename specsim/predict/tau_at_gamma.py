"""τ at γ for one acceptance entry, from the most direct evidence it holds (IbED, Lee et al. 2024, Eq. 1).

Greedy traces replayed at γ (exact; an adaptive ensemble's through :mod:`specsim.draft_shapes.adaptive`), else
τ or the histogram measured at this γ, or (an entry recorded as a histogram at K, no separate τ, e.g. imported
engine counters) the survival read off it for γ ≤ K (exact) and carried on past K at α(τ(K)), else an i.i.d.
extrapolation through α(τ) from the measured γ, the last two always flagged as such.
"""

from __future__ import annotations

import numpy as np

from specsim.acceptance.theory import (
    alpha_from_tau,
    survival_from_histogram,
    survival_past,
    tau_from_histogram,
    tau_from_histogram_at,
    tau_from_survival,
    tau_iid,
)
from specsim.errors import SpecsimError
from specsim.profile_format import WHAT_IF_SCENARIO, MethodAcceptance


def check_gamma(gamma) -> int:
    """``gamma`` as an int >= 1; SpecsimError naming it otherwise."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise SpecsimError(f"gamma: expected an integer >= 1, got {gamma!r}")
    return int(gamma)


EXTRAPOLATED = "iid from"  # a source that carries a measured γ's α to another γ


def extrapolated(source: str) -> bool:
    """Whether a τ source is an i.i.d. extrapolation from a measured γ (a τ or α given on the command line
    is not: nothing was measured)."""
    return source.startswith(EXTRAPOLATED)


def tau_at(entry: MethodAcceptance, gamma: int) -> tuple[float, bool]:
    """(τ at γ, extrapolated?) for one acceptance entry; see the module docstring for the order."""
    tau, source = tau_with_source(entry, gamma)
    return tau, extrapolated(source)


def alpha_what_if(entry: MethodAcceptance) -> bool:
    """An --alpha what-if entry: τ = 1 + α at γ = 1, i.i.d. by definition, so exact at every γ."""
    return entry.scenario == WHAT_IF_SCENARIO and entry.gamma == 1 and entry.tau is not None


def tau_with_source(entry: MethodAcceptance, gamma: int) -> tuple[float, str]:
    """(τ at γ, where it came from: 'replay', 'measured', 'histogram[ at gamma=K]' or 'iid from gamma=K')."""
    gamma = check_gamma(gamma)
    from specsim.draft_shapes.adaptive import adaptive_traces, replay_at

    if adaptive_traces(entry.traces) is not None:  # an adaptive ensemble: weights re-run block by block
        return replay_at(entry.traces, gamma)[0], "replay"
    if any(t.match is not None for t in entry.traces):
        from specsim.acceptance.replay import (
            replay_traces_tau,
        )  # numpy only; imported here to keep start-up light

        return float(replay_traces_tau(entry.traces, gamma)), "replay"
    if alpha_what_if(entry):
        return float(tau_iid(entry.tau - 1.0, gamma)), "iid --alpha"  # an α what-if is i.i.d. at every γ
    if entry.tau is None and entry.accepted_histogram is not None and gamma <= entry.gamma:
        # The histogram at K is the record (e.g. imported engine counters): τ(γ ≤ K) = 1 + Σ_{i≤γ} a_i
        # exactly.
        source = "histogram" if gamma == entry.gamma else f"histogram at gamma={entry.gamma}"
        return tau_from_histogram_at(entry.accepted_histogram, gamma), source
    measured = entry.tau
    if measured is None and entry.accepted_histogram is not None:
        measured = float(tau_from_histogram(entry.accepted_histogram))
    if measured is None:
        raise SpecsimError(
            f"method {entry.method!r} in scenario {entry.scenario!r}: only beta traces; "
            "greedy tau needs match traces or a measured tau (use specsim.acceptance.montecarlo)"
        )
    if entry.gamma == gamma:
        return measured, "measured" if entry.tau is not None else "histogram"
    alpha = alpha_from_tau(measured, entry.gamma)
    if entry.tau is None and gamma > entry.gamma:  # the histogram's curve, carried on past K (it never rises)
        carried = survival_past(survival_from_histogram(entry.accepted_histogram), alpha, gamma)
        return float(tau_from_survival(carried)), f"{EXTRAPOLATED} gamma={entry.gamma}"
    return float(tau_iid(alpha, gamma)), f"{EXTRAPOLATED} gamma={entry.gamma}"
