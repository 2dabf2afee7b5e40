"""The host checks a latency run prints when they fire: a contended host (the sentinel moved between the
start and the end) and noisy passes (a 95% half-width over :data:`NOISY_REL_HALFWIDTH` of the median after
the rounds allowed), each one warning line with its threshold, the rounds and the host's load average."""

from __future__ import annotations

import os

# A pass this imprecise (95% half-width / median) cannot separate Tv(γ) from Tp or a draft batch from its
# neighbour: predictions from it rest on noise. The timing target (--rel-halfwidth) is far tighter; a quiet
# host's worst pass stays under 10% (the shipped CPU profiles: 1..9%).
NOISY_REL_HALFWIDTH = 0.20
# Derived per-block overheads (small differences of passes) and the sampling unit are judged by neither the
# sweep's stopping rule nor this check.
_NOT_PASSES = ("overhead", "sampling")


def host_load() -> str:
    """'load average 2.11, 1.68, 1.69 (1, 5, 15 min) on 2 CPUs', or what is known of it."""
    cpus = os.cpu_count() or "?"
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):  # not on every platform
        return f"load average unknown, {cpus} CPUs"
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {cpus} CPUs"


def timed_passes(timings: dict) -> dict:
    """The timings of passes (derived overheads and the sampling unit left out)."""
    return {k: t for k, t in timings.items() if not k.startswith(_NOT_PASSES)}


def worst_pass(timings: dict) -> tuple[str, float] | None:
    """(key, 95% half-width / median) of the least precise timed pass; None without one. The run's summary
    line and :func:`noisy_note` both name it."""
    passes = timed_passes(timings)
    if not passes:
        return None
    key = max(passes, key=lambda k: passes[k].rel_halfwidth)
    return key, passes[key].rel_halfwidth


def noisy_note(timings: dict, max_rounds: int, target_rel_halfwidth: float) -> str | None:
    """The warning for the least precise pass when its half-width is over the threshold, else None."""
    worst = worst_pass(timings)
    if worst is None or worst[1] <= NOISY_REL_HALFWIDTH:
        return None
    passes = timed_passes(timings)
    over = sum(t.rel_halfwidth > NOISY_REL_HALFWIDTH for t in passes.values())
    return (
        f"noisy calibration: {over} of {len(passes)} timed passes have a 95% half-width over "
        f"{NOISY_REL_HALFWIDTH:.0%} of their median (threshold; target {target_rel_halfwidth:.0%}), the "
        f"worst {worst[1]:.0%} ({worst[0]}, {passes[worst[0]].n} samples; at most {max_rounds} repeats a "
        f"point); host {host_load()}: re-measure on a quiet machine (or raise --max-repeats)"
    )


def host_warnings(check, timings: dict, plan) -> list[str]:
    """The lines to print after a latency run: the sentinel's (``check``: its cost model's host check) when
    the host was contended, and the noisy-points one."""
    lines = [f"{check.note}; host {host_load()}"] if check is not None and check.contended else []
    noisy = noisy_note(timings, plan.max_repeats, plan.target_rel_halfwidth)
    return lines + ([noisy] if noisy else [])
