"""Notes a hardware plan or a recommendation attaches to its assumptions: where the image tokens in the
context come from, and why v = Tv(γ)/Tp can print below 1."""

from __future__ import annotations

from specsim.hardware.model import ModelSpec


def image_tokens_note(target: ModelSpec) -> str:
    """Where the image tokens in the context come from: the target's own vision spec."""
    if target.vision is None:
        return f"no image tokens: {target.name} has no vision tower"
    size = target.vision.image_size
    at = f" ({size} images)" if size is not None else ""
    return f"image tokens included: {target.vision.image_tokens} per image for {target.name}{at}"


V_BELOW_ONE = "v < 1"  # how the note below starts


def v_below_one_note(shown, eff) -> str | None:
    """Why v = Tv(γ)/Tp is below 1 at the batch sizes of ``shown`` (rows with ``batch_size``, ``best_gamma``
    and ``v``: plan rows or recommendations) in the runtime model ``eff`` (None: it is not)."""
    low = [c for c in shown if c.v < 1.0]
    if not low:
        return None
    c = low[0]
    rows_tp, rows_tv = c.batch_size, c.batch_size * (c.best_gamma + 1)
    m_tp, m_tv = (float(eff.memory_efficiency(r)) for r in (rows_tp, rows_tv))
    gammas = {
        b: sorted({x.best_gamma for x in low if x.batch_size == b})
        for b in sorted({x.batch_size for x in low})
    }
    at = ", ".join(f"{b} (gamma {', '.join(map(str, g))})" for b, g in gammas.items())
    where = f"{V_BELOW_ONE} at batch {at}"
    if m_tv > m_tp and hasattr(eff, "memory_efficiency_gemv"):
        fitted = set(getattr(eff, "fit", ()))

        def how(key: str) -> str:
            return "fitted" if key in fitted else "assumed"

        return (
            f"{where}: runtime {eff.name} streams weights at {m_tv:.1%} of peak bandwidth in a pass of "
            f"{rows_tv} rows (memory_efficiency_gemm, {how('memory_efficiency_gemm')}) but at {m_tp:.1%} in "
            f"a {rows_tp}-row pass (memory_efficiency_gemv, {how('memory_efficiency_gemv')}; batch "
            f"{c.batch_size}, gamma {c.best_gamma}), so verifying gamma+1 positions is priced below one "
            "target-only step; a property of these two efficiencies, not a measured Tv < Tp"
        )
    return (
        f"{where}: the roofline prices the verification of gamma+1 positions below one target-only step "
        "(efficiencies, overheads and kernels by rows of the runtime); not a measured Tv < Tp"
    )
