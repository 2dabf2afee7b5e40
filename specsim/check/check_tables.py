"""What ``specsim check`` prints: per-row errors, the summary judged against the measurement noise, and
tables; for sampled rows (``--temperature T``) the share inside their prediction intervals
(:func:`coverage`)."""

from __future__ import annotations

import numpy as np

from specsim.check.comparison import BLOCK_TERM, TARGET_TERM, TERMS, relative_error
from specsim.check.sampled import CI
from specsim.errors import SpecsimError
from specsim.jsonio import few
from specsim.profile_format import CheckRow
from specsim.report import fmt, format_table

# A row's measured speedup is precise enough to judge a prediction when its 95% half-width is this small.
HALFWIDTH_GOAL = 0.015
COVERAGE_GOAL = 0.90  # share of sampled rows whose measurement lies inside its 95% prediction interval


def error_rows(rows: list[CheckRow]) -> list[dict]:
    """Per row: γ, τ and speedups with relative errors and half-widths (JSON-ready)."""
    out = []
    for r in rows:
        d = {
            "method": r.method,
            "scenario": r.scenario,
            "gamma": r.gamma,
            "draft": draft_name(r),
            "tau_predicted": r.tau_predicted,
            "tau_measured": r.tau_measured,
            "tau_rel_err": relative_error(r.tau_predicted, r.tau_measured),
            "speedup_predicted": r.speedup_predicted,
            "speedup_measured": r.speedup_measured,
            "speedup_rel_err": relative_error(r.speedup_predicted, r.speedup_measured),
            "speedup_halfwidth": r.speedup_halfwidth,
            "speedup_textbook": r.speedup_textbook,
            "textbook_rel_err": None
            if r.speedup_textbook is None
            else relative_error(r.speedup_textbook, r.speedup_measured),
            "request_speedup_predicted": r.request_speedup_predicted,
            "request_speedup_measured": r.request_speedup_measured,
            "request_rel_err": None
            if r.request_speedup_predicted is None or r.request_speedup_measured is None
            else relative_error(r.request_speedup_predicted, r.request_speedup_measured),
            "request_speedup_halfwidth": r.request_speedup_halfwidth,
            "rounds": r.rounds,
        }
        out.append(d)
    return out


def draft_name(row: CheckRow) -> str:
    """How a row's run is named in tables: its γ, or its tree / policy ("tree:4,2,1")."""
    return row.draft or str(row.gamma)


def _draft_head(rows: list[CheckRow]) -> str:
    return "gamma" if all(r.draft is None for r in rows) else "gamma / draft"


def _stats(values) -> tuple[float, float] | None:
    a = np.abs([v for v in values if v is not None])
    return (float(np.median(a)), float(a.max())) if a.size else None


def summary(rows: list[CheckRow]) -> dict:
    """Median and max |relative error| of the predicted (decode phase and request) and textbook speedups,
    and how many rows' measured speedup reached the half-width goal."""
    errs = error_rows(rows)
    if not errs:
        raise SpecsimError("check: no rows to summarise")
    med, mx = _stats(e["speedup_rel_err"] for e in errs)
    out = {"rows": len(errs), "median_abs_rel_err": med, "max_abs_rel_err": mx}
    book = _stats(e["textbook_rel_err"] for e in errs)
    if book:
        out |= {"textbook_median_abs_rel_err": book[0], "textbook_max_abs_rel_err": book[1]}
    req = _stats(e["request_rel_err"] for e in errs)
    if req:
        out |= {"request_median_abs_rel_err": req[0], "request_max_abs_rel_err": req[1]}
    kinds = {}
    for e in errs:
        kinds.setdefault((e["draft"].split(":")[0] if ":" in e["draft"] else "chain"), []).append(
            e["speedup_rel_err"]
        )
    if len(kinds) > 1:
        out["by_kind"] = {
            k: {
                "rows": len(v),
                "median_abs_rel_err": float(np.median(np.abs(v))),
                "max_abs_rel_err": float(np.max(np.abs(v))),
            }
            for k, v in kinds.items()
        }
    hw = [e["speedup_halfwidth"] for e in errs]
    if any(h is not None for h in hw):
        out |= {
            "halfwidth_goal": HALFWIDTH_GOAL,
            "rows_within_halfwidth_goal": sum(h is not None and h <= HALFWIDTH_GOAL for h in hw),
            "rows_error_within_noise": sum(
                h is not None and abs(e["speedup_rel_err"]) <= h for h, e in zip(hw, errs)
            ),
        }
    return out


def _pct(x: float | None, signed: bool = True) -> str:
    return "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")


