"""A finished llama.cpp check keeps its raw runs, and ``bench/llama_serve_steps.py`` reads a step and an idle
first token out of them: exact synthetic runs."""

import importlib.util
import sys
from pathlib import Path

import pytest

from calibrate.llama_cpp.check_runs import keep_runs

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("llama_serve_steps", ROOT / "bench" / "llama_serve_steps.py")
steps = sys.modules["llama_serve_steps"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steps)


def test_a_finished_check_keeps_its_partial_as_the_raw_runs(tmp_path):
    partial = tmp_path / "p.json.llama-serve.partial.json"
    partial.write_text('{"key": {}, "runs": {}}')
    kept = keep_runs(partial)
    assert kept == tmp_path / "p.json.llama-serve.runs.json"
    assert kept.read_text() == '{"key": {}, "runs": {}}' and not partial.exists()
    assert keep_runs(partial) == kept and kept.exists()  # nothing to keep: the earlier runs stay


def _run():
    """Request 0 decodes alone (events every 0.1 s, a 3-token block streamed within 1 ms), then request 1
    arrives: its first token (a prompt pass) falls in one gap of request 0; the two then decode together
    (0.25 s steps)."""
    r0 = [0.5, 0.6, 0.7, 0.7004, 0.7008, 0.8, 1.5, 1.75, 2.0]
    r1 = [1.4, 1.65, 1.9, 2.15]
    return {
        "arrival_s": [0.0, 0.85],
        "first_token_s": [r0[0], r1[0]],
        "finish_s": [r0[-1], r1[-1]],
        "token_times_s": [r0, r1],
        "prompt_tokens": [40, 44],
    }


def test_gaps_are_counted_once_per_step_by_the_requests_decoding():
    gaps = steps.gaps_by_batch(_run())
    # request 0: 0.5→0.6→0.7 (the block's burst is one event)→0.8 alone; 0.8→1.5 holds request 1's first
    # token (skipped); then both decode: request 0's 1.5→1.75→2.0 and request 1's 1.4→1.65→1.9→2.15 (each
    # gap counted by the requests decoding when it began)
    assert sorted(gaps) == [1, 2]
    assert gaps[1] == pytest.approx([100.0] * 3)
    assert gaps[2] == pytest.approx([250.0] * 5)


def test_only_requests_that_found_the_server_empty_give_an_idle_first_token():
    alone = steps.alone_ttft_ms(_run())
    assert alone == [(40, pytest.approx(500.0))]  # request 1 arrived while request 0 decoded
