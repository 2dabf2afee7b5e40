"""specsim: will speculative decoding (SD) make my multimodal LLM faster, how, and by how much?

Symbols, defined once here and used with these names everywhere in the package:

- ``gamma`` (γ): draft tokens proposed per draft/verify block (integer ≥ 1).
- ``tau`` (τ): block efficiency, the expected number of tokens emitted per block, the bonus
  token included, so 1 ≤ τ ≤ γ+1.
- ``alpha`` (α): i.i.d. per-token acceptance probability; then τ = (1 − α^(γ+1)) / (1 − α).
- ``a_i``: survival, P(at least i of the γ drafts of a block are accepted); τ = 1 + Σ_{i≤γ} a_i.
- ``beta`` (β_t): Σ_x min(p_t(x), q_t(x)), the acceptance probability at position t when sampling.
- ``Tp``: one target forward over 1 new position with KV cache (ms), at a given context length.
- ``Tq``: one draft forward over 1 new position with KV cache (ms); batch k for a k-member ensemble.
- ``Tv(gamma)``: one target forward over the γ+1 new positions verification needs (the pending
  last token plus γ drafts) with KV cache (ms).
- ``c`` = Tq/Tp, ``v`` = v(γ) = Tv(γ)/Tp.
- speedup(γ) = τ(γ) / (γ·c + v(γ)) for the decode phase (Leviathan et al. 2023, Eq. 2 of
  IbED, Lee et al. 2024); v = 1 is the textbook (Leviathan) approximation, used only when asked for.
- Token trees (:mod:`specsim.draft_shapes.trees`): n draft nodes below the root (the pending token);
  ``Tv(n)`` is the target pass over the n+1 positions, so the chain of γ drafts is the tree with n = γ.
  Per-depth, per-rank acceptance: P(the target's token is the draft's r-th candidate | parent accepted).

Times are milliseconds everywhere. ``specsim`` imports numpy and scipy only (matplotlib lazily);
measuring is ``calibrate``'s job, and a JSON profile (:mod:`specsim.profile_format`) sits between them.
"""

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
