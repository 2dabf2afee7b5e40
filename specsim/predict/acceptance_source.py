"""Where τ(γ) comes from, one answer for every command: a profile's acceptance entries (greedy traces
replayed, measured histograms, imported engine counters:
:func:`specsim.predict.tau_at_gamma.tau_with_source`), or a τ or an i.i.d. α given on the command line.
:class:`MethodTau` carries τ per γ with where each value came from; errors name their option (``--tau:``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.acceptance.theory import tau_iid
from specsim.errors import SpecsimError, warn
from specsim.predict.tau_at_gamma import tau_with_source
from specsim.presets import pair_profile
from specsim.profile_format import MethodAcceptance, Profile
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
        if gamma is None:
            raise SpecsimError("--tau: needs --gamma (the gamma that tau belongs to)")
        if not 1.0 <= tau <= gamma + 1:
            raise SpecsimError(f"--tau: expected 1 <= tau <= gamma+1 = {gamma + 1}, got {tau}")
        return [MethodTau("user", f"tau={tau:g}", (gamma,), (tau,), ("--tau",))]
    if not 0.0 <= alpha < 1.0:
        raise SpecsimError(f"--alpha: expected 0 <= alpha < 1, got {alpha}")
    gammas = (gamma,) if gamma else tuple(range(1, gamma_max + 1))
    return [
        MethodTau(
            "user",
            f"alpha={alpha:g}",
            gammas,
            tuple(float(tau_iid(alpha, g)) for g in gammas),
            tuple("iid --alpha" for _ in gammas),
        )
    ]


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
) -> tuple[Profile | None, list[MethodTau], list[str]]:
    """(profile or None, tau per method, notes): from --tau/--alpha, else from --profile or the pair's
    (the default profile, with a warning, when tau may not belong to the named target and draft)."""
    user = user_methods(tau, alpha, gamma, gamma_max)
    if user is not None:
        return None, user, [f"tau from the command line ({user[0].scenario})"]
    name = (
        profile_name
        if profile_name is not None
        else ((pair_profile(pair) if pair else None) or DEFAULT_PROFILE)
    )
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