def check_table(rows: list[CheckRow]) -> str:
    """The predicted-vs-measured table: τ, decode-phase speedup with its measured half-width, the request
    speedup, and the textbook's error."""
    scen = len({r.scenario for r in rows}) > 1
    table = []
    for e, r in zip(error_rows(rows), rows):
        table.append(
            ([r.scenario] if scen else [])
            + [
                r.method,
                draft_name(r),
                fmt(r.tau_predicted),
                fmt(r.tau_measured),
                _pct(e["tau_rel_err"]),
                fmt(r.speedup_predicted),
                fmt(r.speedup_measured),
                "±" + _pct(r.speedup_halfwidth, False),
                _pct(e["speedup_rel_err"]),
                fmt(r.request_speedup_predicted),
                fmt(r.request_speedup_measured),
                _pct(e["request_rel_err"]),
                fmt(r.speedup_textbook),
                _pct(e["textbook_rel_err"]),
            ]
        )
    heads = (["scenario"] if scen else []) + [
        "method",
        _draft_head(rows),
        "tau pred",
        "meas",
        "err",
        "speedup pred",
        "meas",
        "95% hw",
        "err",
        "request pred",
        "meas",
        "err",
        "textbook",
        "err",
    ]
    return format_table(heads, table, indent="") + "\n" + summary_line(rows)


def summary_line(rows: list[CheckRow]) -> str:
    s = summary(rows)
    line = f"decode-phase speedup: median |err| {s['median_abs_rel_err']:.1%}, max {s['max_abs_rel_err']:.1%}"
    if "request_median_abs_rel_err" in s:
        line += (
            f"; request: median {s['request_median_abs_rel_err']:.1%}, max {s['request_max_abs_rel_err']:.1%}"
        )
    if "textbook_median_abs_rel_err" in s:
        line += (
            f"; textbook (v=1, iid alpha): median {s['textbook_median_abs_rel_err']:.1%}, "
            f"max {s['textbook_max_abs_rel_err']:.1%}"
        )
    if "by_kind" in s:
        line += "\nby kind: " + "; ".join(
            f"{k}: median {v['median_abs_rel_err']:.1%}, max {v['max_abs_rel_err']:.1%} ({v['rows']} rows)"
            for k, v in s["by_kind"].items()
        )
    if "rows_within_halfwidth_goal" in s:
        line += (
            f"\nmeasured half-width <= {HALFWIDTH_GOAL:.1%}: "
            f"{s['rows_within_halfwidth_goal']}/{s['rows']} rows; "
            f"error within the measurement's half-width: {s['rows_error_within_noise']}/{s['rows']} rows"
        )
    return line


def rounds_note(rows: list[CheckRow], rounds: int, seconds: float, goal: float) -> str:
    """What reaching ``goal`` (relative half-width) on every row would take: a half-width shrinks as 1/√R
    at the same noise, so R·(h/goal)² rounds for the widest row h; "" when every row is within it."""
    widths = [r.speedup_halfwidth for r in rows if r.speedup_halfwidth is not None]
    widest = max((w for w in widths if np.isfinite(w)), default=None)
    if rounds < 2 or widest is None or widest <= goal:
        return ""
    need = int(np.ceil(rounds * (widest / goal) ** 2))
    return (
        f"widest half-width {widest:.1%} after {rounds} rounds: every row within {goal:.1%} needs about "
        f"{need} rounds at this noise (~{seconds / rounds * need / 60:.0f} min; --max-rounds, --max-minutes)"
    )


def terms_table(rows: list[CheckRow]) -> str:
    """Per row: predicted vs measured ms per block of each term (draft, verify, overhead; the whole block
    where the engine reports no split) and per target-only step (the speedup's denominator), so a miss
    names its term."""
    scen = len({r.scenario for r in rows}) > 1
    have = {t for r in rows for t in (r.terms_ms_per_block or {})}
    split = TERMS if have & set(TERMS) else ()
    terms = (*split, *((BLOCK_TERM,) if BLOCK_TERM in have else ()), TARGET_TERM)
    heads = (
        _batch_cell(rows)
        + (["scenario"] if scen else [])
        + ["method", _draft_head(rows)]
        + [f"{t.replace('_', ' ')} {k}" for t in terms for k in ("pred", "meas", "err")]
    )
    table = []
    for r in rows:
        if not r.terms_ms_per_block:
            continue
        cells = _batch_cell(rows, r) + ([r.scenario] if scen else []) + [r.method, draft_name(r)]
        for t in terms:
            pair = r.terms_ms_per_block.get(t)
            if pair is None:
                cells += ["-", "-", "-"]
                continue
            err = relative_error(pair["predicted"], pair["measured"]) if pair["measured"] > 0 else None
            cells += [fmt(pair["predicted"], 3), fmt(pair["measured"], 3), _pct(err)]
        table.append(cells)
    if not table:
        return ""
    return "ms per block after the first, and per target-only step (predicted vs measured):\n" + format_table(
        heads, table, indent=""
    )


