"""Where a synthetic-acceptance schedule comes from (``specsim check --synthetic-acceptance SPEC``): a thin
adapter from acceptance evidence specsim already reads to per-position rates, drawn into a
:class:`calibrate.run.synthetic_acceptance.SyntheticAcceptance`, and the acceptance entries that price it.

SPEC: ``tau:T@G``, ``tau:PROFILE:METHOD/SCENARIO``, ``rates:R0,R1,…`` or
``traces:PROFILE[:METHOD[/SCENARIO]]`` (PROFILE: a shipped profile's name or a profile file). Positions are
drawn from one numpy Generator seeded with ``--seed``.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from calibrate.run.synthetic_acceptance import SyntheticAcceptance
from specsim.errors import SpecsimError
from specsim.predict import acceptance_source
from specsim.profile_format import Trace

FORMS = "tau:T@G, tau:PROFILE:METHOD/SCENARIO, rates:R0,R1,... or traces:PROFILE[:METHOD[/SCENARIO]]"


@dataclass(frozen=True)
class ScheduleSpec:
    """A parsed SPEC: its text (``label``), and per-position ``rates`` (the last holds on) or greedy
    ``traces`` to replay."""

    label: str
    rates: tuple[float, ...] | None = None
    traces: tuple[Trace, ...] = ()


def parse_schedule(text: str) -> ScheduleSpec:
    """The SPEC of ``--synthetic-acceptance``, validated (a profile loaded, its entry found) before any model
    loads; SpecsimError naming the option and the bad value."""
    kind, _, rest = str(text).partition(":")
    try:
        if kind == "rates":
            return ScheduleSpec(text, rates=_rates(rest))
        if kind == "tau" and "@" in rest and ":" not in rest:
            tau, _, gamma = rest.partition("@")
            return ScheduleSpec(text, rates=(_alpha(_number(tau, "tau"), _number(gamma, "gamma")),))
        if kind == "tau" and rest:
            entry = _selected(*_profile_method_scenario(rest, need_scenario=True))[0]
            if entry.gamma is None:
                raise SpecsimError(f"{entry.method}/{entry.scenario}: no tau at a gamma of its own")
            tau = acceptance_source.of_entry(entry).tau_with_source(entry.gamma)[0]
            return ScheduleSpec(text, rates=(_alpha(tau, entry.gamma),))
        if kind == "traces" and rest:
            return ScheduleSpec(text, traces=_traces(*_profile_method_scenario(rest, need_scenario=False)))
    except SpecsimError as err:
        raise SpecsimError(f"--synthetic-acceptance {text!r}: {err}") from None
    raise SpecsimError(f"--synthetic-acceptance: expected {FORMS}, got {text!r}")


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecsimError(f"{name}: expected a number, got {text!r}") from None
    if not np.isfinite(value):
        raise SpecsimError(f"{name}: expected a finite number, got {text!r}")
    return value


def _alpha(tau: float, gamma: float) -> float:
    """The i.i.d. α of τ at γ, as every command reads a τ (:func:`acceptance_source.given_tau`)."""
    if gamma != int(gamma) or gamma < 1:
        raise SpecsimError(f"gamma: expected an integer >= 1, got {gamma:g}")
    return acceptance_source.given_tau(tau, int(gamma), "tau").alpha


def _rates(text: str) -> tuple[float, ...]:
    rates = tuple(_number(r.strip(), "rates") for r in text.split(","))
    bad = [r for r in rates if not 0 <= r <= 1]
    if bad:
        raise SpecsimError(f"rates: expected acceptance rates in [0, 1], got {bad[0]:g}")
    return rates


def _profile_method_scenario(text: str, *, need_scenario: bool):
    """(profile, method or None, scenario or None) of ``PROFILE[:METHOD[/SCENARIO]]``."""
    from specsim.profiles import load_profile

    name, _, selection = text.partition(":")
    method, _, scenario = selection.partition("/")
    if need_scenario and not (method and scenario):
        raise SpecsimError("expected PROFILE:METHOD/SCENARIO (one entry's tau)")
    return load_profile(name), method or None, scenario or None


def _selected(profile, method, scenario) -> list:
    """The profile's acceptance entries of ``method`` and ``scenario`` (None: any)."""
    entries = [e for e in profile.acceptance if method in (None, e.method) and scenario in (None, e.scenario)]
    if not entries:
        known = ", ".join(f"{e.method}/{e.scenario}" for e in profile.acceptance) or "none"
        want = f"{method or '*'}/{scenario or '*'}"
        raise SpecsimError(f"profile {profile.name!r} has no entry {want} (has: {known})")
    return entries


