"""``specsim validate``: runtime-aware roofline vs every published GPU measurement, leave-one-source-out.

Numpy/scipy only at import (plug-in rule). Text table by default, ``--json`` for machines, ``--plot``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specsim.hardware.published_set import load_published_set
from specsim.hardware.runtime import load_runtime
from specsim.hardware.validate import (
    check_runtime_kinds,
    fit_all,
    leave_one_source_out,
    load_runtimes,
    summarize,
)
from specsim.jsonio import check_writable, dumps_json, write_json_atomic
from specsim.report import format_table

_DESC = ("Predict every row of the published GPU measurement set (specsim/data/published_gpu_measurements.json: "
         "draft-model speculative decoding speedups and ms/token, each row cited) with the runtime-aware roofline, "
         "fitting each runtime's parameters leave-one-source-out, and print predicted vs published with the signed "
         "relative error, beside the textbook formula speedup = tau/(gamma*c + 1), c = draft/target weight bytes, "
         "v = 1. Rows whose runtime no other source covers are marked * (fitted on their own source).")
FIT_COMMAND = "specsim validate --fit-all --write-runtimes specsim/hardware/runtimes"


def register(sub, calibrate_sub) -> None:
    """Add ``specsim validate``."""
    p = sub.add_parser("validate", help="predicted vs published GPU speedups (leave-one-source-out)",
                       description=_DESC)
    p.add_argument("--data", default=None, help="a published-set JSON of the same form (default: the shipped one)")
    p.add_argument("--runtime", action="append", default=None, metavar="NAME_OR_JSON",
                   help="replace a shipped runtime by this file (matched by its name; repeatable)")
    p.add_argument("--fit-all", action="store_true", help="fit on every row instead (in-sample) and print that")
    p.add_argument("--write-runtimes", default=None, metavar="DIR",
                   help="with --fit-all: write the fitted runtime files into DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="PNG", help="predicted vs published, specsim and textbook")
    p.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_writable(args.plot, "--plot")
    if args.write_runtimes is not None:
        check_writable(Path(args.write_runtimes) / "runtime.json", "--write-runtimes")
    ps = load_published_set(args.data)
    overrides = {rt.name: rt for rt in (load_runtime(x) for x in args.runtime or [])}
    runtimes = load_runtimes(ps, overrides)
    check_runtime_kinds(ps, runtimes)
    if args.fit_all:
        fitted = fit_all(ps, runtimes, FIT_COMMAND)
        if args.write_runtimes:
            for name, rt in fitted.items():
                write_json_atomic(f"{args.write_runtimes}/{name}.json", rt.to_json())
        from specsim.hardware.validate import _result

        usable = [r for r in ps.rows if r.observable is not None]
        results = [_result(ps, r, fitted[r.runtime], True) for r in usable]
    else:
        results = leave_one_source_out(ps, runtimes)
    skipped = [r for r in ps.rows if r.observable is None]
    if args.plot:
        from specsim.hardware.plots import plot_validation

        plot_validation(results, args.plot)
    overall, held = summarize(results), summarize(results, held_out_only=True)
    if args.json:
        out = {"mode": "fit-all (in-sample)" if args.fit_all else "leave-one-source-out",
               "summary": overall.__dict__, "summary_held_out_only": None if held is None else held.__dict__,
               "rows": [r.to_json() for r in results],
               "not_predictable": [{"id": r.id, "reason": r.tau_derivation or "no tau"} for r in skipped],
               "sources": {k: s.cite() for k, s in ps.sources.items()}}
        print(dumps_json(out))
        return 0
    print("\n".join(_text(results, overall, held, skipped, ps, args.fit_all)))
    return 0


def _text(results, overall, held, skipped, ps, fit_all_mode: bool) -> list[str]:
    mode = "fitted on every row (in-sample)" if fit_all_mode else "leave-one-source-out"
    lines = [f"published GPU measurements: {len(results)} predictable rows from {len(ps.sources)} sources ({mode})"]
    rows = [[r.id + ("*" if r.in_source and not fit_all_mode else ""), r.device, r.runtime, r.observable,
             f"{r.measured:.3f}", f"{r.predicted:.3f}", f"{r.error:+.1%}", f"{r.textbook:.3f}",
             f"{r.textbook_error:+.1%}"] for r in results]
    lines.append(format_table(["row", "device", "runtime", "observable", "published", "specsim", "error",
                               "textbook", "error"], rows))
    lines.append(f"specsim : median |err| {overall.median_abs_error:.1%}, max {overall.max_abs_error:.1%} "
                 f"over {overall.rows} rows")
    lines.append(f"textbook: median |err| {overall.textbook_median_abs_error:.1%}, max "
                 f"{overall.textbook_max_abs_error:.1%}")
    if held is not None and held.rows != overall.rows and not fit_all_mode:
        lines.append(f"held-out rows only (runtime covered by another source): specsim median "
                     f"{held.median_abs_error:.1%}, max {held.max_abs_error:.1%} over {held.rows} rows; textbook "
                     f"median {held.textbook_median_abs_error:.1%}, max {held.textbook_max_abs_error:.1%}")
    if not fit_all_mode and any(r.in_source for r in results):
        lines.append("* the row's runtime appears in no other source: its parameters come from the runtime file, "
                     "which was fitted on this source (not a held-out prediction)")
    for r in skipped:
        lines.append(f"not predictable: {r.id} ({r.tau_derivation or 'no tau'})")
    lines.append("sources:")
    lines += [f"  {k}: {s.cite()} [{s.where}]" for k, s in ps.sources.items()]
    return lines
