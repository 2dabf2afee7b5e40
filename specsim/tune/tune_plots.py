"""The latency-throughput front of a tuning study as a PNG (matplotlib, imported lazily by
:mod:`specsim.hardware.plots`; written atomically)."""

from __future__ import annotations

import os
from pathlib import Path

from specsim.hardware.plots import new_figure, save_png
from specsim.tune.study import StudyOutcome
from specsim.tune.tune_report import FrontPoint


def plot_front(outcome: StudyOutcome, points: list[FrontPoint], path: str | os.PathLike, title: str) -> Path:
    """Every feasible trial (p50 TPOT against output tokens/s per GPU, by device) and the front."""
    fig = new_figure((7, 4.5))
    ax = fig.subplots()
    by_device: dict[str, list] = {}
    for r in outcome.records:
        m = r.result.metrics
        if r.feasible and m is not None and m.tpot_ms.p50 is not None:
            point = (m.output_tokens_per_s / r.result.gpus, m.tpot_ms.p50)
            by_device.setdefault(r.deployment.device, []).append(point)
    for device, xy in sorted(by_device.items()):
        ax.scatter(*zip(*xy), s=14, alpha=0.5, label=device)
    if points:
        ax.plot(
            [p.tokens_per_s_per_gpu for p in points], [p.tpot_p50_ms for p in points], "k.-", label="front"
        )
    ax.set_xlabel("output tokens/s per GPU")
    ax.set_ylabel("TPOT p50 (ms)")
    ax.set_title(title, loc="left", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, path)
