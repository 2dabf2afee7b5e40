"""Plots for hardware plans (matplotlib imported lazily, Agg backend, PNG written atomically)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from specsim.hardware.plan import Plan
from specsim.jsonio import write_bytes_atomic


def plot_speedup_vs_batch(plan: Plan, path: str | os.PathLike, *, method: str | None = None,
                          context: int | None = None) -> Path:
    """Best-γ SD speedup vs batch size, one line per device (hollow markers: does not fit in memory)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    method = method or plan.methods[0]
    context = plan.contexts[0] if context is None else context
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for dev in plan.devices:
        rows = sorted(plan.select(device=dev, method=method, context=context), key=lambda r: r.batch_size)
        xs, ys = [r.batch_size for r in rows], [r.speedup for r in rows]
        (line,) = ax.plot(xs, ys, "-", label=dev)
        for r in rows:
            ax.plot(r.batch_size, r.speedup, "o", color=line.get_color(),
                    markerfacecolor=line.get_color() if r.fits_memory else "none")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("SD speedup (best γ, decode phase)")
    ax.set_title(f"method {method}, context {context} tokens (roofline; hollow = does not fit)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
