"""Plots for hardware plans (matplotlib imported lazily; a bare Figure, so pyplot's backend is left alone;
PNG written atomically)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from specsim.hardware.plan import Plan
from specsim.jsonio import write_bytes_atomic


def plot_speedup_vs_batch(plan: Plan, path: str | os.PathLike) -> Path:
    """SD speedup vs batch size: one panel per context, one line per device and method (dashes: later methods;
    hollow markers: does not fit in memory; a star: the largest batch that fits, priced)."""
    fixed = len(plan.gammas) == 1
    fig = new_figure((9.5, 3.2 * len(plan.contexts) + 1.3))
    axes = fig.subplots(len(plan.contexts), 1, squeeze=False)[:, 0]
    colors = palette(len(plan.devices))
    for ax, context in zip(axes, plan.contexts):
        for i, method in enumerate(plan.methods):
            for dev, color in zip(plan.devices, colors):
                _speedup_line(ax, plan, dev, method, context, ("-", "--", ":", "-.")[i % 4], color)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_ylabel(f"SD speedup ({f'γ {plan.gammas[0]}' if fixed else 'best γ'})")
        ax.set_title(f"context {context} tokens (hollow: does not fit; star: largest that fits)", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the curves, not on them
    axes[-1].set_xlabel("batch size (sequences), decode phase")
    fig.tight_layout()
    return save_png(fig, path)


def _speedup_line(ax, plan: Plan, dev: str, method: str, context: int, style: str, color) -> None:
    rows = sorted(plan.select(device=dev, method=method, context=context), key=lambda r: r.batch_size)
    label = dev if len(plan.methods) == 1 else f"{dev}, {method}"
    (line,) = ax.plot(
        [r.batch_size for r in rows], [r.speedup for r in rows], style, label=label, color=color
    )
    for r in rows:
        face = line.get_color() if r.fits_memory else "none"
        ax.plot(r.batch_size, r.speedup, "o", color=line.get_color(), markerfacecolor=face)
    limit = plan.crossover(dev, method, context)
    if limit.speedup_at_largest_fitting is not None:
        at = (limit.largest_fitting_batch, limit.speedup_at_largest_fitting)
        ax.plot(*at, "*", ms=11, color=line.get_color())


def plot_validation(
    results, path: str | os.PathLike, *, goal_median: float = 0.10, goal_max: float = 0.25
) -> Path:
    """Top: signed error per row (specsim filled, textbook hollow), rows grouped by source, the goal bands
    shaded. Below: predicted vs published, one panel per observable, y = x dashed."""
    from matplotlib.ticker import FuncFormatter

    kinds = sorted({r.observable for r in results})
    sources = sorted({r.source for r in results})
    color = dict(zip(sources, palette(len(sources))))
    fig = new_figure((max(12.0, 4.0 * len(kinds)), 9.0))
    grid = fig.add_gridspec(2, len(kinds), height_ratios=(1.1, 1.0))
    ax = fig.add_subplot(grid[0, :])
    rows = sorted(results, key=lambda r: (r.source, r.id))
    x = range(len(rows))
    ax.axhspan(-100 * goal_max, 100 * goal_max, color="0.93", zorder=0, label=f"|error| <= {goal_max:.0%}")
    ax.axhspan(
        -100 * goal_median, 100 * goal_median, color="0.85", zorder=0, label=f"|error| <= {goal_median:.0%}"
    )
    ax.axhline(0.0, color="k", lw=0.8)
    for src in sources:
        idx = [i for i, r in enumerate(rows) if r.source == src]
        ax.plot(idx, [100 * rows[i].error for i in idx], "o", color=color[src], ms=5, label=src)
        ax.plot(
            idx,
            [100 * rows[i].textbook_error for i in idx],
            "o",
            color=color[src],
            markerfacecolor="none",
            alpha=0.5,
            ms=5,
        )
    ax.set_xticks(list(x), [r.id for r in rows], rotation=90, fontsize=5)
    ax.set_xlim(-1, len(rows))
    ax.set_ylabel("signed error (%)")
    ax.set_title("specsim (filled) and the textbook formula (hollow) against each published row", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.005, 1.0))  # beside the rows, not on them
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for k, kind in enumerate(kinds):
        ax = fig.add_subplot(grid[1, k])
        rs = [r for r in results if r.observable == kind]
        for src in sorted({r.source for r in rs}):
            sub = [r for r in rs if r.source == src]
            ax.plot([r.measured for r in sub], [r.predicted for r in sub], "o", color=color[src], ms=4)
            ax.plot(
                [r.measured for r in sub],
                [r.textbook for r in sub],
                "o",
                color=color[src],
                ms=4,
                markerfacecolor="none",
                alpha=0.5,
            )
        lo = min(min(r.measured, r.predicted, r.textbook) for r in rs) * 0.9
        hi = max(max(r.measured, r.predicted, r.textbook) for r in rs) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        if kind != "speedup" and hi / lo > 4:
            ax.set_xscale("log")
            ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel(f"published {kind.replace('_', ' ')}", fontsize=8)
        ax.set_ylabel("predicted", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("specsim validate (leave-one-source-out)")
    fig.tight_layout()
    return save_png(fig, path)


def plot_sweeps(comparisons, path: str | os.PathLike) -> Path:
    """Per published batch sweep: predicted best-γ speedup vs batch (line), predicted at the published batches
    (crosses) and published (dots); y = 1 dashed (below it SD does not pay)."""
    fig = new_figure((4.6 * len(comparisons), 4.2))
    axes = fig.subplots(1, len(comparisons), squeeze=False)
    for ax, c in zip(axes[0], comparisons):
        ax.plot(c.grid_batches, c.grid_best_speedup, "-", color="C0", label="specsim, best γ")
        ax.plot(
            [p.batch for p in c.points],
            [p.predicted for p in c.points],
            "x",
            color="C0",
            ms=8,
            label="specsim at published γ",
        )
        ax.plot(
            [p.batch for p in c.points], [p.published for p in c.points], "o", color="C3", label="published"
        )
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel("SD speedup")
        ax.set_title(
            f"{c.label}\n{c.gpus}x {c.device}, {c.runtime}, context {c.context_tokens:g}", fontsize=8
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig, path)


def palette(n: int) -> list:
    """``n`` colours, distinct up to 20 (matplotlib's tab10, then tab20; past 20 they repeat)."""
    from matplotlib import colormaps

    return [f"C{i}" for i in range(n)] if n <= 10 else [colormaps["tab20"](i % 20) for i in range(n)]


def new_figure(size):
    """A Figure with an Agg canvas, outside pyplot (no global backend switch, nothing left open)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, path) -> Path:
    """Write a figure to ``path``: rendered in memory, then :func:`specsim.jsonio.write_bytes_atomic`
    (atomic; a failed write is one SpecsimError and leaves any old file as it was)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return write_bytes_atomic(path, buf.getvalue())
