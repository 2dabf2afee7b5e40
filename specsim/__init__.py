"""specsim: will speculative decoding (SD) make my multimodal LLM faster, how, and by how much?

Symbols (one convention everywhere; ms throughout): γ ``gamma`` drafts per block; τ ``tau`` tokens per block,
bonus included, 1 ≤ τ ≤ γ+1; α ``alpha`` i.i.d. acceptance, τ = (1 − α^(γ+1)) / (1 − α); ``Tp``/``Tq`` one
target/draft forward over 1 new position; ``Tv(gamma)`` the target's over γ+1; ``c`` = Tq/Tp, ``v`` = Tv/Tp.
speedup(γ) = τ / (d·c + v + o), d draft forwards per block, o the per-block overhead over Tp (Leviathan et al.
2023; IbED, Lee et al. 2024, Eq. 2: d = γ, o = 0). numpy and scipy at its core; a JSON profile sits between
this and ``calibrate``. More (a_i, β_t): ARCHITECTURE.md."""

from specsim.acceptance.theory import (
    alpha_from_tau,
    optimal_gamma,
    speedup,
    tau_from_histogram,
    tau_from_survival,
    tau_iid,
)
from specsim.errors import SpecsimError

__version__ = "0.1.0"

__all__ = [
    "SpecsimError",
    "alpha_from_tau",
    "optimal_gamma",
    "speedup",
    "tau_from_histogram",
    "tau_from_survival",
    "tau_iid",
]
