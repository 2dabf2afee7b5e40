"""Where acceptance comes from, one answer for every command (``serve``, ``hardware``, ``recommend``, the
tuner, calibrate's synthetic schedules): a profile entry (greedy traces replayed, else its histogram, such as
imported engine counters, else its τ: :func:`specsim.predict.tau_at_gamma.tau_with_source`), per-position
rates, a τ at a γ, or an i.i.d. α. :class:`Acceptance` is one of them, from options (:func:`from_options`) or
a spec (:func:`parse_acceptance`: ``A``, ``alpha:A``, ``tau:T@G``, ``tau:PROFILE:METHOD/SCENARIO``,
``positions:P1,...,PK``, ``traces:PROFILE[:METHOD[/SCENARIO]]``, ``profile:PROFILE[:METHOD[/SCENARIO]]``);
:class:`MethodTau` carries τ per γ with where each value came from; errors name their option.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.acceptance.theory import (
    alpha_from_tau,
    survival_from_histogram,
    survival_past,
    tau_from_survival,
    tau_iid,
)
from specsim.bounds import MAX_GAMMA, clip
from specsim.errors import SpecsimError, warn
from specsim.predict.tau_at_gamma import EXTRAPOLATED, tau_with_source
from specsim.profile_format import WHAT_IF_SCENARIO, MethodAcceptance, Profile
from specsim.profiles import DEFAULT_PROFILE, load_profile, shipped_profiles

DEFAULT_GAMMAS = tuple(range(1, 9))


@dataclass(frozen=True)
class MethodTau:
    """τ(γ) of one drafting method for γ in ``gammas``, with where each value came from."""

    method: str
    scenario: str
    gammas: tuple[int, ...]
    tau: tuple[float, ...]
    tau_source: tuple[str, ...]
    draft_batch_size: int = 1

    @classmethod
    def from_entry(cls, entry: MethodAcceptance, gammas=DEFAULT_GAMMAS) -> MethodTau:
        pairs = [tau_with_source(entry, int(g)) for g in gammas]
        return cls(
            entry.method,
            entry.scenario,
            tuple(int(g) for g in gammas),
            tuple(float(t) for t, _ in pairs),
            tuple(s for _, s in pairs),
            entry.draft_batch_size,
        )


def method_entries(profile: Profile, methods: list[str] | None, scenario: str | None) -> list:
    """The profile's acceptance entries for --method (default: the first; 'all') and --scenario
    (default: the first entry's)."""
    wanted = None if not methods or methods == ["all"] else methods
    entries = profile.select_entries(wanted, scenario)
    named = list(dict.fromkeys(e.scenario for e in entries if e.scenario != WHAT_IF_SCENARIO))
    if scenario is not None and len(named) > 1:  # a plan holds one tau per method: a group would repeat it
        raise SpecsimError(
            f"--scenario {scenario}: names {len(named)} scenarios ({', '.join(named)}), and the plan takes "
            "one tau per method: give one of them"
        )
    if scenario is None:
        entries = [e for e in entries if e.scenario == entries[0].scenario]
    return entries if methods else entries[:1]


def profile_methods(
    profile: Profile, methods: list[str] | None, scenario: str | None, gamma_max: int
) -> list[MethodTau]:
    """tau at gamma 1..``gamma_max`` for each selected method of ``profile``."""
    gammas = range(1, gamma_max + 1)
    return [MethodTau.from_entry(e, gammas) for e in method_entries(profile, methods, scenario)]


def user_methods(
    tau: float | None, alpha: float | None, gamma: int | None, gamma_max: int
) -> list[MethodTau] | None:
    """--tau (at --gamma) or --alpha (i.i.d.) instead of a profile; None when neither is given."""
    if tau is None and alpha is None:
        return None
    if tau is not None and alpha is not None:
        raise SpecsimError("--tau/--alpha: give one of them, not both")
    if tau is not None:
        return [given_tau(tau, gamma).method_tau((gamma,))]
    gammas = (gamma,) if gamma else tuple(range(1, gamma_max + 1))
    return [iid(alpha).method_tau(gammas)]


def from_options(
    *,
    alpha=None,
    tau=None,
    gamma=None,
    spec=None,
    profile=None,
    method=None,
    scenario=None,
    load=load_profile,
    profile_flag: str = "--acceptance-profile",
):
    """The one acceptance given by --alpha, --tau (at --gamma), --acceptance SPEC or the profile option
    (``profile_flag``; with --method/--scenario, read by ``load``); None when none is given. SpecsimError
    naming the options."""
    given = [f for f, v in (("--alpha", alpha), ("--tau", tau), ("--acceptance", spec)) if v is not None]
    given += [profile_flag] if profile is not None else []
    if len(given) > 1:
        raise SpecsimError(f"{'/'.join(given)}: give one acceptance source, not {len(given)}")
    if profile is None:
        for flag, value in (("--method", method), ("--scenario", scenario)):
            if value is not None:
                raise SpecsimError(f"{flag}: applies with {profile_flag} only")
    if alpha is not None:
        return iid(alpha)
    if tau is not None:
        return given_tau(tau, gamma)
    if spec is not None:
        return parse_acceptance(spec)
    return None if profile is None else of_entry(load(profile).one_entry(method, scenario))


def fixed_gamma(methods: list[MethodTau], gamma: int | None) -> list[MethodTau]:
    """Keep only ``gamma`` in every method (--gamma)."""
    if gamma is None:
        return methods
    if gamma < 1:
        raise SpecsimError(f"--gamma: expected an integer >= 1, got {gamma}")
    out = []
    for mt in methods:
        if gamma not in mt.gammas:
            raise SpecsimError(
                f"--gamma: method {mt.method} has tau for gamma {list(mt.gammas)}, not {gamma}"
            )
        k = mt.gammas.index(gamma)
        out.append(
            MethodTau(
                mt.method, mt.scenario, (gamma,), (mt.tau[k],), (mt.tau_source[k],), mt.draft_batch_size
            )
        )
    return out


def tau_methods(
    *,
    pair: str | None,
    target_name: str,
    draft_name: str,
    profile_name: str | None,
    methods: list[str] | None,
    scenario: str | None,
    tau: float | None,
    alpha: float | None,
    gamma: int | None,
    gamma_max: int,
    spec: str | None = None,
    pair_profile: str | None = None,
) -> tuple[Profile | None, list[MethodTau], list[str]]:
    """(profile or None, tau per method, notes): from --tau/--alpha or --acceptance SPEC, else from
    --profile or ``pair_profile``, the profile of ``pair`` (:func:`specsim.presets.pair_profile`; the
    default profile, with a warning, when tau may not belong to the named target and draft)."""
    if spec is not None:
        for flag, given in (("--tau", tau), ("--alpha", alpha), ("--profile", profile_name)):
            if given is not None:
                raise SpecsimError(f"--acceptance/{flag}: give one acceptance source, not both")
    if spec is not None or tau is not None or alpha is not None:
        source = "--acceptance" if spec is not None else ("--tau" if tau is not None else "--alpha")
        for flag, given in (("--profile", profile_name), ("--method", methods), ("--scenario", scenario)):
            if given is not None:  # each picks tau out of a profile, which the source replaces
                raise SpecsimError(
                    f"{flag}: picks tau out of a profile; {source} gives it here, not a profile"
                )
    if spec is not None:
        found = parse_acceptance(spec)
        gammas = (gamma,) if gamma else tuple(range(1, gamma_max + 1))
        return None, [found.method_tau(gammas)], [f"tau from --acceptance ({found.label})"]
    user = user_methods(tau, alpha, gamma, gamma_max)
    if user is not None:
        return None, user, [f"tau from the command line ({user[0].scenario})"]
    name = profile_name if profile_name is not None else (pair_profile or DEFAULT_PROFILE)
    if profile_name is None and name not in shipped_profiles():
        raise SpecsimError(
            f"--profile: the default profile {name!r} for pair {pair!r} is not shipped "
            "yet; pass --profile NAME_OR_PATH"
        )
    profile = load_profile(name)
    if not profile.acceptance:
        raise SpecsimError(
            f"--profile: profile {profile.name!r} has latency but no acceptance entries: pass "
            "--profile NAME_OR_PATH with acceptance, --alpha A, or --tau T --gamma N"
        )
    out = fixed_gamma(profile_methods(profile, methods, scenario, max(gamma_max, gamma or 0)), gamma)
    if profile_name is None and pair is None:
        warn(
            f"tau comes from the default profile {profile.name} ({profile.provenance.target} / "
            f"{profile.provenance.draft}), not from {target_name} / {draft_name}: pass --alpha A, --tau T "
            "--gamma N or --profile with their acceptance"
        )
    return profile, out, [f"tau from profile {profile.name} ({profile.provenance.source})"]


@dataclass(frozen=True)
class Acceptance:
    """One acceptance source (module docstring): ``label`` says where it comes from, and exactly one of
    ``alpha`` (i.i.d.; with ``gamma``, the α of a τ given at that γ), ``survival`` (a_1..a_K = P(at least i
    drafts accepted), from per-position rates) or ``entry`` (a profile's: traces, histogram or τ)."""

    label: str
    alpha: float | None = None
    gamma: int | None = None
    survival: tuple[float, ...] = ()
    entry: MethodAcceptance | None = None
    tau_given: float | None = None  # the τ a --tau gave at ``gamma``
    short: str = ""  # a user source's name in tables ("alpha=0.7", "tau=2.6")

    @property
    def method(self) -> str:
        return self.entry.method if self.entry is not None else "user"

    @property
    def scenario(self) -> str:
        return self.entry.scenario if self.entry is not None else (self.short or self.label)

    @property
    def k(self) -> int | None:
        """The γ its evidence was measured or given at (None: exact at any γ: traces, an α)."""
        if self.entry is not None:
            return None if any(t.match is not None for t in self.entry.traces) else self.entry.gamma
        return len(self.survival) if self.survival else self.gamma

    @property
    def has_traces(self) -> bool:
        return self.entry is not None and any(t.match is not None for t in self.entry.traces)

    def survival_at_k(self) -> np.ndarray | None:
        """a_1..a_K where the evidence is a survival curve (per-position rates, a histogram without τ)."""
        if self.survival:
            return np.asarray(self.survival, dtype=float)
        e = self.entry
        if e is not None and not self.has_traces and e.tau is None and e.accepted_histogram is not None:
            return survival_from_histogram(e.accepted_histogram)
        return None

    def alpha_past_k(self) -> float:
        """The i.i.d. α that carries the evidence past its K (τ at K's), as τ is carried there."""
        return float(alpha_from_tau(self.tau_with_source(self.k)[0], self.k))

    def tau_with_source(self, gamma: int) -> tuple[float, str]:
        """(τ at γ, where it came from); an extrapolation's source is :func:`tau_at_gamma.extrapolated`."""
        if self.entry is not None:
            return tau_with_source(self.entry, gamma)
        if self.survival:
            k = len(self.survival)
            if gamma <= k:
                return 1.0 + float(np.sum(self.survival[:gamma])), "--acceptance positions"
            carried = survival_past(self.survival, self.alpha_past_k(), gamma)
            return float(tau_from_survival(carried)), f"{EXTRAPOLATED} gamma={k}"
        if self.gamma is None:
            return float(tau_iid(self.alpha, gamma)), "iid --alpha"
        if gamma == self.gamma:
            return float(self.tau_given), "--tau"
        if self.alpha >= 1.0 and gamma < self.gamma:  # every draft accepted at γ: so were its first ones
            return gamma + 1.0, "--tau"
        if self.alpha >= 1.0:  # nothing says a longer block would be accepted whole
            raise SpecsimError(
                f"tau {self.tau_given:g} at gamma {self.gamma} (every draft accepted) says nothing of longer "
                f"blocks, and gamma {gamma} was asked: price gammas up to {self.gamma} (--gamma or "
                "--gamma-max), or give a tau below gamma+1"
            )
        return float(tau_iid(self.alpha, gamma)), f"{EXTRAPOLATED} gamma={self.gamma}"

    def method_tau(self, gammas) -> MethodTau:
        """τ at each of ``gammas`` with its source (an entry's: :meth:`MethodTau.from_entry`)."""
        if self.entry is not None:
            return MethodTau.from_entry(self.entry, gammas)
        pairs = [self.tau_with_source(int(g)) for g in gammas]
        return MethodTau(
            self.method, self.scenario, tuple(int(g) for g in gammas), *map(tuple, zip(*pairs, strict=True))
        )


def iid(alpha: float, where: str = "--alpha") -> Acceptance:
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha < 1.0):
        raise SpecsimError(f"{where}: expected 0 <= alpha < 1, got {alpha!r}")
    return Acceptance(f"iid alpha={alpha:g}", alpha=float(alpha), short=f"alpha={alpha:g}")


