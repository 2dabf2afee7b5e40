"""The shipped IbED profile reproduces the paper's Table 1b from Table 1a within ±0.01."""

import json

import pytest

from specsim.predict.prediction import predict
from specsim.profiles import load_profile, shipped_profiles
from specsim.profiles.ibed_tables import build_profile, read_table


def test_committed_json_matches_builder():
    committed = json.loads(shipped_profiles()["ibed-llava1.5-7b-68m"].read_text())
    assert committed == build_profile().to_json()


def test_table_1b_reproduced_from_table_1a():
    datasets, table = read_table()
    rows = predict(load_profile("ibed-llava1.5-7b-68m"), 5, methods=["M", "T"])
    got = {(r.method, r.scenario): r.speedup for r in rows}
    assert len(got) == 16
    for method in ("M", "T"):
        for dataset, expected in zip(datasets, table[("1b", "speedup", method)]):
            assert got[(method, dataset)] == pytest.approx(expected, abs=0.01), (method, dataset)
            assert not any(r.extrapolated for r in rows)


def test_every_method_and_dataset_present():
    datasets, table = read_table()
    methods = {m for (_, metric, m) in table if metric == "tau"}
    prof = load_profile()
    assert {(a.method, a.scenario) for a in prof.acceptance} == {(m, d) for m in methods for d in datasets}
    assert {a.images_per_prompt for a in prof.acceptance} == {1, 2, 5}


def test_other_gamma_is_not_invented():
    rows = predict(load_profile(), 3, methods=["M"], scenario="ChartQA")
    assert rows[0].speedup is None and rows[0].extrapolated
    assert "Tv(gamma) unknown" in rows[0].note
    textbook = predict(load_profile(), 3, methods=["M"], scenario="ChartQA", textbook=True)[0]
    assert textbook.v == 1.0 and textbook.speedup is not None


def test_published_set_ibed_speedups_are_one_block_cost():
    """The published set's IbED rows: tau / speedup is 1.313 on every row, to the speedup's 2-decimal rounding
    (a computed figure, not a wall-clock time per task), and each row's flags say so."""
    from specsim.validation.published_set import load_published_set

    rows = [r for r in load_published_set().rows if r.source == "ibed"]
    assert len(rows) == 16
    for r in rows:
        rounding = 0.005 / r.speedup  # the relative half-width of a speedup printed to 2 decimals
        assert r.tau / r.speedup == pytest.approx(1.313, rel=rounding + 1e-3), r.id
        assert any("tau / 1.313" in f for f in r.flags), r.id
