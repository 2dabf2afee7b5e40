"""Where SD pays along a sweep (batches, request rates), and where memory stops the batch first.

:func:`paying_runs` splits a sweep's points into runs where SD pays (speedup >= a threshold, 1 by default)
and where it does not; :func:`paying_range` and every verdict (:func:`runs_text`) are read off them.
:class:`StopPaying` also reads the largest batch that fits the device; :func:`crossover_batch` solves the
crossover on a continuous batch axis (:func:`fitting_crossover`: on a device's),
:func:`interpolated_crossover` a published sweep's between its batches.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Run:
    """Consecutive sweep points ``first``..``last`` that all pay (``pays``) or all do not; ``to_end``: the
    run reaches the sweep's last point."""

    pays: bool
    first: float
    last: float
    to_end: bool


def paying_runs(points, speedups, threshold: float = 1.0) -> tuple[Run, ...]:
    """The sweep (``points`` with their ``speedups``, sorted here by point) as runs of paying and losing
    points; a point pays where its speedup >= ``threshold``."""
    pairs = sorted(zip(points, speedups))
    runs: list[list] = []
    for x, s in pairs:
        pays = bool(s >= threshold)
        if runs and runs[-1][0] == pays:
            runs[-1][2] = x
        else:
            runs.append([pays, x, x])
    return tuple(Run(p, a, b, i == len(runs) - 1) for i, (p, a, b) in enumerate(runs))


def paying_range(batches, speedups, threshold: float = 1.0) -> tuple[int | None, int | None]:
    """(smallest point with speedup >= threshold, point from which every larger one is below); (None,
    None): never pays, (b, None): pays at the largest point given. Both ends matter: a self-speculating
    draft pays only once the KV cache dominates (large batch, long context)."""
    runs = paying_runs(batches, speedups, threshold)
    pays = [r for r in runs if r.pays]
    if not pays:
        return None, None
    last = runs[-1]
    return pays[0].first, (None if last.pays else last.first)


def run_text(run: Run, fmt=str) -> str:
    """'a', 'a..b' (every swept point from a to b) or, for a last run after another, 'from a'."""
    if run.first == run.last:
        return fmt(run.first)
    return f"from {fmt(run.first)}" if run.to_end else f"{fmt(run.first)}..{fmt(run.last)}"


def runs_text(runs, pays: bool, fmt=str) -> str:
    """The runs that pay (``pays``) or lose, joined: '5..20 and from 200'."""
    parts = [run_text(r, fmt) for r in runs if r.pays == pays]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True)
class StopPaying:
    """Where SD pays for one device × method × context over the planned batches and the largest batch that
    fits in memory (``largest_fitting_batch``: 0 none, None not bounded; ``speedup_at_largest_fitting``
    the best-γ speedup there): ``runs`` of :func:`paying_runs` over both, ``pays_from``/``stops_from`` as
    :func:`paying_range`, ``last_planned``: the largest planned batch;
    ``crossover_batch`` the crossover on a continuous batch axis (:func:`crossover_batch`; None: not solved,
    or SD pays at its largest batch or never pays)."""

    device: str
    method: str
    context_tokens: int
    pays_from: int | None
    stops_from: int | None
    largest_fitting_batch: int | None
    speedup_at_largest_fitting: float | None
    runs: tuple[Run, ...] = ()
    last_planned: int | None = None
    crossover_batch: float | None = None

    @property
    def memory_caps_first(self) -> bool:
        """SD still pays at the largest batch that fits: memory runs out before SD stops paying."""
        s, fit = self.speedup_at_largest_fitting, self.largest_fitting_batch
        stop = self.crossover_batch if self.crossover_batch is not None else self.stops_from
        return s is not None and s >= 1.0 and (stop is None or stop > fit)

    def cell(self) -> str:
        """The batches (planned and the largest that fits) where speedup < 1: 'none', 'all', '1..8',
        'from 512', '1 and from 512'."""
        if not any(not r.pays for r in self.runs):
            return "none"
        if not any(r.pays for r in self.runs):
            return "all"
        return runs_text(self.runs, False)

    def crossover_cell(self) -> str:
        """The batch on a continuous axis from which SD stays below 1, in a table cell: '57.3' or '-'."""
        return "-" if self.crossover_batch is None else f"{self.crossover_batch:.1f}"

    def fits_cell(self) -> str:
        """The largest batch that fits and the speedup there, in a table cell: 'B 110: 1.42x'."""
        if self.largest_fitting_batch is None:
            return "any"
        if self.largest_fitting_batch == 0:
            return "none"
        return f"B {self.largest_fitting_batch}: {self.speedup_at_largest_fitting:.2f}x"

    def sentence(self) -> str | None:
        """What the sweep means once memory is counted (None: nothing to add)."""
        where = f"{self.device}, context {self.context_tokens}"
        fit, s = self.largest_fitting_batch, self.speedup_at_largest_fitting
        if fit == 0:
            return f"{where}: not even one sequence fits in memory"
        cross = self.crossover_batch
        if cross is not None and not any(r.pays for r in self.runs):  # 'all' beside a crossover
            return (
                f"{where}: SD loses at every batch shown but pays between them, up to batch {cross:.1f} "
                "(a finer --batch shows where)"
            )
        if fit is None or s is None:
            return None
        at = f"the largest batch that fits (B {fit}, {s:.2f}x)"
        stop = f"{cross:.1f}" if cross is not None else self.stops_from
        if self.memory_caps_first:
            return f"{where}: SD still pays at {at}; memory, not SD, caps the batch here" + (
                f", so batch {stop}, from which it stops paying, is out of reach" if stop is not None else ""
            )
        before = [r for r in self.runs if r.first < fit]
        if s < 1.0 and self.last_planned is not None and fit > self.last_planned and before[-1].pays:
            return f"{where}: SD stops paying between B {self.last_planned} (planned) and {at}" + (
                f", from batch {cross:.1f}" if cross is not None else ""
            )
        return None

    @classmethod
    def from_rows(
        cls, device: str, method: str, context_tokens: int, rows, fit: int | None, at_fit, crossover=None
    ):
        """From a sweep's ``rows`` (``batch_size``, ``speedup``), the largest batch that fits (``fit``) and
        the best-γ speedup there (``at_fit``), read together by :func:`paying_runs`; the continuous
        ``crossover``."""
        at_fit = None if not fit else at_fit
        points = {r.batch_size: r.speedup for r in rows}
        if at_fit is not None:
            points.setdefault(fit, at_fit)
        runs = paying_runs(list(points), list(points.values()))
        pays, stops = paying_range(list(points), list(points.values()))
        last = max((r.batch_size for r in rows), default=None)
        return cls(device, method, int(context_tokens), pays, stops, fit, at_fit, runs, last, crossover)

    def to_json(self) -> dict:
        return {
            "pays_from_batch": self.pays_from,
            "stops_from_batch": self.stops_from,
            "largest_fitting_batch": self.largest_fitting_batch,
            "speedup_at_largest_fitting_batch": self.speedup_at_largest_fitting,
            "memory_caps_first": self.memory_caps_first,
            "crossover_batch": self.crossover_batch,
            # the text's 'speedup<1 at B' cell: each losing run, its first and last batch
            "speedup_below_1_at_batches": [[r.first, r.last] for r in self.runs if not r.pays],
        }