def _batch_cell(rows: list[CheckRow], row: CheckRow | None = None) -> list[str]:
    """The batch column of a table whose rows include batched checks: its head, or ``row``'s cell."""
    if all(r.batch is None for r in rows):
        return []
    return ["batch"] if row is None else [str(row.batch or 1)]


def batch_table(rows: list[CheckRow]) -> str:
    """Batched rows: predicted vs measured τ per running request and decode-phase speedup over batched
    target-only decoding, with the measured half-width, by batch size, scenario, method and γ."""
    body = [
        [
            str(r.batch),
            r.scenario,
            r.method,
            str(r.gamma),
            fmt(r.tau_predicted),
            fmt(r.tau_measured),
            fmt(r.speedup_predicted),
            fmt(r.speedup_measured),
            "±" + _pct(r.speedup_halfwidth, False),
            _pct(relative_error(r.speedup_predicted, r.speedup_measured)),
        ]
        for r in rows
    ]
    heads = [
        "batch",
        "scenario",
        "method",
        "gamma",
        "tau pred",
        "meas",
        "speedup pred",
        "meas",
        "95% hw",
        "err",
    ]
    table = format_table(heads, body, indent="")
    by_note: dict[str, list[str]] = {}
    for r in rows:  # the rows' caveats, as --json carries them in each row's notes
        if r.notes:
            by_note.setdefault(r.notes, []).append(f"batch {r.batch} {r.scenario}/{r.method} gamma {r.gamma}")
    return "\n".join([table, *(f"note: {n} ({few(where)})" for n, where in by_note.items())])


# --------------------------------------------------------------------------- sampled rows: coverage
def inside(value: float, interval) -> bool:
    return interval is not None and interval[0] <= value <= interval[1]


def coverage(rows: list[CheckRow]) -> dict:
    """How many sampled rows' measured τ and speedup lie inside their 95% prediction intervals
    (goal ≥ 90%)."""
    rows = [r for r in rows if r.tau_interval is not None and r.speedup_interval is not None]
    if not rows:
        raise SpecsimError("check: no sampled rows with prediction intervals")
    tau = sum(inside(r.tau_measured, r.tau_interval) for r in rows)
    spd = sum(inside(r.speedup_measured, r.speedup_interval) for r in rows)
    both = sum(
        inside(r.tau_measured, r.tau_interval) and inside(r.speedup_measured, r.speedup_interval)
        for r in rows
    )
    n = len(rows)
    return {
        "rows": n,
        "tau_inside": tau,
        "speedup_inside": spd,
        "both_inside": both,
        "tau_coverage": tau / n,
        "speedup_coverage": spd / n,
        "both_coverage": both / n,
        "goal": COVERAGE_GOAL,
        "ci": CI,
    }


def _span(interval) -> str:
    return "-" if interval is None else f"{interval[0]:.3f}..{interval[1]:.3f}"


def sampled_table(rows: list[CheckRow]) -> str:
    """Per row: τ and decode-phase speedup predicted (Monte Carlo mean, 95% interval) vs measured and
    whether the measurement is inside; the request speedup and the textbook; then the coverage line."""
    scen = len({r.scenario for r in rows}) > 1
    mark = lambda v, iv: "yes" if inside(v, iv) else "NO"  # noqa: E731
    table = [
        ([r.scenario] if scen else [])
        + [
            r.method,
            str(r.gamma),
            fmt(r.tau_predicted),
            _span(r.tau_interval),
            fmt(r.tau_measured),
            mark(r.tau_measured, r.tau_interval),
            fmt(r.speedup_predicted),
            _span(r.speedup_interval),
            fmt(r.speedup_measured),
            mark(r.speedup_measured, r.speedup_interval),
            fmt(r.request_speedup_predicted),
            fmt(r.request_speedup_measured),
            fmt(r.speedup_textbook),
        ]
        for r in rows
    ]
    heads = (["scenario"] if scen else []) + [
        "method",
        "gamma",
        "tau pred",
        "95% interval",
        "meas",
        "in",
        "speedup pred",
        "95% interval",
        "meas",
        "in",
        "request pred",
        "meas",
        "textbook",
    ]
    return format_table(heads, table, indent="") + "\n" + coverage_line(rows)


def coverage_line(rows: list[CheckRow]) -> str:
    c = coverage(rows)
    share = lambda k: f"{c[k + '_inside']}/{c['rows']} ({c[k + '_coverage']:.0%})"  # noqa: E731
    return (
        f"measured inside the {CI:.0%} prediction interval: tau {share('tau')}, speedup {share('speedup')}, "
        f"both {share('both')} (goal >= {COVERAGE_GOAL:.0%})"
    )