def _traces(profile, method, scenario) -> tuple[Trace, ...]:
    """The greedy traces of one method's entries (any scenario unless one is named)."""
    entries = [e for e in _selected(profile, method, scenario) if any(t.match for t in e.traces)]
    methods = sorted({e.method for e in entries})
    if len(methods) != 1:
        raise SpecsimError(
            f"expected one method's greedy traces, found {methods or 'none'} (name one: PROFILE:METHOD)"
        )
    return tuple(t for e in entries for t in e.traces if t.match)


def build_schedule(spec: ScheduleSpec, prompt_ids, positions: int, seed: int) -> SyntheticAcceptance:
    """The schedule of ``spec`` for these prompts (repeats share one), ``positions`` long each, drawn with
    ``numpy.random.default_rng(seed)``."""
    ids = list(dict.fromkeys(prompt_ids))
    if spec.rates is not None:
        r = np.asarray(spec.rates, dtype=float)
        rates = {p: np.concatenate([r, np.full(max(positions - r.size, 0), r[-1])])[:positions] for p in ids}
    else:
        own = {t.prompt_id: t.match for t in spec.traces}
        in_turn = itertools.cycle([t.match for t in spec.traces])
        matches = {p: own[p] if p in own else next(in_turn) for p in ids}  # in prompt order
        rates = {p: np.resize(np.asarray(m, dtype=float), positions) for p, m in matches.items()}
    return SyntheticAcceptance.drawn(spec.label, rates, np.random.default_rng(seed))


def synthetic_run(setup, spec: ScheduleSpec, *, scenario, max_new_tokens: int, max_gamma: int, seed: int):
    """(``setup`` without EOS: every request runs ``max_new_tokens``, the schedule, and the acceptance entries
    that price it: per (images, method) of ``setup``'s groups, its prompts' schedules as greedy traces)."""
    from calibrate.drafting import Method
    from calibrate.measure.acceptance_traces import PromptTrace, acceptance_entry

    schedule = build_schedule(spec, [r.prompt_id for r in setup.requests], max_new_tokens + max_gamma, seed)
    entries = {}
    for n, reqs in setup.groups.items():
        traces = schedule.traces([r.prompt_id for r in reqs], max_new_tokens)
        for m in setup.methods:
            drafter = setup.drafter(m)
            prompt_traces = [  # the output tokens are unknown before the runs: the entry does not read them
                PromptTrace(t, (0,) * max_new_tokens, r.input_ids.shape[1], draft_prompt_tokens(drafter, r))
                for t, r in zip(traces, reqs)
            ]
            entries[(n, m)] = acceptance_entry(
                prompt_traces, method=m, scenario=setup.scenario(n, scenario), images_per_prompt=n,
                notes=f"synthetic acceptance {spec.label}", **Method.parse(m).costs(n),
            )  # fmt: skip
    return dataclasses.replace(setup, eos=None), schedule, entries


def draft_prompt_tokens(drafter, request) -> int:
    """The positions of the draft's own prompt for ``request`` (its longest context for an ensemble)."""
    drafter.prefill(request)
    return int(max(getattr(drafter, "context_tokens", None) or [request.input_ids.shape[1]]))


def marked(rows, spec: ScheduleSpec) -> list:
    """Check rows (one request, batch or serving) that say they were measured under ``spec``."""
    return [dataclasses.replace(r, synthetic_acceptance=spec.label) for r in rows]


def check_acceptance(setup, profile, spec: ScheduleSpec | None, *, scenario, max_new_tokens, gammas, seed):
    """What a check's runs accept by and what prices them: (setup, None, the profile's entries per (images,
    method)) for lossless runs, or :func:`synthetic_run`'s (setup, schedule, entries) under ``spec``."""
    if spec is None:
        from calibrate.measure.check_runs import entries_of

        return setup, None, entries_of(setup, profile, scenario)
    return synthetic_run(
        setup, spec, scenario=scenario, max_new_tokens=max_new_tokens, max_gamma=max(gammas), seed=seed
    )


def synthetic_note(spec: ScheduleSpec | None) -> str | None:
    """The line a check prints under rows measured with ``spec`` (None: lossless)."""
    if spec is None:
        return None
    return (
        f"synthetic acceptance {spec.label}: every SD block accepted what the schedule says (not lossless, "
        "no EOS); the prediction prices the same schedule, so the rows test the cost model, not acceptance"
    )
