"""Runtimes fitted as a family: serving engines that share the hardware's kernels but not their SD code.

A runtime whose ``defaults_from`` names another (SGLang, TensorRT-LLM and vLLM's V0 engine name vLLM) joins
that runtime's fit. The parameters in :data:`POOLED` are one value for the whole family, fitted on every
member's rows; each member with rows of its own gets its own copy of the other ``fit`` parameters, pulled
toward the base's cited defaults; a member with no rows is priced at the base's fitted values. Fitting in θ
space: :mod:`.fit_params`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from scipy.optimize import least_squares

from specsim.hardware.engine_terms import BATCH_PARAMS
from specsim.hardware.runtime import Runtime, load_runtime, runtime_names
from specsim.validation.fit_params import (
    PRIOR_SCALE,
    PRIOR_WEIGHT,
    at_theta,
    fitted_keys,
    theta_bounds,
    to_theta,
)
from specsim.validation.published_set import PublishedSet, Row
from specsim.validation.row_predict import row_model

POOLED = ("compute_efficiency", "compute_rows_half", "schedule_ms_per_step", *BATCH_PARAMS)


@functools.lru_cache(maxsize=16)
def family(name: str) -> tuple[str, ...]:
    """The shipped runtimes whose ``defaults_from`` is ``name``."""
    return tuple(n for n in runtime_names() if load_runtime(n).defaults_from == name)


def family_base(rt: Runtime) -> str | None:
    """The runtime whose family ``rt`` is fitted in (its own name for a base), None outside any."""
    return rt.defaults_from or (rt.name if family(rt.name) else None)


def family_runtimes(base_name: str, runtimes: dict[str, Runtime]) -> tuple[Runtime, dict[str, Runtime]]:
    """The family's base and its members by name: ``runtimes``' where it names them (a user's
    ``--runtime``), else the shipped ones."""
    pick = lambda n: runtimes.get(n) or load_runtime(n)  # noqa: E731
    return pick(base_name), {n: pick(n) for n in family(base_name)}


def _member_start(member: Runtime, base: Runtime) -> Runtime:
    """A member at the base's defaults for every parameter the base fits (its own switches kept)."""
    values = {k: base.defaults[k] for k in base.fit if k not in member.ties}
    return replace(member, **values)


def fit_family(
    ps: PublishedSet, rows: list[Row], base: Runtime, members: dict[str, Runtime], label: str
) -> dict[str, Runtime]:
    """Every runtime of the family fitted on ``rows`` (module docstring), by name."""
    start = base.at_defaults()
    templates = {base.name: start} | {n: _member_start(m, base) for n, m in members.items()}
    rows = [r for r in rows if r.runtime in templates]
    keys = fitted_keys(base, rows)
    if not keys or not rows:
        values = {k: getattr(start, k) for k in base.fit}
        return {n: t.with_values(label, **values) for n, t in templates.items()}
    shared = [k for k in keys if k in POOLED]
    own = [k for k in keys if k not in POOLED]
    layout = shared + own  # one copy's parameters in θ order: the pooled first, then its own
    by = {n: [r for r in rows if r.runtime == n] for n in templates}
    copies = [base.name] + [n for n in templates if n != base.name and by[n]]
    groups = [(n, row_model(ps, by[n])) for n in copies if by[n]]
    ns, no = len(shared), len(own)
    prior = np.array([to_theta(k, start.defaults[k]) for k in layout])
    scale = np.array([PRIOR_SCALE.get(k, 1.0) for k in shared + own * len(copies)])
    bounds = theta_bounds(layout, base.kind)
    lo, hi = (np.concatenate([b[:ns]] + [b[ns:]] * len(copies)) for b in bounds)

    def split(theta: np.ndarray) -> dict[str, Runtime]:
        out = {}
        for i, n in enumerate(copies):
            at = np.concatenate([theta[:ns], theta[ns + i * no : ns + (i + 1) * no]])
            out[n] = at_theta(templates[n], layout, at)
        return out

    def residuals(theta: np.ndarray) -> np.ndarray:
        rts = split(theta)
        errs = [np.log(m.predict(rts[n]) / m.measured) for n, m in groups]
        own_copies = [theta[ns + i * no : ns + (i + 1) * no] - prior[ns:] for i in range(1, len(copies))]
        pulls = np.concatenate([theta[: ns + no] - prior, *own_copies])
        return np.concatenate([*errs, PRIOR_WEIGHT * pulls / scale])

    x0 = np.concatenate([prior] + [prior[ns:]] * (len(copies) - 1))
    x0 = np.clip(x0, lo, np.nextafter(hi, -np.inf))
    best = least_squares(residuals, x0, bounds=(lo, hi), method="trf")
    fitted = split(best.x)
    values = {n: {k: getattr(rt, k) for k in keys} for n, rt in fitted.items()}
    out = {}
    for n, t in templates.items():
        got = values.get(n, values[base.name])
        out[n] = t.with_values(label if n in values else f"{base.name}'s {label}", **got)
    return out
