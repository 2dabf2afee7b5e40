"""Seeded fuzzing of issue 51's hostile causes: request rates and counts at and past their bounds, SLO
searches, traces late in time or with a bad line, ``vllm bench serve`` results with hostile rates and
burstiness, serving-check percentiles out of order, flags that apply only with another, and calibrate's and
check's flags that could only fail after models load.

Invariant (:func:`tests.test_fuzz_inputs.check_run`), plus what each answer must satisfy when it exits 0:
positive finite latencies, a busy fraction <= 1, a max rate no higher than the server's capacity. Fixed
seeds: a failure replays.
"""

import json
import random

import pytest

from specsim.profiles import shipped_profiles
from tests.test_fuzz_inputs import check_run

_RATES = ["1e-300", "5e-324", "1e-7", "1e-6", "3e-6", "0.01", "2", "40", "1e6", "1e7", "0", "-1", "nan"]
_BASE = ["serve", "--alpha", "0.7", "--output-tokens", "16", "--prompt-tokens", "64", "--no-progress"]


def _run_json(capsys, argv):
    """check_run on ``argv + --json``; the parsed output when it exits 0, else None."""
    from specsim.cli.main import main

    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code != 0:
        assert code == 2 and err.count("\n") == 1 and err.startswith("specsim: error: ") and out == "", err
        return None
    return json.loads(out)


def _sane(metrics: dict) -> None:
    assert 0 < metrics["duration_s"] <= 2e9 and metrics["busy_fraction"] <= 1.0, metrics
    for key in ("ttft_ms", "e2e_ms"):
        assert metrics[key]["p50"] > 0, (key, metrics[key])


@pytest.mark.parametrize("seed", [0, 1])
def test_rates_and_request_counts(seed, capsys):
    rng = random.Random(5100 + seed)
    codes = []
    for _ in range(12):
        requests = rng.choice(["3", "20", "999", "1001", "5000"])
        argv = [*_BASE, "--requests", requests, "--rate", rng.choice(_RATES)]
        out = _run_json(capsys, argv)
        codes.append(out is not None)
        if out is not None:
            for side in ("sd", "target_only"):
                _sane(out["comparison"][side])
    assert any(codes) and not all(codes)


@pytest.mark.parametrize("seed", [0])
def test_max_rate_searches(seed, capsys):
    rng = random.Random(5200 + seed)
    for _ in range(4):
        slo = rng.choice(["tpot=50", "tpot=5", "ttft=300", "e2e=100000", "tpot=1e8", "ttft=1"])
        extra = rng.choice([[], ["--slo-attainment", rng.choice(["0.5", "1", "0.99"])]])
        out = _run_json(capsys, [*_BASE, "--requests", "40", "--slo", slo, "--max-rate", *extra])
        assert out is not None, slo
        for side in ("sd", "target_only"):
            found, capacity = out["max_rate_per_s"][side], out["capacity_per_s"][side]
            assert found is None or 1e-4 <= found <= capacity < 1e6, (slo, side, found, capacity)


_BAD_LINES = [
    '{"arrival_s": 2e9, "prompt_tokens": 1, "output_tokens": 1}',
    "{",
    "\xff",
    '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}',
    '{"arrival_s": 1, "arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}',
]


def _trace_lines(rng: random.Random) -> list[str]:
    start = rng.choice([0.0, 0.5, 1e6, 1e9 - 5, 1e9, 999999999.123])
    t, lines = start, []
    for _ in range(rng.randint(1, 6)):
        request = {"arrival_s": t, "prompt_tokens": rng.randint(0, 300), "images": rng.randint(0, 2)}
        lines.append(json.dumps(request | {"output_tokens": rng.randint(1, 40)}))
        t = min(t + rng.choice([0.0, 1e-7, 0.01, 0.3]), 1e9)
    if rng.random() < 0.4:
        bad = rng.choice(_BAD_LINES)
        lines.insert(rng.randrange(len(lines) + 1), bad)
    return lines


@pytest.mark.parametrize("seed", [0, 1])
def test_traces_late_in_time_or_with_a_bad_line(seed, tmp_path, capsys):
    rng = random.Random(5300 + seed)
    codes = []
    for i in range(10):
        path = tmp_path / f"t{i}.jsonl"
        path.write_text("\n".join(_trace_lines(rng)) + "\n", encoding="utf-8", errors="surrogateescape")
        out = _run_json(capsys, [*_BASE[:3], "--trace", str(path)])
        codes.append(out is not None)
        if out is not None:
            for side in ("sd", "target_only"):
                _sane(out["comparison"][side])
    assert any(codes)


_VLLM_VALUES = {
    "request_rate": [..., "inf", "Infinity", float("-inf"), float("nan"), 0, -3, 1e-300, 1e-7, 2.0, "x"],
    "burstiness": [..., 1.0, 1e-300, 0, -1, 1e4, 0.5, float("nan"), "y"],
    "p99_ttft_ms": [..., 1.0, 1000.0, float("inf")],
}

