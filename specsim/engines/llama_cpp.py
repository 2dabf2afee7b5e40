"""llama.cpp as a serving engine: ``llama-server``'s speculative flags, and the best draft length from a
profile measured through llama.cpp (``calibrate latency --engine llama.cpp``).

Flags (common/arg.cpp of llama.cpp 0c1e570): ``-md`` the draft GGUF, ``--spec-type draft-simple``,
``--spec-draft-n-max`` K with its n-min and p-min 0 (always K drafts), ``-np`` slots; K is one for every
batch, read at start only. With a llama.cpp profile the speedup at each γ is priced through its pass cost
from the entry's traces (:func:`measured_speedups`). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import shlex

from specsim.engines.engine_config import llama_cpp_server_args
from specsim.predict.pricing import price, request_specs
from specsim.profile_format import MethodAcceptance, Profile

LLAMA_CPP_COMMIT = "0c1e570"  # the build these flags were read from


def is_llama_cpp_profile(profile: Profile) -> bool:
    """Whether the profile's latency was measured through llama.cpp (its prompt pass does not draft)."""
    model = profile.latency.cost_model
    return model is not None and not model.first_pass_drafts


def measured_speedups(profile: Profile, entry: MethodAcceptance, gammas, new_tokens: int) -> dict[int, float]:
    """Decode-phase speedup at each γ over the entry's traced prompts, priced by the profile (batch 1)."""
    specs = request_specs(entry, max_new_tokens=new_tokens)
    return {int(g): float(price(profile, entry, int(g), specs).decode_speedup) for g in gammas}


def llama_recommendation(
    profile: Profile,
    entry: MethodAcceptance,
    min_speedup: float,
    draft_model: str,
    gamma_max: int | None = None,
) -> dict:
    """The best γ ≤ ``gamma_max`` (default: the profile's grid) of a llama.cpp profile (64 tokens per request,
    batch 1), its flags and a text table."""
    from specsim.report import fmt, format_table

    top = profile.latency.forward_costs().max_gamma
    speedups = measured_speedups(profile, entry, range(1, min(top, gamma_max or top) + 1), 64)
    best = max(speedups, key=speedups.get)
    gamma = best if speedups[best] >= min_speedup else 0
    flags = llama_cpp_server_args(gamma, draft_model=draft_model)
    version = profile.latency.provenance.software.get("llama.cpp", "?") if profile.latency.provenance else "?"
    table = format_table(["gamma", "speedup"], [[str(g), fmt(v, 3)] for g, v in speedups.items()])
    verdict = f"best gamma {best} ({speedups[best]:.2f}x)" + (
        "" if gamma else ": below --min-speedup, SD off"
    )
    beyond = "" if not gamma_max or gamma_max <= top else (
        f"\nnote: --gamma-max {gamma_max}: the profile's passes stop at gamma {top}, so gamma "
        f"{top + 1}..{gamma_max} is not priced"
    )  # fmt: skip
    text = (
        f"llama.cpp ({version}) speculative settings for {entry.method}/{entry.scenario} of profile "
        f"{profile.name}, priced from its measured passes (64 tokens, one request at a time)\n{table}\n"
        f"{verdict}\n"
        + ("llama-server " + shlex.join(flags) if flags else "serve without -md: SD does not pay")
        + beyond
    )
    return {"engine": "llama.cpp", "profile": profile.name, "speedups": speedups, "gamma": gamma,
            "config": flags, "text": text}  # fmt: skip
