"""How well the planner is validated where an answer lies: the leave-one-source-out error of the published
speedup rows (and speedup-ratio rows) of the same runtime, batch band and context band
(:mod:`specsim.validation.runtime_fit`).

Bands: batch 1, 2..15, 16..127, ≥ 128; context ≤ 2k, 2k..8k, > 8k tokens; no row of the runtime in the band:
"not validated here". Serving benchmarks (:mod:`specsim.validation.load_rows`) and this project's GPU step
timings (:mod:`specsim.validation.gpu_steps`) in the band add their own errors.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

BATCH_BANDS = ((1, 1), (2, 15), (16, 127), (128, None))
CONTEXT_BANDS = ((0, 2048), (2049, 8192), (8193, None))


def _band(value: float, bands) -> tuple:
    for lo, hi in bands:
        if value >= lo and (hi is None or value <= hi):
            return lo, hi
    return bands[-1]


def _span(band: tuple, unit: str) -> str:
    lo, hi = band
    if hi is None:
        return f"{unit} >= {lo}"
    return f"{unit} {lo}" if lo == hi else f"{unit} {lo}..{hi}"


@dataclass(frozen=True)
class RegimeError:
    """The published speedup rows of ``runtime`` in one batch × context band and their leave-one-source-out
    |relative error| (None: no row there)."""

    runtime: str
    batch_band: tuple
    context_band: tuple
    rows: int
    sources: tuple[str, ...]
    median_abs_error: float | None
    max_abs_error: float | None
    served_rows: int = 0  # published serving benchmarks in the band, replayed by `specsim serve`
    served_median_abs_error: float | None = None
    served_max_abs_error: float | None = None
    gpu_points: int = 0  # this project's GPU step timings in the band (B × C points)
    gpu_median_abs_error: float | None = None
    gpu_max_abs_error: float | None = None
    gpus: tuple[str, ...] = ()  # the GPUs those timings ran on
    gpu_fit: str = ""  # how the runtime met those timings, where it was fitted on them (else not said)

    @property
    def validated(self) -> bool:
        return self.rows > 0

    def text(self) -> str:
        where = (
            f"runtime {self.runtime}, {_span(self.batch_band, 'batch')}, "
            f"{_span(self.context_band, 'context tokens')}"
        )
        served = (
            f"; under load, `specsim serve` reproduces {self.served_rows} published serving benchmark rows "
            f"there within median {self.served_median_abs_error:.1%}, max {self.served_max_abs_error:.1%}"
            if self.served_rows
            else ""
        )
        fit = f"{self.gpu_fit}; " if self.gpu_fit else ""
        gpu = (
            f"; against this project's own step timings there ({', '.join(self.gpus)}; kernels, no per-block "
            f"overhead; {fit}`bench/gpu_step_compare.py`) the planner's best-γ speedup is within median "
            f"{self.gpu_median_abs_error:.1%}, max {self.gpu_max_abs_error:.1%} over {self.gpu_points} points"
            if self.gpu_points
            else ""
        )
        if not self.validated:
            return f"not validated here: no published speedup row at {where}{served}{gpu}"
        return (
            f"validated on published rows at {where}: leave-one-source-out median |error| "
            f"{self.median_abs_error:.1%}, max {self.max_abs_error:.1%} over {self.rows} rows "
            f"({', '.join(self.sources)}; `specsim validate`){served}{gpu}"
        )

    def to_json(self) -> dict:
        out = asdict(self) | {"validated": self.validated, "text": self.text()}
        if not self.gpu_fit:
            del out["gpu_fit"]
        return out


@lru_cache(maxsize=1)
def _speedup_results() -> tuple:
    """The published set's speedup rows, each predicted leave-one-source-out (computed once per process)."""
    from specsim.validation.published_set import load_published_set
    from specsim.validation.runtime_fit import leave_one_source_out, load_runtimes

    ps = load_published_set()
    kept = ("speedup", "speedup_ratio")  # a ratio row checks the speedup's batch dependence at its batch
    return tuple(r for r in leave_one_source_out(ps, load_runtimes(ps)) if r.observable in kept)


@lru_cache(maxsize=16)
def _served_in_band(runtime: str, b_band: tuple, c_band: tuple) -> tuple:
    """The published serving benchmarks of ``runtime`` in one band, served leave-one-source-out (each band
    once per process; only the bands an answer asks for are simulated)."""
    from specsim.validation.load_rows import compare_load_rows, load_rows
    from specsim.validation.published_set import load_published_set
    from specsim.validation.runtime_fit import load_runtimes

    ps = load_published_set()
    rows = _in_band(load_rows(ps), runtime, b_band, c_band, context=lambda r: r.target_context_tokens)
    return tuple(compare_load_rows(ps, load_runtimes(ps), rows=rows)) if rows else ()


