"""`specsim validate`'s summaries by batch band and by source, checked by hand."""

from types import SimpleNamespace

import pytest

from specsim.validation.regime_error import band_summaries, source_summaries


def _row(source, runtime, batch, error, at_defaults=False):
    return SimpleNamespace(source=source, runtime=runtime, batch=batch, error=error, at_defaults=at_defaults)


RESULTS = [
    _row("a", "vllm", 1, 0.02),
    _row("a", "vllm", 32, -0.10),
    _row("a", "sglang", 64, 0.04),
    _row("b", "hf-eager", 1, -0.30, at_defaults=True),
    _row("b", "hf-eager", 1, -0.34, at_defaults=True),
    _row("c", "llama.cpp", 16, 0.06, at_defaults=True),
    _row("c", "llama.cpp", 1, 0.01),
]


def test_source_summaries_by_hand():
    got = source_summaries(RESULTS)
    assert [s["source"] for s in got] == ["a", "b", "c"]  # most rows first, then by name
    a, b, c = got
    assert a["rows"] == 3 and a["runtimes"] == ["sglang", "vllm"] and not a["at_defaults"]
    assert a["median_abs_error"] == pytest.approx(0.04) and a["max_abs_error"] == pytest.approx(0.10)
    assert b["at_defaults"] and b["median_abs_error"] == pytest.approx(0.32)
    assert not c["at_defaults"]  # one of its rows is fitted
    assert sum(s["rows"] for s in got) == len(RESULTS)


def test_band_summaries_by_hand():
    bands = {b["batch_band"]: b for b in band_summaries(RESULTS)}
    one = bands["batch 1"]
    assert one["rows"] == 4 and one["sources"] == ["a", "b", "c"]
    assert one["median_abs_error"] == pytest.approx((0.02 + 0.30) / 2) and one["max_abs_error"] == 0.34
    wide = bands["batch 16..127"]
    assert wide["rows"] == 3 and wide["max_abs_error"] == pytest.approx(0.10)
    assert bands["batch >= 128"]["rows"] == 0 and bands["batch >= 128"]["median_abs_error"] is None
