"""Published serving benchmarks replayed in ``specsim serve``'s simulation (issue 36, published load rows):
the load parses with one-line errors, the served prediction agrees with the decode-phase one where the load
has nothing else in it (one request at a time, a short prompt, long outputs), it is leave-one-source-out, and
``specsim validate`` prints and writes it. Offline and fast."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.validation.load_rows import compare_load_rows, load_rows, served_ratio
from specsim.validation.load_spec import ServedLoad
from specsim.validation.published_set import load_published_set, parse_published_set
from specsim.validation.row_predict import row_model
from specsim.validation.runtime_fit import fit_all, fit_without, load_runtimes, usable_rows

SOURCE = "tomasruiz-vllm-draft-model"


@pytest.fixture(scope="module")
def ps():
    return load_published_set()


def _raw():
    from importlib import resources

    return json.loads((resources.files("specsim") / "data/published_gpu_measurements.json").read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ld: ld.update(rate_per_s=0), r"load.rate_per_s: expected .*> 0"),
        (lambda ld: ld.update(requests=2.5), r"load.requests: expected an integer"),
        (lambda ld: ld.pop("output_tokens"), r"load.output_tokens: missing"),
        (lambda ld: ld.update(where=" "), r"load.where: expected where in the source"),
        (lambda ld: ld.update(turbo=1), r"load: unknown field 'turbo'"),
        (lambda ld: ld.update(max_concurrency=0), r"load.max_concurrency: expected an integer >= 1"),
    ],
)
def test_bad_load_is_one_line_naming_the_field(mutate, message):
    data = copy.deepcopy(_raw())
    row = next(r for r in data["rows"] if "load" in r)
    mutate(row["load"])
    with pytest.raises(SpecsimError, match=message) as err:
        parse_published_set(data, "mine.json")
    assert "\n" not in str(err.value) and "mine.json.rows[" in str(err.value)


def test_every_row_of_the_sweep_carries_its_load(ps):
    rows = load_rows(ps)
    assert {r.source for r in rows} == {SOURCE} and len(rows) == 18
    for r in rows:
        assert r.load.max_concurrency == r.batch and r.load.rate_per_s == r.batch
        assert r.load.requests == max(10 * r.batch, 50) and 140 <= r.load.prompt_tokens <= 155


def test_served_equals_decode_phase_where_the_load_adds_nothing(ps):
    """One request at a time, a 16-token prompt and 2000 output tokens: the simulation's ratio of output
    throughputs and the decode-phase speedup (two implementations of the step costs) agree."""
    row = next(r for r in ps.rows if r.id == "tomasruiz-qwen3-32b-1.7b-k3-c1")
    rt = load_runtimes(ps)["vllm"]
    lone = replace(
        row,
        target_context_tokens=1016.0,
        draft_context_tokens=1016.0,
        load=ServedLoad(4, 1000.0, 1, 16, 2000, "test", 100_000, 100_000),
    )
    assert served_ratio(ps, lone, rt) == pytest.approx(row_model(ps, [lone]).predict(rt)[0], rel=0.015)


def test_prefills_in_the_decode_steps_cost_sd_more_at_high_concurrency(ps):
    """At concurrency 64 SD's verification already fills the compute roof that the target-only step does
    not reach, so the prefills riding along slow SD more: served below the decode phase, more than at 1."""
    results = {r.id: r for r in compare_load_rows(ps, load_runtimes(ps))}
    hi, lo = results["tomasruiz-qwen3-32b-1.7b-k3-c64"], results["tomasruiz-qwen3-32b-1.7b-k3-c1"]
    assert hi.served < hi.decode_phase * 0.9
    assert lo.served / lo.decode_phase > hi.served / hi.decode_phase


def test_load_rows_are_leave_one_source_out(ps):
    runtimes = load_runtimes(ps)
    results = compare_load_rows(ps, runtimes)
    row = next(r for r in ps.rows if r.id == "tomasruiz-qwen3-32b-4b-k3-c16")
    held_out = fit_without(ps, runtimes["vllm"], SOURCE)  # the serving-engine family, fitted without it
    got = next(r for r in results if r.id == row.id)
    assert got.served == pytest.approx(served_ratio(ps, row, held_out), rel=1e-12)
    in_sample = fit_all(ps, runtimes, "t")["vllm"]
    assert served_ratio(ps, row, in_sample) != pytest.approx(got.served, rel=1e-6)


def test_validate_prints_and_writes_the_served_loads(capsys):
    assert main(["validate", "--json", "--no-sweeps"]) == 0
    out = json.loads(capsys.readouterr().out)
    loads = out["load_rows"]
    assert loads["summary"]["rows"] == len(loads["rows"]) == 18
    assert loads["summary"]["median_abs_error"] <= loads["summary"]["decode_phase_median_abs_error"]
    assert all(abs(r["error"]) < 0.5 for r in loads["rows"])
    assert main(["validate", "--no-sweeps"]) == 0
    text = capsys.readouterr().out
    assert "published serving benchmarks" in text and "served: median |err|" in text
    assert main(["validate", "--fit-all", "--json", "--no-sweeps"]) == 0
    assert json.loads(capsys.readouterr().out)["load_rows"]["rows"] == []


def test_served_only_rows_stay_out_of_the_decode_phase_table_fits_and_sweeps(ps):
    """Rows where requests waited for KV cache ran no decode batch of their size: only served."""
    served_only = [r for r in ps.rows if r.served_only]
    assert served_only and all(r.load is not None and r.observable is None for r in served_only)
    assert not set(served_only) & set(usable_rows(ps))
    from specsim.validation.batch_sweeps import published_sweeps

    assert not {r.id for s in published_sweeps(ps) for r in s} & {r.id for r in served_only}
    data = copy.deepcopy(_raw())
    row = next(r for r in data["rows"] if r.get("served_only"))
    del row["load"]
    with pytest.raises(SpecsimError, match=r"served_only: needs the row's load"):
        parse_published_set(data, "mine.json")


def test_served_loads_say_where_sd_stops_paying_within_a_power_of_two(ps):
    """Issue 35's goal for short-context sweeps: the concurrency from which SD stops paying, served, is
    within one power of two of the published one (both sweeps stop inside the published range)."""
    from specsim.validation.load_rows import summarize_load_rows

    stops = summarize_load_rows(compare_load_rows(ps, load_runtimes(ps)))["stop_paying"]
    assert len(stops) == 2
    for s in stops:
        assert s["published_stops_from"] is not None and s["served_stops_from"] is not None
        assert 0.5 <= s["served_stops_from"] / s["published_stops_from"] <= 2.0, s


def test_answers_name_the_served_validation_of_their_band():
    """`hardware`/`recommend` bands: the served benchmarks in the band are counted and their error printed;
    a band with none says nothing of load, and one with served rows only is still "not validated here"
    for the decode phase."""
    from specsim.validation.load_rows import LoadRowResult
    from specsim.validation.regime_error import regime_error

    served = [
        LoadRowResult("a", "s", "p / q, gamma 3", "vllm", 250.0, 128, 1.0, 1.1, 1.3),
        LoadRowResult("b", "s", "p / q, gamma 3", "vllm", 250.0, 256, 0.8, 0.76, 0.7),
        LoadRowResult("c", "s", "p / q, gamma 3", "vllm", 9000.0, 256, 0.8, 0.1, 0.7),
    ]
    e = regime_error("vllm", 200, 1024, results=[], served=served)
    assert not e.validated and e.served_rows == 2
    assert e.served_median_abs_error == pytest.approx((0.1 + 0.05) / 2)
    assert "not validated here" in e.text() and "reproduces 2 published serving benchmark rows" in e.text()
    assert "under load" not in regime_error("vllm", 8, 1024, results=[], served=served).text()
    assert regime_error("llama.cpp", 200, 1024, results=[], served=served).served_rows == 0
