"""Plots for hardware plans (matplotlib imported lazily; a bare Figure, so pyplot's backend is left alone;
PNG written atomically)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from specsim.hardware.plan import Plan
from specsim.jsonio import write_bytes_atomic


def plot_speedup_vs_batch(plan: Plan, path: str | os.PathLike, *, method: str | None = None,
                          context: int | None = None) -> Path:
    """Best-γ SD speedup vs batch size, one line per device (hollow markers: does not fit in memory)."""
    method = method or plan.methods[0]
    context = plan.contexts[0] if context is None else context
    fig = _figure((7, 4.5))
    ax = fig.subplots()
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
    return _save(fig, path)


def plot_validation(results, path: str | os.PathLike) -> Path:
    """Predicted vs published (one panel per observable), specsim filled, textbook hollow; y = x dashed."""
    kinds = sorted({r.observable for r in results})
    fig = _figure((5.2 * len(kinds), 4.6))
    axes = fig.subplots(1, len(kinds), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        rs = [r for r in results if r.observable == kind]
        sources = sorted({r.source for r in rs})
        for i, src in enumerate(sources):
            sub = [r for r in rs if r.source == src]
            color = f"C{i % 10}"
            ax.plot([r.measured for r in sub], [r.predicted for r in sub], "o", color=color, label=f"{src} (specsim)")
            ax.plot([r.measured for r in sub], [r.textbook for r in sub], "o", color=color, markerfacecolor="none",
                    alpha=0.6, label=f"{src} (textbook)")
        lo = min(min(r.measured, r.predicted, r.textbook) for r in rs) * 0.9
        hi = max(max(r.measured, r.predicted, r.textbook) for r in rs) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        if kind != "speedup":
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"published {kind}")
        ax.set_ylabel(f"predicted {kind}")
        ax.set_title(kind.replace("_", " "))
        ax.legend(fontsize=6)
    fig.suptitle("specsim validate: specsim (filled) vs textbook (hollow)")
    fig.tight_layout()
    return _save(fig, path)


def plot_sweeps(comparisons, path: str | os.PathLike) -> Path:
    """Per published batch sweep: predicted best-γ speedup vs batch (line), predicted at the published batches
    (crosses) and published (dots); y = 1 dashed (below it SD does not pay)."""
    fig = _figure((4.6 * len(comparisons), 4.2))
    axes = fig.subplots(1, len(comparisons), squeeze=False)
    for ax, c in zip(axes[0], comparisons):
        ax.plot(c.grid_batches, c.grid_best_speedup, "-", color="C0", label="specsim, best γ")
        ax.plot([p.batch for p in c.points], [p.predicted for p in c.points], "x", color="C0", ms=8,
                label="specsim at published γ")
        ax.plot([p.batch for p in c.points], [p.published for p in c.points], "o", color="C3", label="published")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel("SD speedup")
        ax.set_title(f"{c.label}\n{c.gpus}x {c.device}, {c.runtime}, context {c.context_tokens:g}", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def _figure(size):
    """A Figure with an Agg canvas, outside pyplot (no global backend switch, nothing left open)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path) -> Path:
    """Write a figure to ``path`` atomically (:func:`specsim.jsonio.write_bytes_atomic`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return write_bytes_atomic(path, buf.getvalue())