def given_tau(tau: float, gamma: int | None, where: str = "--tau") -> Acceptance:
    """τ given at γ: the i.i.d. α with that τ there (exact at γ, an extrapolation elsewhere)."""
    if gamma is None:
        raise SpecsimError(f"{where}: needs --gamma (the gamma that tau belongs to)")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= MAX_GAMMA:
        raise SpecsimError(f"{where}: expected a gamma in 1..{MAX_GAMMA} for tau, got {gamma!r}")
    if not (isinstance(tau, (int, float)) and 1.0 <= tau <= gamma + 1):
        raise SpecsimError(f"{where}: expected 1 <= tau <= gamma+1 = {gamma + 1}, got {tau!r}")
    alpha = float(alpha_from_tau(tau, gamma))
    label = f"tau={tau:g} at gamma {gamma} (iid alpha={alpha:.4g})"
    return Acceptance(label, alpha, gamma, tau_given=float(tau), short=f"tau={tau:g}")


def of_entry(entry: MethodAcceptance) -> Acceptance:
    """A profile entry: traces replayed, else its histogram (imported engine counters), else its τ."""
    if any(t.match is not None for t in entry.traces):
        return Acceptance(f"greedy traces of {entry.method}/{entry.scenario} replayed", entry=entry)
    if entry.tau is None and entry.accepted_histogram is not None:
        return Acceptance(f"accepted-length histogram of {entry.method}/{entry.scenario} at K={entry.gamma}",
                          entry=entry)  # fmt: skip
    tau = "" if entry.tau is None else f" {entry.tau:g}"  # none: pricing says why (tau_with_source)
    return Acceptance(f"tau{tau} of {entry.method}/{entry.scenario} at gamma {entry.gamma}", entry=entry)