CROSSOVER_BATCH_MAX = 4096.0  # the continuous search's largest batch
_GRID_POINTS = 129


def crossover_batch(speedup_at, lo: float = 1.0, hi: float = CROSSOVER_BATCH_MAX, tol: float = 1e-6):
    """The batch, on a continuous axis, from which the best-γ speedup stays below 1: the last downward
    crossing of 1 on a log grid from ``lo`` to ``hi``, refined by bisection to ``tol`` (relative).
    ``speedup_at``: array of batches → array of speedups. None when SD still pays at ``hi`` or never pays."""
    grid = np.geomspace(lo, hi, _GRID_POINTS)
    s = np.asarray(speedup_at(grid), dtype=float)
    paying = np.nonzero(s >= 1.0)[0]
    if paying.size == 0 or paying[-1] == grid.size - 1:
        return None
    a, b = grid[paying[-1]], grid[paying[-1] + 1]
    while b / a - 1.0 > tol:  # 1e-6: the printed decimal (batches up to 4096) does not move with lo, hi
        mid = np.sqrt(a * b)
        if speedup_at(np.array([mid]))[0] >= 1.0:
            a = mid
        else:
            b = mid
    return float(np.sqrt(a * b))


def fitting_crossover(speedup_at, fit: int | None) -> float | None:
    """:func:`crossover_batch` on a device that holds at most ``fit`` sequences (None: any; 0: none). Where SD
    no longer pays at ``fit``, the last crossing up to ``fit``: SD paying again past the memory limit (the
    KV-bound regime of huge batches) is a batch the device cannot run. Else up to
    :data:`CROSSOVER_BATCH_MAX`, which finds a crossing that memory puts out of reach."""
    if fit and speedup_at(np.array([float(fit)]))[0] < 1.0:
        return crossover_batch(speedup_at, hi=float(fit))
    return crossover_batch(speedup_at)


def interpolated_crossover(batches, speedups) -> float | None:
    """Where a published sweep stops paying, between its batches: the last downward crossing of 1, linear
    in the batch between the two points around it; None when it pays at its largest batch or never pays."""
    b, s = np.asarray(batches, dtype=float), np.asarray(speedups, dtype=float)
    order = np.argsort(b)
    b, s = b[order], s[order]
    paying = np.nonzero(s >= 1.0)[0]
    if paying.size == 0 or paying[-1] == b.size - 1:
        return None
    i = paying[-1]
    return float(b[i] + (s[i] - 1.0) * (b[i + 1] - b[i]) / (s[i] - s[i + 1]))
