"""Latency-vs-rate plots of a ``specsim serve --rates`` sweep, SD on and off (PNG, written atomically)."""

from __future__ import annotations

import os
from pathlib import Path

from specsim.hardware.plots import new_figure, save_png
from specsim.serve.compare import Sweep


def plot_latency_vs_rate(sweep: Sweep, path: str | os.PathLike, sd_label: str) -> Path:
    """p50 TPOT, p90 TTFT and output tokens/s against the request rate, SD and target-only, with the rate
    from which SD stops paying marked."""
    fig = new_figure((11, 3.6))
    draw_latency_vs_rate(fig.subplots(1, 3), sweep, sd_label)
    fig.tight_layout()
    return save_png(fig, path)


def draw_latency_vs_rate(axes, sweep: Sweep, sd_label: str, title: str = "") -> None:
    """The three panels of :func:`plot_latency_vs_rate` on ``axes`` (three matplotlib axes)."""
    rates = [c.rate_per_s for c in sweep.rows]
    panels = (
        ("p50 TPOT (ms)", lambda m: m.tpot_ms.p50),
        ("p90 TTFT (ms)", lambda m: m.ttft_ms.p90),
        ("output tokens/s", lambda m: m.output_tokens_per_s),
    )
    for ax, (label, value) in zip(axes, panels):
        ax.plot(rates, [value(c.sd) for c in sweep.rows], "o-", label=sd_label)
        ax.plot(rates, [value(c.target_only) for c in sweep.rows], "s--", label="target-only")
        if sweep.stops_paying_from_rate is not None:
            ax.axvline(sweep.stops_paying_from_rate, color="k", lw=0.8, ls=":", label="SD stops paying")
        ax.set_xscale("log")
        ax.set_xticks(rates, [f"{r:g}" for r in rates])  # the swept rates, not log-minor labels that collide
        ax.minorticks_off()
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
    if title:
        axes[0].set_title(title, loc="left", fontsize=9)
    axes[0].legend(fontsize=7)