def _gpu_points() -> tuple:
    from specsim.validation.step_fit import shipped_points

    return shipped_points()


def _in_band(rows, runtime: str, b_band: tuple, c_band: tuple, context=lambda r: r.context_tokens) -> list:
    return [
        r
        for r in rows
        if r.runtime == runtime
        and _band(r.batch, BATCH_BANDS) == b_band
        and _band(context(r), CONTEXT_BANDS) == c_band
    ]


def _abs_error_stats(rows) -> tuple[float | None, float | None]:
    """Median and max |error| of ``rows`` (anything with an ``error``); (None, None) for none."""
    if not rows:
        return None, None
    errs = np.abs([r.error for r in rows])
    return float(np.median(errs)), float(errs.max())


def regime_error(
    runtime: str, batch: int, context_tokens: float, results=None, served=None, gpu=None
) -> RegimeError:
    """The validation of an answer at ``batch`` and ``context_tokens`` under ``runtime`` (module docstring);
    ``results`` / ``served``: leave-one-source-out rows to use (default: the published set's); ``gpu``: GPU
    step points (default: the shipped ones)."""
    rows = _speedup_results() if results is None else results
    b_band, c_band = _band(batch, BATCH_BANDS), _band(context_tokens, CONTEXT_BANDS)
    inside = _in_band(rows, runtime, b_band, c_band)
    loads = (
        _served_in_band(runtime, b_band, c_band)
        if served is None
        else _in_band(served, runtime, b_band, c_band)
    )
    steps = _in_band(_gpu_points() if gpu is None else gpu, runtime, b_band, c_band)
    median, most = _abs_error_stats(inside)
    served_median, served_most = _abs_error_stats(loads)
    gpu_median, gpu_most = _abs_error_stats(steps)
    return RegimeError(
        runtime=runtime,
        batch_band=b_band,
        context_band=c_band,
        rows=len(inside),
        sources=tuple(sorted({r.source for r in inside})),
        median_abs_error=median,
        max_abs_error=most,
        served_rows=len(loads),
        served_median_abs_error=served_median,
        served_max_abs_error=served_most,
        gpu_points=len(steps),
        gpu_median_abs_error=gpu_median,
        gpu_max_abs_error=gpu_most,
        gpus=tuple(sorted({p.gpu for p in steps})),
        gpu_fit=_gpu_fit(runtime) if steps and gpu is None else "",
    )


def _gpu_fit(runtime: str) -> str:
    """How the shipped step points price a runtime fitted on them (:mod:`specsim.validation.step_fit`)."""
    from specsim.validation.step_fit import STEP_FIT

    if runtime not in STEP_FIT:
        return ""
    return "each GPU priced by the runtime fitted on the other GPU's steps, `bench/hf_eager_fit.py`"


def regime_errors(runtime, batches, context_tokens: float) -> list[RegimeError]:
    """One :class:`RegimeError` per distinct band the ``batches`` fall in, in batch order, for ``runtime`` (a
    Runtime: none unless it is the shipped file of its name, unchanged; a user's was never scored)."""
    from specsim.hardware.runtime import is_shipped

    if not is_shipped(runtime):
        return []
    out: list[RegimeError] = []
    for b in sorted(batches):
        e = regime_error(runtime.name, b, context_tokens)
        if not out or out[-1].batch_band != e.batch_band:
            out.append(e)
    return out


def band_summaries(results) -> list[dict]:
    """Leave-one-source-out rows (any observable) by batch band: rows, sources, median and max |error|."""
    out = []
    for band in BATCH_BANDS:
        inside = [r for r in results if _band(r.batch, BATCH_BANDS) == band]
        median, most = _abs_error_stats(inside)
        out.append(
            {
                "batch_band": _span(band, "batch"),
                "rows": len(inside),
                "sources": sorted({r.source for r in inside}),
                "median_abs_error": median,
                "max_abs_error": most,
            }
        )
    return out


def source_summaries(results) -> list[dict]:
    """Leave-one-source-out rows by source, most rows first: rows, runtimes, whether every row is priced at
    its runtime's cited defaults, median and max |error|."""
    out = []
    for source in sorted({r.source for r in results}):
        inside = [r for r in results if r.source == source]
        median, most = _abs_error_stats(inside)
        out.append(
            {
                "source": source,
                "rows": len(inside),
                "runtimes": sorted({r.runtime for r in inside}),
                "at_defaults": all(r.at_defaults for r in inside),
                "median_abs_error": median,
                "max_abs_error": most,
            }
        )
    return sorted(out, key=lambda s: -s["rows"])
