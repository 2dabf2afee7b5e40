"""Runtime-aware roofline vs the published GPU set: fits of runtime parameters, leave-one-source-out,
summaries.

Fitting: the parameters a runtime lists in ``fit`` are least-squares fitted on log(predicted / measured) over
that runtime's rows, with a weak pull toward the runtime's cited defaults (so a parameter few rows see stays
near its cited value). Rows of different runtimes share no parameter, so each runtime is fitted alone.
Leave-one-source-out: each source's rows are predicted with parameters fitted on the *other* sources only,
starting from the defaults; a runtime that no other source covers is priced at its cited defaults (never at
a fit on the held-out source) and its rows are flagged ``at_defaults``. Predictions: :mod:`.row_predict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specsim.errors import SpecsimError
from specsim.hardware.runtime import PARAM_BOUNDS, Runtime, load_runtime
from specsim.validation.published_set import PublishedSet, Row
from specsim.validation.row_predict import device, predict_row, row_model, textbook_row

PRIOR_WEIGHT = 0.05  # residual units (log error of one row) per ``PRIOR_SCALE`` of departure from the default
# The departure from its default that costs a parameter PRIOR_WEIGHT: a natural size per parameter, in the
# parameter's own unit (ms; log for efficiencies), so a parameter that few rows constrain stays near its
# default.
PRIOR_SCALE = {
    "overhead_ms_per_forward": 0.5,
    "overhead_ms_per_layer": 0.1,
    "overhead_ms_per_block": 0.5,
    "overhead_ms_per_sequence_per_block": 0.05,
    "overhead_ms_per_allreduce": 0.01,
    "dequant_ms_per_layer": 0.02,
    "compute_rows_half": 8.0,
    "attention_score_bytes": 4.0,
    "overlap": 0.5,
    "gemv_int32_ops_per_weight_per_row": 1.0,
    "gemv_max_rows": 4.0,
}
_OVERHEAD_CAP_MS = 100.0


@dataclass(frozen=True)
class RowResult:
    """One row: published value, specsim's and the textbook's prediction, signed relative errors."""

    id: str
    source: str
    runtime: str
    device: str
    observable: str
    measured: float
    predicted: float
    textbook: float
    at_defaults: bool  # True: no other source covers the runtime, so its cited defaults priced the row
    batch: int = 1
    context_tokens: float = 0.0

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def textbook_error(self) -> float:
        return self.textbook / self.measured - 1.0

    def to_json(self) -> dict:
        return asdict(self) | {"error": self.error, "textbook_error": self.textbook_error}


# Parameters whose effect grows with the batch: fitted only on rows of two batch sizes or more.
BATCH_PARAMS = ("overhead_ms_per_sequence_per_block",)


def _is_log(name: str) -> bool:
    return "efficiency" in name


def _to_theta(name: str, value: float) -> float:
    return float(np.log(value)) if _is_log(name) else float(value)


def _from_theta(name: str, theta: float) -> float:
    return float(np.exp(theta)) if _is_log(name) else float(theta)


def fit_runtime(ps: PublishedSet, rows: list[Row], rt: Runtime, source: str) -> Runtime:
    """``rt`` with its ``fit`` parameters fitted on ``rows`` (all of this runtime), starting at its
    defaults."""
    start = rt.at_defaults()
    keys = list(rt.fit)
    if len({r.batch for r in rows}) < 2:  # one batch size cannot tell a per-sequence cost from a fixed one
        keys = [k for k in keys if k not in BATCH_PARAMS]
    if not keys or not rows:
        return start
    model = row_model(ps, rows)
    prior = np.array([_to_theta(k, start.defaults[k]) for k in keys])
    scale = np.array([PRIOR_SCALE.get(k, 1.0) for k in keys])  # efficiencies: one unit of log
    lo = np.array([_to_theta(k, PARAM_BOUNDS[k][0]) for k in keys])
    # On a GPU an efficiency is a fraction of a datasheet peak: at most 1 (CPU peaks are a proxy, so not
    # there).
    hi = np.array(
        [
            _to_theta(k, 1.0 if rt.kind == "gpu" else PARAM_BOUNDS[k][1])
            if _is_log(k)
            else min(PARAM_BOUNDS[k][1], _OVERHEAD_CAP_MS)
            for k in keys
        ]
    )

    def at(theta: np.ndarray) -> Runtime:
        return replace(start, **{k: _from_theta(k, v) for k, v in zip(keys, theta)})

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [np.log(model.predict(at(theta)) / model.measured), PRIOR_WEIGHT * (theta - prior) / scale]
        )

    best = least_squares(
        residuals, np.clip(prior, lo, np.nextafter(hi, -np.inf)), bounds=(lo, hi), method="trf", x_scale=1.0
    )
    return start.with_values(source, **{k: _from_theta(k, v) for k, v in zip(keys, best.x)})


def fit_without(ps: PublishedSet, rt: Runtime, source: str) -> Runtime:
    """``rt`` fitted on the usable rows of its runtime from every source but ``source`` (leave-one-source-out;
    at its cited defaults where no other source covers it)."""
    train = [r for r in usable_rows(ps) if r.runtime == rt.name and r.source != source]
    return fit_runtime(ps, train, rt, f"fitted leave-one-source-out without {source}")


def load_runtimes(ps: PublishedSet, overrides: dict[str, Runtime] | None = None) -> dict[str, Runtime]:
    """Runtime of every row (shipped files unless ``overrides`` names one)."""
    overrides = overrides or {}
    return {name: overrides.get(name) or load_runtime(name) for name in sorted({r.runtime for r in ps.rows})}


def usable_rows(ps: PublishedSet) -> list[Row]:
    """Rows with something to compare (an observable)."""
    return [r for r in ps.rows if r.observable is not None]


def _result(ps: PublishedSet, row: Row, predicted: float, at_defaults: bool) -> RowResult:
    return RowResult(
        row.id,
        row.source,
        row.runtime,
        row.device,
        row.observable,
        float(row.measured),
        float(predicted),
        textbook_row(ps, row),
        at_defaults,
        row.batch,
        row.target_context_tokens,
    )


def leave_one_source_out(ps: PublishedSet, runtimes: dict[str, Runtime]) -> list[RowResult]:
    """Each source's rows predicted with runtime parameters fitted on the other sources only."""
    usable = usable_rows(ps)
    cache: dict[tuple, Runtime] = {}
    out: list[RowResult] = []
    for key in sorted({r.source for r in usable}):
        held = [r for r in usable if r.source == key]
        for name in sorted({r.runtime for r in held}):
            train = [r for r in usable if r.runtime == name and r.source != key]
            ident = (name, tuple(r.id for r in train))
            if ident not in cache:
                cache[ident] = fit_without(ps, runtimes[name], key)
            rows = [r for r in held if r.runtime == name]
            predicted = row_model(ps, rows).predict(cache[ident])
            out += [_result(ps, r, p, not train) for r, p in zip(rows, predicted)]
    order = {r.id: i for i, r in enumerate(usable)}
    return sorted(out, key=lambda r: (r.source, order[r.id]))


