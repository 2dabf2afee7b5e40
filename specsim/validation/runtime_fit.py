"""Runtime-aware roofline vs the published GPU set: fits of runtime parameters, leave-one-source-out,
summaries.

Fitting: least squares on log(predicted / measured) over each runtime's rows, pulled weakly toward its cited
defaults; a runtime family shares its pooled parameters (:mod:`.family_fit`). Leave-one-source-out: each
source priced with a fit on the other sources only (a runtime no other source covers: ``at_defaults``).
Predictions: :mod:`.row_predict`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specsim.errors import SpecsimError
from specsim.hardware.runtime import Runtime, load_runtime
from specsim.validation.family_fit import family, family_base, family_runtimes, fit_family
from specsim.validation.fit_params import (
    PRIOR_SCALE,
    PRIOR_WEIGHT,
    at_theta,
    fitted_keys,
    from_theta,
    theta_bounds,
    to_theta,
)
from specsim.validation.published_set import PublishedSet, Row
from specsim.validation.row_predict import device, models, predict_row, row_model, textbook_row


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
    at_defaults: bool  # True: no other source has rows of the runtime (its defaults or its family's fit)
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


def transfer_defaults(rt: Runtime, base: Runtime, label: str) -> Runtime:
    """``rt`` with ``base``'s values of the parameters ``base`` fits: as the defaults of those ``rt`` fits
    (its ``defaults_from``), as values of the others."""
    own = {k: getattr(base, k) for k in base.fit if k in rt.fit}
    taken = {k: getattr(base, k) for k in base.fit if k not in rt.fit and k not in rt.ties}
    return replace(
        rt.with_values(label, **taken),
        defaults={**rt.defaults, **own},
        default_sources={**rt.default_sources, **{k: label for k in own}},
    )


def fit_runtime(ps: PublishedSet, rows: list[Row], rt: Runtime, source: str) -> Runtime:
    """``rt`` with its ``fit`` parameters fitted on ``rows`` (all of this runtime), starting at its
    defaults."""
    start = rt.at_defaults()
    keys = fitted_keys(rt, rows)
    if not keys or not rows:
        return start
    model = row_model(ps, rows)
    prior = np.array([to_theta(k, start.defaults[k]) for k in keys])
    scale = np.array([PRIOR_SCALE.get(k, 1.0) for k in keys])  # efficiencies: one unit of log
    lo, hi = theta_bounds(keys, rt.kind)

    def residuals(theta: np.ndarray) -> np.ndarray:
        errs = np.log(model.predict(at_theta(start, keys, theta)) / model.measured)
        return np.concatenate([errs, PRIOR_WEIGHT * (theta - prior) / scale])

    best = least_squares(
        residuals, np.clip(prior, lo, np.nextafter(hi, -np.inf)), bounds=(lo, hi), method="trf", x_scale=1.0
    )
    return start.with_values(source, **{k: from_theta(k, v) for k, v in zip(keys, best.x)})


def _family_without(
    ps: PublishedSet, base_name: str, source: str, runtimes: dict[str, Runtime]
) -> dict[str, Runtime]:
    base, members = family_runtimes(base_name, runtimes)
    train = [r for r in fit_rows(ps) if r.runtime in {base_name, *members} and r.source != source]
    return fit_family(ps, train, base, members, f"fitted leave-one-source-out without {source}")


def fit_without(
    ps: PublishedSet, rt: Runtime, source: str, runtimes: dict[str, Runtime] | None = None
) -> Runtime:
    """``rt`` fitted on the usable rows of its runtime (and of its family, :mod:`.family_fit`, whose other
    members ``runtimes`` may replace) from every source but ``source`` (leave-one-source-out; at its cited
    defaults where no other source covers it)."""
    base = family_base(rt)
    if base is not None and rt.name in {base, *family(base)}:
        return _family_without(ps, base, source, {**(runtimes or {}), rt.name: rt})[rt.name]
    train = [r for r in fit_rows(ps) if r.runtime == rt.name and r.source != source]
    return fit_runtime(ps, train, rt, f"fitted leave-one-source-out without {source}")


def load_runtimes(ps: PublishedSet, overrides: dict[str, Runtime] | None = None) -> dict[str, Runtime]:
    """Runtime of every row (shipped files unless ``overrides`` names one)."""
    overrides = overrides or {}
    return {name: overrides.get(name) or load_runtime(name) for name in sorted({r.runtime for r in ps.rows})}


def usable_rows(ps: PublishedSet) -> list[Row]:
    """Rows with something to compare (an observable)."""
    return [r for r in ps.rows if r.observable is not None]


def fit_rows(ps: PublishedSet) -> list[Row]:
    """The usable rows a runtime is fitted on: dense targets only. A mixture-of-experts row checks the MoE
    pricing (:mod:`specsim.hardware.moe`) out of sample; fitted, its costs outside the roofline (a gathered
    expert's kernel) would bend the dense kernels' terms (gpt-fast's LOSO on the dense rows: +22 to +66 %)."""
    return [r for r in usable_rows(ps) if models(ps, r)[0].moe is None]


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
    usable, fitted = usable_rows(ps), fit_rows(ps)
    cache: dict[tuple, Runtime] = {}
    out: list[RowResult] = []
    for key in sorted({r.source for r in usable}):
        held = [r for r in usable if r.source == key]
        for name in sorted({r.runtime for r in held}):
            train = [r for r in fitted if r.runtime == name and r.source != key]
            pooled = family_base(runtimes[name]) is not None
            ident = (name, key if pooled else tuple(r.id for r in train))
            if ident not in cache:
                cache[ident] = fit_without(ps, runtimes[name], key, runtimes)
            rows = [r for r in held if r.runtime == name]
            predicted = row_model(ps, rows).predict(cache[ident])
            out += [_result(ps, r, p, not train) for r, p in zip(rows, predicted)]
    order = {r.id: i for i, r in enumerate(usable)}
    return sorted(out, key=lambda r: (r.source, order[r.id]))


def fit_all(ps: PublishedSet, runtimes: dict[str, Runtime], command: str) -> dict[str, Runtime]:
    """Every runtime fitted on all its rows (what the shipped runtime files hold); ``command`` is cited."""
    fitted = fit_rows(ps)
    out: dict[str, Runtime] = {}
    for name, rt in runtimes.items():
        base = family_base(rt)
        names = {name} if base is None else {base, *family(base)}
        rows = [r for r in fitted if r.runtime in names]
        sources = sorted({r.source for r in rows})
        label = f"fitted: `{command}` on the published set's rows of {', '.join(sources)}"
        if base is not None:
            out[name] = fit_family(ps, rows, *family_runtimes(base, runtimes), label)[name]
        else:
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