_VLLM_GOOD = {"request_rate": 2.0, "burstiness": 1.0, "p99_ttft_ms": 1000.0}


@pytest.mark.parametrize("seed", [0, 1])
def test_vllm_results_with_hostile_rates(seed, tmp_path, capsys):
    rng = random.Random(5400 + seed)
    codes = []
    for i in range(12):
        body = {"input_lens": [50, 80, 20], "output_lens": [8, 16, 4], "median_ttft_ms": 50.0}
        for key, values in _VLLM_VALUES.items():
            value = rng.choice(values) if i else _VLLM_GOOD[key]  # one body the command line would take
            if value is not ...:
                body[key] = value
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(body))
        out = _run_json(capsys, [*_BASE[:3], "--trace", str(path)])
        codes.append(out is not None)
        rate = body.get("request_rate", ...)
        if out is not None:  # accepted only with a rate and burstiness the command line would take
            assert rate in ("inf", "Infinity") or (isinstance(rate, float) and 1e-6 <= rate <= 1e6), body
            assert 1e-3 <= body.get("burstiness", 1.0) <= 1e3, body
            assert body.get("p99_ttft_ms", 50.0) >= 50.0, body
    assert any(codes) and not all(codes)


@pytest.mark.parametrize("seed", [0])
def test_serving_check_percentiles_out_of_order(seed, tmp_path, capsys):
    rng = random.Random(5500 + seed)
    data = json.loads(shipped_profiles()["zoo-cpu-batch"].read_text())
    codes = []
    for i in range(6):
        d = json.loads(json.dumps(data))
        row = rng.choice(d["serve_checks"])
        stem, side = rng.choice(["ttft", "tpot"]), rng.choice(["predicted", "measured"])
        p50 = row["metrics"][f"{stem}_p50_ms"][side]
        row["metrics"][f"{stem}_p90_ms"][side] = p50 * rng.choice([0.5, 0.999, 1.0, 1.5])
        path = tmp_path / f"p{i}.json"
        path.write_text(json.dumps(d))
        code = check_run(capsys, ["profiles", "show", str(path)])
        assert code == (2 if row["metrics"][f"{stem}_p90_ms"][side] < p50 else 0)
        codes.append(code)
    assert 2 in codes


_ALONE = [
    ["--slo-attainment", "0.5"],
    ["--slo-attainment", "0.5", "--slo", "tpot=30"],
    ["--price", "h100-sxm=2", "--cost-profile", "zoo-cpu-batch"],
    ["--price", "nope=2"],
    ["--price", "h100-sxm=-1"],
    ["--price", "h100-sxm"],
]


def test_serve_flags_that_would_be_ignored(capsys):
    for extra in _ALONE:
        assert check_run(capsys, [*_BASE, "--requests", "10", *extra]) == 2, extra


_CHECK_BAD = [
    (["--batch", "2"], ["--gamma", "6"]),
    (["--batch", "2"], ["--scenario", "nope"]),
    (["--batch", "2"], ["--prompts", "reference"]),
    (["--batch", "2"], ["--max-new-tokens", "4000"]),
    (["--serve-rates", "1"], ["--gamma", "7"]),
    (["--serve-rates", "1"], ["--scenario", "x"]),
    ([], ["--remeasure-batched"]),
    ([], ["--serve-requests", "3"]),
    ([], ["--max-num-seqs", "2"]),
]


_LATENCY_BAD = [
    ["--gammas", "1"],
    ["--max-repeats", "1"],
    ["--request-gammas", "2"],
    ["--request-new-tokens", "5"],
    ["--no-unpadded-step"],
    ["--request-target-tokens", "9"],
]


@pytest.mark.parametrize("seed", [0])
def test_check_and_calibrate_flags_fail_before_loading(seed, tmp_path, capsys, monkeypatch):
    """Any mix of a bad flag with good ones is refused before a model loads."""
    pytest.importorskip("torch")
    import calibrate.models.loading as loading
    import calibrate.workload.run_setup as run_setup

    def refuse(*a, **k):
        raise AssertionError("a model loaded before the flags were checked")

    monkeypatch.setattr(loading, "load_pair", refuse)
    monkeypatch.setattr(run_setup, "latency_models", refuse)
    rng = random.Random(5600 + seed)
    base = ["check", "--profile", "zoo-cpu-batch", "--preset", "zoo", "--no-write", "--no-progress"]
    for _ in range(8):
        mode, bad = rng.choice(_CHECK_BAD)
        good = rng.choice([["--gamma", "3"], ["--gamma", "1,2"], []]) if "--gamma" not in bad else []
        argv = [*base, *mode, "--method", rng.choice(["M", "T"]), *good, *bad]
        assert check_run(capsys, argv) == 2, argv
    latency = ["calibrate", "latency", "--preset", "zoo", "--quiet", "--out", str(tmp_path / "p.json")]
    for _ in range(6):
        bad = rng.choice(_LATENCY_BAD)
        assert check_run(capsys, [*latency, *bad]) == 2, bad