def positions(rates, where: str = "--acceptance positions") -> Acceptance:
    """Per-position rates P_i = P(draft i accepted | drafts before it accepted), i = 1..K."""
    r = [float(x) for x in rates]
    if not 0 < len(r) <= MAX_GAMMA or not all(np.isfinite(x) and 0.0 <= x <= 1.0 for x in r):
        raise SpecsimError(
            f"{where}: expected 1..{MAX_GAMMA} rates in [0, 1], one per draft position, got {str(rates)[:80]}"
        )
    survival = tuple(float(x) for x in np.cumprod(r))
    return Acceptance(f"per-position rates {','.join(f'{x:g}' for x in r)}", survival=survival)


def _profile_entry(text: str, kind: str) -> MethodAcceptance:
    """The one entry of ``PROFILE[:METHOD[/SCENARIO]]``."""
    name, _, selection = text.partition(":")
    method, _, scenario = selection.partition("/")
    if not name:
        raise SpecsimError(f"{kind}: expected PROFILE[:METHOD[/SCENARIO]]")
    hint = f"give {kind}:{name}:METHOD/SCENARIO"
    return load_profile(name).one_entry(method or None, scenario or None, hint=hint)


def parse_acceptance(text: str, where: str = "--acceptance") -> Acceptance:
    """One acceptance spec (module docstring); SpecsimError naming ``where`` and the spec."""
    kind, colon, rest = str(text).strip().partition(":")
    try:
        if not colon or kind == "alpha":
            alpha = float(rest if colon else kind)
            if not 0.0 <= alpha < 1.0:
                raise SpecsimError(f"expected an i.i.d. alpha in [0, 1), got {alpha:g}")
            return iid(alpha, "alpha")
        if kind == "tau" and "@" in rest and ":" not in rest:
            tau, _, gamma = rest.partition("@")
            return given_tau(float(tau), int(gamma), "tau")
        if kind == "tau":
            entry = _profile_entry(rest, kind)
            return given_tau(tau_with_source(entry, entry.gamma)[0], entry.gamma, "tau")
        if kind == "positions":
            return positions(rest.split(","), "positions")
        if kind == "traces":
            found = of_entry(_profile_entry(rest, kind))
            if not found.has_traces:
                raise SpecsimError(f"{found.method}/{found.scenario}: no greedy traces to replay")
            return found
        if kind == "profile":
            return of_entry(_profile_entry(rest, kind))
    except SpecsimError as err:  # before ValueError, its base
        raise SpecsimError(f"{where} {clip(str(text), 40)!r}: {err}") from None
    except ValueError:
        pass
    raise SpecsimError(f"{where}: expected {ACCEPTANCE_FORMS}, got {clip(str(text))!r}")


ACCEPTANCE_FORMS = (
    "A (an i.i.d. alpha), alpha:A, tau:T@G, tau:PROFILE:METHOD/SCENARIO, positions:P1,...,PK, "
    "traces:PROFILE[:METHOD[/SCENARIO]] or profile:PROFILE[:METHOD[/SCENARIO]]"
)