def fit_all(ps: PublishedSet, runtimes: dict[str, Runtime], command: str) -> dict[str, Runtime]:
    """Every runtime fitted on all its rows (what the shipped runtime files hold); ``command`` is cited."""
    usable = usable_rows(ps)
    out = {}
    for name, rt in runtimes.items():
        rows = [r for r in usable if r.runtime == name]
        sources = sorted({r.source for r in rows})
        label = f"fitted: `{command}` on the published set's rows of {', '.join(sources)}"
        out[name] = fit_runtime(ps, rows, rt, label) if rows and rt.fit else rt
    return out


def in_sample(ps: PublishedSet, fitted: dict[str, Runtime]) -> list[RowResult]:
    """Every usable row predicted under ``fitted`` (flagged at_defaults=False: these are in-sample)."""
    return [_result(ps, r, predict_row(ps, r, fitted[r.runtime]), False) for r in usable_rows(ps)]


@dataclass(frozen=True)
class Summary:
    rows: int
    median_abs_error: float
    max_abs_error: float
    textbook_median_abs_error: float
    textbook_max_abs_error: float


def summarize(results: list[RowResult], *, fitted_only: bool = False) -> Summary | None:
    """Median and max |relative error| of specsim and of the textbook formula (``fitted_only``: leave out rows
    priced at cited defaults)."""
    rs = [r for r in results if not (fitted_only and r.at_defaults)]
    if not rs:
        return None
    e = np.abs([r.error for r in rs])
    t = np.abs([r.textbook_error for r in rs])
    return Summary(len(rs), float(np.median(e)), float(e.max()), float(np.median(t)), float(t.max()))


def check_runtime_kinds(ps: PublishedSet, runtimes: dict[str, Runtime]) -> None:
    """A GPU row needs a GPU runtime."""
    for row in ps.rows:
        rt = runtimes[row.runtime]
        if rt.kind != device(row.device).kind:
            raise SpecsimError(
                f"row {row.id}: runtime {rt.name!r} runs on {rt.kind} devices but "
                f"{row.device!r} is a {device(row.device).kind}"
            )
