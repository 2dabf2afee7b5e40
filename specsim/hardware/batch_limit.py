"""Where SD stops paying as the batch grows, and where memory stops the batch first.

A planned sweep gives a best-γ speedup per batch; :func:`paying_range` reads where it pays. A sweep alone can
answer "never" only up to its largest batch, so :class:`StopPaying` also carries the largest batch whose
weights and KV caches fit the device (:func:`specsim.hardware.parallel.largest_fitting_batch`) and the
speedup there: when SD still pays at that batch, memory, not SD, is what caps the batch at that context.
:func:`crossover_batch` solves the crossover on a continuous batch axis (any batch, not only those planned);
:func:`interpolated_crossover` reads a published sweep's between its batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def paying_range(batches, speedups) -> tuple[int | None, int | None]:
    """(smallest batch with speedup >= 1, batch from which every larger one is < 1); (None, None): never pays,
    (b, None): pays from b up to the largest batch given. Both ends matter: a self-speculating draft pays
    only once the KV cache dominates (large batch, long context)."""
    pays = [b for b, s in zip(batches, speedups) if s >= 1.0]
    if not pays:
        return None, None
    after = [b for b in batches if b > pays[-1]]
    return pays[0], (after[0] if after else None)


@dataclass(frozen=True)
class StopPaying:
    """Where SD stops paying for one device × method × context: ``stops_from`` is the planned batch from which
    the best-γ speedup stays below 1 (None: it still pays at the largest planned batch, or never pays:
    ``pays_from`` None); ``largest_fitting_batch`` the largest batch that fits in memory (0: none; None: not
    bounded by memory) and ``speedup_at_largest_fitting`` the best-γ speedup there; ``crossover_batch`` the
    same crossover solved on a continuous batch axis (:func:`crossover_batch`; None: not solved, or SD still
    pays at its largest batch or never pays)."""

    device: str
    method: str
    context_tokens: int
    pays_from: int | None
    stops_from: int | None
    largest_fitting_batch: int | None
    speedup_at_largest_fitting: float | None
    crossover_batch: float | None = None

    @property
    def memory_caps_first(self) -> bool:
        """SD still pays at the largest batch that fits: memory runs out before SD stops paying."""
        s, fit = self.speedup_at_largest_fitting, self.largest_fitting_batch
        stop = self.crossover_batch if self.crossover_batch is not None else self.stops_from
        return s is not None and s >= 1.0 and (stop is None or stop > fit)

    def cell(self) -> str:
        """The crossover, in a table cell: 'batch 57.3' (continuous), 'batch 64' (planned), 'never' or 'never
        pays'."""
        if self.crossover_batch is not None:
            return f"batch {self.crossover_batch:.1f}"
        if self.pays_from is None:
            return "never pays"
        return "never" if self.stops_from is None else f"batch {self.stops_from}"

    def fits_cell(self) -> str:
        """The largest batch that fits and the speedup there, in a table cell: 'B 110: 1.42x'."""
        if self.largest_fitting_batch is None:
            return "any"
        if self.largest_fitting_batch == 0:
            return "none"
        return f"B {self.largest_fitting_batch}: {self.speedup_at_largest_fitting:.2f}x"

    def sentence(self) -> str | None:
        """What the planned crossover means once memory is counted (None: nothing to add)."""
        where = f"{self.device}, context {self.context_tokens}"
        fit = self.largest_fitting_batch
        if fit == 0:
            return f"{where}: not even one sequence fits in memory"
        if fit is None or self.speedup_at_largest_fitting is None:
            return None
        at = f"the largest batch that fits (B {fit}, {self.speedup_at_largest_fitting:.2f}x)"
        cross = self.crossover_batch
        stop = f"batch {cross:.1f}" if cross is not None else f"batch {self.stops_from}"
        if self.memory_caps_first:
            return f"{where}: SD still pays at {at}; memory, not SD, caps the batch here" + (
                f", so '{stop}' is out of reach" if cross is not None or self.stops_from is not None else ""
            )
        if cross is not None and cross <= fit:
            return None
        if self.stops_from is None and self.pays_from is not None:
            return f"{where}: SD stops paying between the largest planned batch and {at}" + (
                f", from batch {cross:.1f}" if cross is not None else ""
            )
        return None

    @classmethod
    def from_rows(
        cls, device: str, method: str, context_tokens: int, rows, fit: int | None, at_fit, crossover=None
    ):
        """From a sweep's ``rows`` (``batch_size``, ``speedup``: :func:`paying_range`), the largest batch that
        fits (``fit``), the best-γ speedup there (``at_fit``) and the continuous ``crossover``."""
        ordered = sorted(rows, key=lambda r: r.batch_size)
        pays, stops = paying_range([r.batch_size for r in ordered], [r.speedup for r in ordered])
        at = None if not fit else at_fit
        return cls(device, method, int(context_tokens), pays, stops, fit, at, crossover)

    def to_json(self) -> dict:
        return {
            "pays_from_batch": self.pays_from,
            "stops_from_batch": self.stops_from,
            "largest_fitting_batch": self.largest_fitting_batch,
            "speedup_at_largest_fitting_batch": self.speedup_at_largest_fitting,
            "memory_caps_first": self.memory_caps_first,
            "crossover_batch": self.crossover_batch,
        }



CROSSOVER_BATCH_MAX = 4096.0  # the continuous search's largest batch
_GRID_POINTS = 129


def crossover_batch(speedup_at, lo: float = 1.0, hi: float = CROSSOVER_BATCH_MAX, tol: float = 1e-3):
    """The batch, on a continuous axis, from which the best-γ speedup stays below 1: the last downward
    crossing of 1 on a log grid from ``lo`` to ``hi``, refined by bisection to ``tol`` (relative).
    ``speedup_at``: array of batches → array of speedups. None when SD still pays at ``hi`` or never pays."""
    grid = np.geomspace(lo, hi, _GRID_POINTS)
    s = np.asarray(speedup_at(grid), dtype=float)
    paying = np.nonzero(s >= 1.0)[0]
    if paying.size == 0 or paying[-1] == grid.size - 1:
        return None
    a, b = grid[paying[-1]], grid[paying[-1] + 1]
    while b / a - 1.0 > tol:
        mid = np.sqrt(a * b)
        if speedup_at(np.array([mid]))[0] >= 1.0:
            a = mid
        else:
            b = mid
    return float(np.sqrt(a * b))


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
