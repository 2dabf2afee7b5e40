"""``specsim validate``: runtime-aware roofline vs every published GPU measurement, leave-one-source-out.

Numpy/scipy only at import (plug-in rule). Text table by default, ``--json`` for machines, ``--plot`` and
``--sweep-plot`` for pictures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.hardware.runtime import load_runtime
from specsim.jsonio import check_outputs, check_writable, dumps_json, write_json_atomic
from specsim.report import format_table
from specsim.validation.batch_sweeps import (
    compare_sweep,
    crossover_grid,
    describe_range,
    describe_sweep_range,
    published_sweeps,
)
from specsim.validation.load_rows import compare_load_rows, summarize_load_rows
from specsim.validation.published_set import load_published_set
from specsim.validation.regime_error import band_summaries, source_summaries
from specsim.validation.runtime_fit import (
    check_runtime_kinds,
    fit_all,
    in_sample,
    leave_one_source_out,
    load_runtimes,
    summarize,
    usable_rows,
)

_DESC = (
    "Predict every row of the published GPU measurement set "
    "(specsim/data/published_gpu_measurements.json: draft-model speculative decoding speedups and ms/token, "
    "each row cited) with the runtime-aware roofline, fitting each runtime's parameters leave-one-source-out "
    "(a source's rows are predicted with parameters fitted on the other sources; a runtime no other source "
    "covers, marked d, is priced at its cited defaults, or in a runtime family at the family's fit on the "
    "other sources), and print predicted vs published with the signed "
    "relative error, beside the textbook formula speedup = tau/(gamma*c + 1), c = draft/target weight bytes, "
    "v = 1. Then every published batch sweep: predicted speedup per batch and the batch range where SD pays, "
    "per device x runtime x context."
)
FIT_COMMAND = "specsim validate --fit-all --write-runtimes specsim/hardware/runtimes"
GRID_DEVICES = ("a100-80gb-sxm", "h100-sxm")
GRID_RUNTIMES = ("gpt-fast", "vllm", "hf-eager")
GRID_CONTEXTS = (1024.0, 8192.0, 32768.0)


def register(sub) -> None:
    """Add ``specsim validate``."""
    p = sub.add_parser(
        "validate", help="predicted vs published GPU speedups (leave-one-source-out)", description=_DESC
    )
    p.add_argument(
        "--data", default=None, help="a published-set JSON of the same form (default: the shipped one)"
    )
    p.add_argument(
        "--runtime",
        action="append",
        default=None,
        metavar="NAME_OR_JSON",
        help="replace a shipped runtime by this file (matched by its name; repeatable)",
    )
    p.add_argument(
        "--fit-all", action="store_true", help="fit on every row instead (in-sample) and print that"
    )
    p.add_argument(
        "--write-runtimes",
        default=None,
        metavar="DIR",
        help="with --fit-all: write the fitted runtime files into DIR",
    )
    p.add_argument("--no-sweeps", action="store_true", help="skip the batch-sweep section")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="PNG", help="predicted vs published, specsim and textbook")
    p.add_argument(
        "--sweep-plot",
        default=None,
        metavar="PNG",
        help="predicted speedup vs batch for every published batch sweep, published points on top",
    )
    p.set_defaults(func=cmd_validate)


def _sweeps(ps, runtimes) -> tuple[list, list]:
    """(comparison per published sweep, where-SD-pays grid per sweep)."""
    comparisons, grids = [], []
    shipped = [load_runtime(n) for n in GRID_RUNTIMES]
    for rows in published_sweeps(ps):
        c = compare_sweep(ps, rows, runtimes[rows[0].runtime], runtimes)
        comparisons.append(c)
        grids.append(crossover_grid(ps, rows, c.alpha, list(GRID_DEVICES), shipped, list(GRID_CONTEXTS)))
    return comparisons, grids


def _overrides(paths: list[str], used: set[str]) -> dict:
    """--runtime files by their runtime's name; SpecsimError for two of one name, or a name no row uses (the
    file would replace nothing)."""
    out = {}
    for path in paths:
        rt = load_runtime(path)
        if rt.name in out:
            raise SpecsimError(f"--runtime {path}: a second file for runtime {rt.name!r}")
        if rt.name not in used:
            raise SpecsimError(
                f"--runtime {path}: runtime {rt.name!r} prices no row of --data (its rows' runtimes: "
                f"{', '.join(sorted(used))})"
            )
        out[rt.name] = rt
    return out


def _cited(ps) -> dict:
    """The sources some row of the data comes from (a --data file may cite more than it holds rows of)."""
    used = {r.source for r in ps.rows}
    return {k: s for k, s in ps.sources.items() if k in used}


def cmd_validate(args: argparse.Namespace) -> int:
    if args.sweep_plot is not None and args.no_sweeps:
        raise SpecsimError("--sweep-plot: draws the batch sweeps, which --no-sweeps leaves out")
    check_outputs((args.plot, "--plot", ".png"), (args.sweep_plot, "--sweep-plot", ".png"))
    if args.write_runtimes is not None:
        if not args.fit_all:
            raise SpecsimError(
                "--write-runtimes: needs --fit-all (it writes the runtimes fitted on every row), got "
                "--write-runtimes without --fit-all"
            )
        if not args.write_runtimes.strip():
            raise SpecsimError(f"--write-runtimes: expected a folder, got {args.write_runtimes!r}")
        check_writable(Path(args.write_runtimes) / "runtime.json", "--write-runtimes")
    ps = load_published_set(args.data)
    if not usable_rows(ps):
        raise SpecsimError(
            f"--data {args.data}: no row can be predicted (expected at least one row with a published value "
            "to compare and the tau it needs)"
        )
    if args.sweep_plot and not published_sweeps(ps):
        raise SpecsimError(f"--sweep-plot: --data {args.data} has no batch sweep to draw")
    runtimes = load_runtimes(ps, _overrides(args.runtime or [], {r.runtime for r in ps.rows}))
    check_runtime_kinds(ps, runtimes)
    if args.fit_all:
        fitted = fit_all(ps, runtimes, FIT_COMMAND)
        if args.write_runtimes is not None:
            for name, rt in fitted.items():
                write_json_atomic(f"{args.write_runtimes}/{name}.json", rt.to_json())
        results = in_sample(ps, fitted)
    else:
        results = leave_one_source_out(ps, runtimes)
    comparisons, grids = ([], []) if args.no_sweeps else _sweeps(ps, runtimes)
    # Served loads are a leave-one-source-out check: in-sample (--fit-all) they would test nothing new.
    loads = [] if args.fit_all else compare_load_rows(ps, runtimes)
    skipped = [r for r in ps.rows if r.observable is None and not r.served_only]  # served ones: below
    if args.plot:
        from specsim.hardware.plots import plot_validation

        plot_validation(results, args.plot)
    if args.sweep_plot and comparisons:
        from specsim.hardware.plots import plot_sweeps

        plot_sweeps(comparisons, args.sweep_plot)
    overall, fitted_only = summarize(results), summarize(results, fitted_only=True)
    if args.json:
        out = {
            "mode": "fit-all (in-sample)" if args.fit_all else "leave-one-source-out",
            "summary": overall.__dict__,
            "summary_fitted_only": None if fitted_only is None else fitted_only.__dict__,
            "batch_bands": band_summaries(results),
            "by_source": source_summaries(results),
            "rows": [r.to_json() for r in results],
            "not_predictable": [{"id": r.id, "reason": r.tau_derivation or "no tau"} for r in skipped],
            "batch_sweeps": [c.to_json() | {"grid": g} for c, g in zip(comparisons, grids)],
            "load_rows": {"rows": [r.to_json() for r in loads], "summary": summarize_load_rows(loads)},
            "sources": {k: s.cite() for k, s in _cited(ps).items()},
        }
        print(dumps_json(out))
        return 0
    print("\n".join(_text(results, overall, fitted_only, skipped, ps, args.fit_all)))
    if comparisons:
        print("\n".join(_sweep_text(comparisons, grids)))
    if loads:
        print("\n".join(_load_text(loads)))
    return 0


def _load_text(loads) -> list[str]:
    s = summarize_load_rows(loads)
    table = format_table(
        ["row", "concurrency", "published", "served", "error", "decode phase", "error"],
        [
            [
                r.id,
                str(r.batch),
                f"{r.published:.3f}",
                f"{r.served:.3f}",
                f"{r.error:+.1%}",
                f"{r.decode_phase:.3f}",
                f"{r.decode_phase_error:+.1%}",
            ]
            for r in loads
        ],
    )
    return [
        "",
        "published serving benchmarks (SD output tokens/s over target-only's; each row's load served in "
        "specsim serve's simulation, runtime fitted without the row's source):",
        table,
        f"served: median |err| {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over "
        f"{s['rows']} rows ({', '.join(s['sources'])}); the decode phase alone: median "
        f"{s['decode_phase_median_abs_error']:.1%}, max {s['decode_phase_max_abs_error']:.1%}",
    ] + [
        f"  {x['sweep']}: SD stops paying from concurrency {_stop(x['published_stops_from'], x)} published, "
        f"{_stop(x['served_stops_from'], x)} served"
        for x in s["stop_paying"]
    ]


def _stop(batch: int | None, sweep: dict) -> str:
    return str(batch) if batch is not None else f"- (still pays at {sweep['largest_concurrency']})"


def _text(results, overall, fitted_only, skipped, ps, fit_all_mode: bool) -> list[str]:
    mode = "fitted on every row (in-sample)" if fit_all_mode else "leave-one-source-out"
    n = len({r.source for r in results})
    sources = f"{n} source{'s' if n != 1 else ''}"
    lines = [f"published GPU measurements: {len(results)} predictable rows from {sources} ({mode})"]
    rows = [
        [
            r.id + (" d" if r.at_defaults else ""),
            r.device,
            r.runtime,
            f"{r.batch}",
            f"{r.context_tokens:g}",
            r.observable,
            f"{r.measured:.3f}",
            f"{r.predicted:.3f}",
            f"{r.error:+.1%}",
            f"{r.textbook:.3f}",
            f"{r.textbook_error:+.1%}",
        ]
        for r in results
    ]
    lines.append(
        format_table(
            [
                "row",
                "device",
                "runtime",
                "batch",
                "context",
                "observable",
                "published",
                "specsim",
                "error",
                "textbook",
                "error",
            ],
            rows,
        )
    )
    lines.append(
        f"specsim : median |err| {overall.median_abs_error:.1%}, max {overall.max_abs_error:.1%} "
        f"over all {overall.rows} rows"
    )
    lines.append(
        f"textbook: median |err| {overall.textbook_median_abs_error:.1%}, max "
        f"{overall.textbook_max_abs_error:.1%}"
    )
    for band in band_summaries(results):
        if band["rows"]:
            lines.append(
                f"  {band['batch_band']}: median |err| {band['median_abs_error']:.1%}, max "
                f"{band['max_abs_error']:.1%} over {band['rows']} rows from {len(band['sources'])} sources "
                f"({', '.join(band['sources'])})"
            )
    legend = "" if fit_all_mode else " (d: no other source has rows of its runtime)"
    lines.append(f"  by source{legend}:")
    for src in source_summaries(results):
        runtimes = ", ".join(src["runtimes"]) + (", d" if src["at_defaults"] and not fit_all_mode else "")
        rows = f"{src['rows']} row{'s' if src['rows'] != 1 else ''}"
        lines.append(
            f"    {src['source']} ({rows}, {runtimes}): median |err| "
            f"{src['median_abs_error']:.1%}, max {src['max_abs_error']:.1%}"
        )
    if not fit_all_mode and fitted_only is not None and fitted_only.rows != overall.rows:
        lines.append(
            f"rows whose runtime another source covers ({fitted_only.rows}): specsim median "
            f"{fitted_only.median_abs_error:.1%}, max {fitted_only.max_abs_error:.1%}; textbook median "
            f"{fitted_only.textbook_median_abs_error:.1%}, max {fitted_only.textbook_max_abs_error:.1%}"
        )
    if not fit_all_mode and any(r.at_defaults for r in results):
        lines.append(
            "d: no other source has rows of the row's runtime, so it is priced at the runtime's cited "
            "defaults, or, for a member of a runtime family (defaults_from), at the family's fit on the "
            "other sources (nothing fitted on its own source)"
        )
    for r in skipped:
        lines.append(f"not predictable: {r.id} ({r.tau_derivation or 'no tau'})")
    lines.append("sources:")
    lines += [f"  {k}: {s.cite()} [{s.where}]" for k, s in _cited(ps).items()]
    return lines


def _sweep_text(comparisons, grids) -> list[str]:
    lines = [
        "",
        "published batch sweeps (runtime fitted without the sweep's source; tau calibrated on the smallest "
        "batch, carried to other gamma i.i.d.):",
    ]
    for c, grid in zip(comparisons, grids):
        lines.append(
            f"  {c.label} on {c.gpus}x {c.device} ({c.runtime}), context {c.context_tokens:g}, "
            f"alpha {c.alpha:.2f}"
        )
        lines.append(
            format_table(
                ["batch", "gamma", "tau", "tau from", "published", "specsim", "error"],
                [
                    [
                        str(p.batch),
                        f"{p.gamma:g}",
                        f"{p.tau:.2f}",
                        p.tau_note,
                        f"{p.published:.2f}",
                        f"{p.predicted:.2f}",
                        f"{p.error:+.1%}",
                    ]
                    for p in c.points
                ],
            )
        )
        published = (
            f"below 1 at batch {', '.join(map(str, c.published_below_one))}"
            if c.published_below_one
            else f"above 1 at every published batch (up to {max(p.batch for p in c.points)})"
        )
        lines.append(
            f"    where SD pays: published: {published}; specsim (best gamma): batches "
            f"{describe_sweep_range(c)}"
        )
        lines.append(f"    {_crossover_text(c)}")
        lines.append(
            "    same pair and tau with the shipped runtimes, batches where SD pays (best gamma; a..b+: "
            "still pays at b, the largest batch that fits):"
        )
        table = [
            [g["device"]]
            + [
                describe_range(x["pays_from"], x["stops_from"], x["max_fit_batch"])
                for x in grid
                if x["device"] == g["device"] and x["context_tokens"] == g["context_tokens"]
            ]
            + [f"{g['context_tokens']:g}"]
            for g in grid
            if g["runtime"] == GRID_RUNTIMES[0]
        ]
        lines.append(format_table(["device", *GRID_RUNTIMES, "context"], table))
    ok = sum(c.crossover_ok for c in comparisons)
    lines.append(
        f"crossover (where SD stops paying at the sweep's gamma): {ok} of {len(comparisons)} sweeps within a "
        "factor 1.5 of the published one, or at or beyond the largest published batch where it never stops"
    )
    return lines


def _crossover_text(c) -> str:
    pub = (
        f"batch {c.published_crossover:.1f} (interpolated)"
        if c.published_crossover is not None
        else f"never up to batch {c.largest_batch}"
    )
    pred = f"batch {c.predicted_crossover:.1f}" if c.predicted_crossover is not None else "never (up to 4096)"
    verdict = "ok" if c.crossover_ok else "MISSED"
    return f"SD stops paying at gamma {c.points[-1].gamma:g}: published {pub}, specsim {pred} ({verdict})"
