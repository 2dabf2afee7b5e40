"""Issue 51's silent wrong answers, one case each: numbers bounded before they are used, flags that would be
ignored refused, work refused before it starts (models, whole files), errors on one line. Each failed before
its fix; ``tests/test_fuzz_serve.py`` varies them."""

import json
import os

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.profiles import shipped_profiles

SERVE = ["serve", "--alpha", "0.7", "--output-tokens", "32", "--no-progress"]
TRACED = ["serve", "--alpha", "0.7", "--no-progress"]  # a trace gives the lengths: --output-tokens is refused


def _one_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and out == "", (out[:200], err)
    return err


# --------------------------------------------------------------------------- serve
def test_max_rate_is_never_the_search_ceiling(capsys):
    """A TPOT bound alone is met at any rate (queueing shows in TTFT): the search stops at the rate the
    server completes requests at, not at 2**19 req/s, and says so."""
    assert main([*SERVE, "--requests", "120", "--slo", "tpot=50", "--max-rate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for side in ("sd", "target_only"):
        found, capacity = out["max_rate_per_s"][side], out["capacity_per_s"][side]
        assert 0 < capacity < 1e3 and found <= capacity and found > capacity / 1.05, (side, found, capacity)
    assert main([*SERVE, "--requests", "120", "--slo", "tpot=50", "--max-rate"]) == 0
    assert "its capacity" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--rate", "1e-300"], "--rate: expected requests per second in [1e-06, 1e+06], got '1e-300'"),
        (["--rate", "5e-324"], "--rate: expected requests per second in [1e-06, 1e+06], got '5e-324'"),
        (["--rates", "1,1e-300"], "--rates: expected requests per second in [1e-06, 1e+06]"),
        (["--rate", "1e-6", "--requests", "2000"], "--rate: 1e-06 req/s spreads 2000 requests over ~2e+09 s"),
        (["--slo-attainment", "0.5"], "--slo-attainment: applies with --max-rate only"),
        # its parser said "a finite number in 1e-06..1e+06 (ratio)" of a share that must be in (0, 1]
        (["--max-rate", "--slo", "tpot=5", "--slo-attainment", "0"], "--slo-attainment: expected a fraction"),
        (["--max-rate", "--slo", "tpot=5", "--slo-attainment", "2"], "in (0, 1], got '2'"),
    ],
)
def test_serve_refuses_rates_it_cannot_time_and_flags_it_would_ignore(capsys, argv, expected):
    """A rate so low that its arrivals leave the 1e9 s range printed 0.0 ms latencies and a 302-digit
    duration (5e-324 also printed a numpy warning first); --slo-attainment did nothing without --max-rate."""
    assert main([*SERVE, *argv]) == 2
    assert expected in _one_line(capsys)


def _trace(path, arrivals):
    lines = [json.dumps({"arrival_s": a, "prompt_tokens": 100 + 7 * i, "output_tokens": 40}) for i, a in
             enumerate(arrivals)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_trace_late_in_time_serves_as_one_at_zero(tmp_path, capsys):
    """Arrivals near 1e9 s left a step's digits to rounding: a busy fraction above 1. A trace is served
    from its first arrival, so the same gaps give the same run wherever they start."""
    gaps = [0.0, 0.013, 0.25, 0.2501]
    runs = []
    for start in (0.0, 1e9 - 1.0):
        argv = [*TRACED, "--trace", _trace(tmp_path / "t.jsonl", [start + g for g in gaps]), "--json"]
        assert main(argv) == 0
        runs.append(json.loads(capsys.readouterr().out)["comparison"])
    for side in ("sd", "target_only"):
        assert runs[1][side]["busy_fraction"] <= 1.0
        # arrivals near 1e9 s carry about 1e-7 s of rounding: 1e-3 ms
        assert runs[1][side]["ttft_ms"]["p50"] == pytest.approx(runs[0][side]["ttft_ms"]["p50"], abs=1e-3)


def _vllm_result(tmp_path, **over) -> str:
    body = {"request_rate": 4.0, "burstiness": 1.0, "input_lens": [120, 300], "output_lens": [32, 64]}
    body = {k: v for k, v in (body | over).items() if v is not ...}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(body))
    return str(path)


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"request_rate": float("-inf")}, "request_rate: expected a finite number, got -Infinity"),
        ({"request_rate": ...}, 'request_rate: missing (a rate in req/s, or "inf": all at once)'),
        ({"request_rate": 1e-300}, "request_rate: expected a value in 1e-06..1e+06 (rate_per_s)"),
        ({"burstiness": 1e-300}, "burstiness: expected a value in 0.001..1000 (burstiness)"),
        ({"median_ttft_ms": 50.0, "p99_ttft_ms": 20.0}, "p99_ttft_ms: expected >= median_ttft_ms (50)"),
    ],
)
def test_a_vllm_result_is_held_to_the_command_lines_bounds(tmp_path, capsys, over, expected):
    """-Infinity or no request_rate read as "every request at t = 0"; a burstiness of 1e-300 passed from a
    file though --burstiness refuses it; a p99 below the median was shown."""
    assert main([*TRACED, "--trace", _vllm_result(tmp_path, **over)]) == 2
    assert expected in _one_line(capsys)


