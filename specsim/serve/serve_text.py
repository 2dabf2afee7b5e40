"""Plain-text tables of ``specsim serve``: SD on vs off at one rate, and a rate sweep."""

from __future__ import annotations

import math

from specsim.hardware.batch_limit import runs_text
from specsim.report import format_table
from specsim.serve.compare import Comparison, Sweep
from specsim.serve.metrics import Percentiles


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _percentile_rows(name: str, on: Percentiles, off: Percentiles) -> list[list[str]]:
    return [
        [f"{name} {label} ms", _ms(getattr(on, key)), _ms(getattr(off, key))]
        for label, key in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("mean", "mean"))
    ]


def _usd(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def comparison_text(c: Comparison, sd_label: str, usd: dict | None = None) -> str:
    """SD on and target-only side by side: percentiles, throughput, goodput, acceptance, and (``usd``:
    {"sd", "target_only"}, a price given) $ per million output tokens."""
    on, off = c.sd, c.target_only
    rows = []
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        rows += _percentile_rows(name, getattr(on, key), getattr(off, key))
    rows += [
        ["output tokens/s", f"{on.output_tokens_per_s:.0f}", f"{off.output_tokens_per_s:.0f}"],
        *(
            [["$/Mtok (output)", _usd(usd["sd"]), _usd(usd["target_only"])]]
            if usd and usd["sd"] is not None
            else []
        ),
        ["requests/s", _rate(on.requests_per_s), _rate(off.requests_per_s)],
        ["duration s", f"{on.duration_s:.1f}", f"{off.duration_s:.1f}"],
        ["steps", str(on.steps), str(off.steps)],
        ["busy fraction", f"{on.busy_fraction:.2f}", f"{off.busy_fraction:.2f}"],
        ["mean acceptance length (tau)", _rate(on.mean_acceptance_length), "-"],
    ]
    if on.slo is not None:
        rows += [
            [
                f"goodput req/s ({on.slo.describe()})",
                _rate(on.goodput_requests_per_s),
                _rate(off.goodput_requests_per_s),
            ],
            ["requests meeting the SLO", f"{on.slo_met_fraction:.1%}", f"{off.slo_met_fraction:.1%}"],
        ]
    speedup = c.tpot_speedup
    table = format_table(["metric", sd_label, "target-only"], rows)
    tail = "" if speedup is None else f"\nTPOT p50 speedup (target-only / SD): {speedup:.2f}x"
    return table + tail


def _pair(on: float | None, off: float | None, fmt) -> str:
    return f"{fmt(on)} / {fmt(off)}"


def sweep_text(s: Sweep, slo_given: bool, usd: list | None = None) -> str:
    """One row per rate: SD / target-only for TPOT p50, TTFT p90, ITL p90, tokens/s (and goodput, and $ per
    million output tokens when ``usd`` holds a price's)."""
    priced = bool(usd) and usd[0]["sd"] is not None
    headers = ["rate req/s", "TPOT p50 ms", "TTFT p90 ms", "ITL p90 ms", "output tok/s"]
    headers += ["$/Mtok"] if priced else []
    headers += ["goodput req/s"] if slo_given else []
    headers += ["TPOT speedup"]
    rows = []
    for i, c in enumerate(s.rows):
        on, off = c.sd, c.target_only
        row = [
            _rate(c.rate_per_s),
            _pair(on.tpot_ms.p50, off.tpot_ms.p50, _ms),
            _pair(on.ttft_ms.p90, off.ttft_ms.p90, _ms),
            _pair(on.itl_ms.p90, off.itl_ms.p90, _ms),
            _pair(on.output_tokens_per_s, off.output_tokens_per_s, lambda v: f"{v:.0f}"),
        ]
        row += [_pair(usd[i]["sd"], usd[i]["target_only"], _usd)] if priced else []
        if slo_given:
            row.append(_pair(on.goodput_requests_per_s, off.goodput_requests_per_s, _rate))
        row.append("-" if c.tpot_speedup is None else f"{c.tpot_speedup:.2f}x")
        rows.append(row)
    return format_table(headers, rows) + "\n(cells: SD / target-only)\n" + verdict(s)


def verdict(s: Sweep) -> str:
    """Where SD pays over the rates swept (p50 TPOT no worse than target-only), read off the rows by
    :func:`specsim.hardware.batch_limit.paying_runs`: every rate named is one that pays or one that loses."""
    if not s.pays_at_all:
        return "SD does not pay at any rate swept (its p50 TPOT is worse than target-only at each)"
    runs = s.runs()
    if all(r.pays for r in runs):
        return "SD pays at every rate swept (p50 TPOT no worse than target-only at each)"
    rate = lambda v: f"{v:g}"
    return (
        f"SD pays at {runs_text(runs, True, rate)} req/s (p50 TPOT no worse than target-only) and loses at "
        f"{runs_text(runs, False, rate)} req/s"
    )


def _at_most(rate: float) -> str:
    """``rate`` to 3 significant digits, rounded down: a rate printed above the one found may miss the SLO."""
    step = 10.0 ** (math.floor(math.log10(rate)) - 2)
    return f"{math.floor(rate / step + 1e-9) * step:.4g}"


def max_rate_text(search: dict, slo, sd_label: str) -> str:
    """The highest rates meeting the SLO, SD and target-only (:func:`specsim.serve.compare.max_rates`), and
    which side serves more; a side held at its capacity (the most requests/s it completes) says so."""
    found, capacity, attainment = search["max_rate_per_s"], search["capacity_per_s"], search["slo_attainment"]

    def shown(side: str) -> str:
        rate = found[side]
        if rate is None:
            return "never (even at 1e-4 req/s)"
        held = rate * 1.02 > capacity[side]
        return f"{_at_most(rate)} req/s" + (
            " (its capacity: the SLO holds at every rate it keeps up with)" * held
        )

    sd, base = found["sd"], found["target_only"]
    lines = [
        f"highest rate at which {attainment:.0%} of requests meet {slo.describe()} (ms):",
        f"  {sd_label}: " + shown("sd"),
        "  target-only: " + shown("target_only"),
    ]
    if sd is not None and base is not None:
        lines.append(
            f"SD serves {sd / base:.2f}x the rate under this SLO"
            if sd >= base
            else f"target-only serves {base / sd:.2f}x the rate under this SLO: SD does not pay here"
        )
    return "\n".join(lines)


def vllm_measured_text(measured: dict) -> str:
    """The figures a ``vllm bench serve`` result measured, to read beside the simulated ones."""
    if not measured:
        return "vllm bench serve measured: no summary figures in the file"
    return "vllm bench serve measured: " + ", ".join(f"{k} {v:.4g}" for k, v in measured.items())


def decode_phase_text(phases: list[dict | None], served: list[float | None]) -> str | None:
    """The decode-phase speedup (``specsim hardware``'s, same inputs) beside each served TPOT speedup, and
    why they differ; None when there is none to show."""
    if not phases or any(p is None for p in phases):
        return None
    first = phases[0]
    cells = ", ".join(
        f"{p['speedup']:.2f}x at batch {p['batch']}" + ("" if s is None else f" (served {s:.2f}x)")
        for p, s in zip(phases, served)
    )
    return (
        f"decode phase, as `specsim hardware` prices these inputs (gamma {first['gamma']}, context "
        f"{first['context_tokens']}, the SD run's mean decode batch): {cells}; the served TPOT speedup also "
        "counts prefills riding in the steps, queueing and a batch that varies from step to step"
    )
