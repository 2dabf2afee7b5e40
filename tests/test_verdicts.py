"""A verdict printed beside a sweep never contradicts the rows it sits beside (property tests over random
sweeps): ``serve --rates``' "SD pays at … and loses at …", ``hardware``'s "speedup<1 at B" cell and its
sentence on the largest batch that fits, and ``recommend``'s fixed-γ note. Each printed verdict is parsed
back into the points it names, and every point is checked against its row."""

import re
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.hardware.batch_limit import StopPaying, paying_range
from specsim.serve.compare import Sweep
from specsim.serve.serve_text import verdict

NICE = [0.01, 0.05, 0.5, 1, 2, 4, 5, 8, 16, 20, 32, 50, 64, 100, 128, 200, 256, 386, 400, 512, 1024]
SPEEDUP = st.floats(0.3, 3.0, allow_nan=False) | st.sampled_from([1.0, 0.999999, 1.000001])


def _sweeps(points=NICE):
    return st.lists(st.sampled_from(points), min_size=1, max_size=10, unique=True).flatmap(
        lambda xs: st.tuples(st.just(sorted(xs)), st.lists(SPEEDUP, min_size=len(xs), max_size=len(xs)))
    )


def _named(text: str, points: list[float], fmt) -> set[float]:
    """The points a list of runs names: 'a', 'a..b' (every point from a to b), 'from a' (a and after),
    joined by ', ' and ' and '."""
    at = {fmt(p): p for p in points}
    out: set[float] = set()
    for part in re.split(r", | and ", text.strip()):
        if part.startswith("from "):
            lo = at[part[5:]]
            out |= {p for p in points if p >= lo}
        elif ".." in part:
            lo, hi = (at[x] for x in part.split(".."))
            out |= {p for p in points if lo <= p <= hi}
        else:
            out.add(at[part])
    return out


def check_serve_verdict(text: str, rates: list[float], speedups: list[float]) -> None:
    pays = {r for r, s in zip(rates, speedups) if s >= 1.0}
    fmt = lambda v: f"{v:g}"
    if text.startswith("SD does not pay at any rate swept"):
        assert not pays, text
        return
    if text.startswith("SD pays at every rate swept"):
        assert pays == set(rates), text
        return
    pattern = r"SD pays at (.+) req/s \(p50 TPOT no worse than target-only\) and loses at (.+) req/s"
    m = re.fullmatch(pattern, text)
    assert m, f"a verdict that names no points: {text!r}"
    assert _named(m[1], rates, fmt) == pays, text
    assert _named(m[2], rates, fmt) == set(rates) - pays, text


@settings(max_examples=300, deadline=None)
@given(_sweeps())
def test_serve_rate_verdict_names_exactly_the_rates_that_pay(sweep):
    rates, speedups = sweep
    rows = tuple(SimpleNamespace(rate_per_s=float(r), tpot_speedup=s) for r, s in zip(rates, speedups))
    first, stop = paying_range(rates, speedups)
    check_serve_verdict(verdict(Sweep(rows, stop, first is not None)), [float(r) for r in rates], speedups)


def test_the_issue_sweep_is_not_called_a_stop_from_200():
    """serve --rates 5,20,50,100,200,400 on the zoo: SD lost at 5 and 20, paid at 50 and 100."""
    rates, speedups = [5, 20, 50, 100, 200, 400], [0.89, 0.98, 1.03, 1.14, 0.88, 0.89]
    rows = tuple(SimpleNamespace(rate_per_s=float(r), tpot_speedup=s) for r, s in zip(rates, speedups))
    first, stop = paying_range(rates, speedups)
    text = verdict(Sweep(rows, stop, first is not None))
    assert text == (
        "SD pays at 50..100 req/s (p50 TPOT no worse than target-only) and loses at 5..20 and from 200 req/s"
    )


def check_hardware_cell(limit: StopPaying, rows: dict[int, float]) -> None:
    """The 'speedup<1 at B' cell names exactly the printed batches (planned and the largest that fits)
    below 1; the sentence's claims hold at the batches it names."""
    cell = limit.cell()
    losing = {b for b, s in rows.items() if s < 1.0}
    if cell == "none":
        assert not losing, cell
    elif cell == "all":
        assert losing == set(rows), cell
    else:
        assert _named(cell, sorted(rows), str) == losing, (cell, rows)
    sentence = limit.sentence() or ""
    fit, at_fit = limit.largest_fitting_batch, limit.speedup_at_largest_fitting
    if "SD still pays at the largest batch that fits" in sentence:
        assert at_fit >= 1.0
    if m := re.search(r"stops paying between B (\d+) \(planned\)", sentence):
        assert rows[int(m[1])] >= 1.0 and at_fit < 1.0 and fit > int(m[1])
    if m := re.search(r"so batch (\d+), from which it stops paying", sentence):
        assert all(s < 1.0 for b, s in rows.items() if b >= int(m[1])) and int(m[1]) > fit


@settings(max_examples=300, deadline=None)
@given(_sweeps([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]), st.integers(0, 2000), SPEEDUP)
def test_hardware_cell_and_sentence_agree_with_the_rows_beside_them(sweep, fit, at_fit):
    batches, speedups = sweep
    planned = [SimpleNamespace(batch_size=b, speedup=s) for b, s in zip(batches, speedups)]
    limit = StopPaying.from_rows("gpu", "M", 1024, planned, fit, at_fit)
    rows = {b: s for b, s in zip(batches, speedups)}
    if fit:
        rows.setdefault(fit, at_fit)
    check_hardware_cell(limit, rows)


def test_never_beside_a_losing_largest_batch_is_gone():
    """'speedup<1 from: never' beside 'largest B that fits: B 386: 0.68x' (issue 51)."""
    planned = [SimpleNamespace(batch_size=b, speedup=s) for b, s in ((1, 1.7), (8, 1.5), (64, 1.1))]
    limit = StopPaying.from_rows("h100-sxm", "M", 1024, planned, 386, 0.68)
    assert limit.cell() == "386" and limit.fits_cell() == "B 386: 0.68x"
    assert "stops paying between B 64 (planned) and the largest batch that fits (B 386" in limit.sentence()


@settings(max_examples=200, deadline=None)
@given(_sweeps([1, 2, 4, 8, 16, 32, 64, 128, 256]), st.sampled_from([1.0, 1.2]))
def test_recommend_fixed_gamma_note_names_every_losing_batch(sweep, threshold):
    from specsim.engines.recommend import fixed_gamma_note

    batches, speedups = sweep
    note = fixed_gamma_note(list(zip(batches, speedups)), 5, threshold)
    losing = {b for b, s in zip(batches, speedups) if s < threshold}
    if note.endswith("to pay at every batch size evaluated"):
        assert not losing
        return
    head = rf"with --speculative-num-steps 5, SD is predicted below {threshold:g}x"
    m = re.fullmatch(rf"{head} at batch (.+): .*", note)
    assert m and _named(m[1], batches, str) == losing, note