def test_a_serving_check_with_its_p90_below_its_p50_is_refused(tmp_path, capsys):
    data = json.loads(shipped_profiles()["zoo-cpu-batch"].read_text())
    metrics = data["serve_checks"][0]["metrics"]
    metrics["tpot_p90_ms"]["measured"] = metrics["tpot_p50_ms"]["measured"] / 2
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert main(["profiles", "show", str(path)]) == 2
    assert "serve_checks[0].metrics.tpot_p90_ms.measured: expected >= the p50's" in _one_line(capsys)


# --------------------------------------------------------------------------- files
def test_a_trace_is_read_up_to_its_first_bad_line(tmp_path):
    """The first bad line stops the read: bytes after it (here not UTF-8) are never decoded, where the
    whole-file read refused the file for them and named no line."""
    from specsim.serve.arrivals import read_trace

    path = tmp_path / "t.jsonl"
    good = json.dumps({"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 4})
    path.write_bytes((good + "\n" + good.replace("0.5", "0.25") + "\n").encode() + b"\xff\xfe garbage\n")
    with pytest.raises(SpecsimError, match=r"line 2\.arrival_s: expected arrival times in order"):
        read_trace(str(path))


def test_a_trace_line_is_read_as_strictly_by_the_fast_path(tmp_path):
    """Lines the fast path takes are the ones the strict reader accepts; a repeated key, NaN, a bool or
    a float token count go to the strict reader, which names the problem."""
    from specsim.serve.arrivals import read_trace

    path = tmp_path / "t.jsonl"
    for line, message in (
        ('{"arrival_s": 0, "arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}', "duplicate key"),
        ('{"arrival_s": NaN, "prompt_tokens": 1, "output_tokens": 1}', "NaN"),
        ('{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 1}', "expected an integer, got true"),
        ('{"arrival_s": 0, "prompt_tokens": 1.0, "output_tokens": 1}', "expected an integer, got 1.0"),
        ('{"arrival_s": 2e9, "prompt_tokens": 1, "output_tokens": 1}', "expected <= 1000000000.0"),
    ):
        path.write_text(line + "\n")
        with pytest.raises(SpecsimError, match=message):
            read_trace(str(path))


def test_an_oversized_file_is_refused_by_its_size_before_a_byte_is_read(tmp_path, monkeypatch, capsys):
    """validate --data read 1 GiB before refusing a file over the limit."""
    from specsim.jsonio import MAX_FILE_BYTES

    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk used
    real = os.fdopen

    class NoReads:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def close(self):
            self.fh.close()

        def read(self, *a):
            raise AssertionError("read before the size was checked")

        readline = read

    def fdopen(fd, mode="r", *a, **k):  # only the big file: the parser reads the shipped presets' list
        fh = real(fd, mode, *a, **k)
        return NoReads(fh) if os.fstat(fd).st_ino == path.stat().st_ino else fh

    monkeypatch.setattr(os, "fdopen", fdopen)
    assert main(["validate", "--data", str(path)]) == 2
    assert "is larger than 1073741824 bytes" in _one_line(capsys)


# --------------------------------------------------------------------------- rough edges
def test_an_error_about_many_entries_names_a_few_and_the_count(capsys):
    args = ["recommend", "--engine", "vllm", "--profile", "ibed-llava1.5-7b-68m"]
    assert main(args) == 2
    err = _one_line(capsys)
    assert "found 144 (M/ChartQA, T/ChartQA" in err and "and 138 more" in err and len(err) < 300


def test_no_help_text_shows_a_doubled_percent_sign(capsys):
    """argparse %-formats help= strings but prints descriptions and group titles as they are."""
    from specsim.cli.main import build_parser

    parser = build_parser()
    texts = []
    for action in parser._subparsers._group_actions:
        for sub in action.choices.values():
            texts.append(sub.format_help())
            for inner in getattr(sub, "_subparsers", None) and sub._subparsers._group_actions or ():
                texts += [p.format_help() for p in inner.choices.values()]
    assert len(texts) > 10 and not [t for t in texts if "%%" in t]
