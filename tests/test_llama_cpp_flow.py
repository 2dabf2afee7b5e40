"""The llama.cpp check's flow without llama.cpp: a stand-in server answers as llama-server does (its
``timings``), the runs resume from their partial file, and the rows carry both predictions."""

from dataclasses import replace

import numpy as np
import pytest

from calibrate.llama_cpp import check_runs
from calibrate.llama_cpp.traces import TracedPrompt
from specsim.draft_shapes.ngram_lookup import NgramSimple
from tests.test_llama_cpp_pricing import llama_like_profile


class FakeServer:
    """Answers completions like llama-server: 100 ms per target step, 250 ms per SD block."""

    def __init__(self, llama, config, niceness=0):
        self.config, self.pid = config, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def tokenize_chat(self, text):
        return list(range(40 + len(text) % 7))

    def complete(self, tokens, n):
        if self.config.spec_type is None:
            return {
                "timings": {
                    "prompt_n": len(tokens),
                    "prompt_ms": 500.0,
                    "predicted_n": n,
                    "predicted_ms": 100.0 * (n - 1),
                }
            }
        accepted = (n - 1) // 2
        steps = n - 1 - accepted
        return {
            "timings": {
                "prompt_n": len(tokens),
                "prompt_ms": 600.0,
                "predicted_n": n,
                "predicted_ms": 250.0 * steps,
                "draft_n": 2 * steps,
                "draft_n_accepted": accepted,
            }
        }


def test_runs_resume_and_rows_carry_both_predictions(monkeypatch, tmp_path):
    monkeypatch.setattr(check_runs, "LlamaServer", FakeServer)
    profile = llama_like_profile()
    entry = profile.acceptance[0]
    ids = [t.prompt_id for t in entry.traces[:3]]
    traces = tuple(
        replace(t, prompt_tokens=40 + len(f"p{i}") % 7, tokens=tuple(range(64)), prompt_ids=tuple(range(40)))
        for i, t in enumerate(entry.traces[:3])
    )
    profile = replace(profile, acceptance=(replace(entry, traces=traces),))
    prompts = [TracedPrompt(p, f"p{i}") for i, p in enumerate(ids)]
    settings = check_runs.check_settings("t.gguf", "d.gguf", 2, [1, 3], NgramSimple(3, 6))
    kw = dict(new_tokens=32, threads=2, partial=tmp_path / "p.json", halfwidth=0.5, min_rounds=2)
    first = check_runs.run_llama_check(None, settings, prompts, max_seconds=None, max_rounds=1, **kw)
    assert first.rounds == 1 and (tmp_path / "p.json").exists()  # a slice ends; the next goes on
    runs = check_runs.run_llama_check(None, settings, prompts, max_seconds=None, max_rounds=2, **kw)
    assert runs.finished and runs.rounds == 2
    rows = check_runs.llama_rows(profile, profile.acceptance[0], runs, settings, 1)
    assert [r.gamma for r in rows] == [1, 3, 6] and rows[-1].draft == "ngram-simple:3,6"
    for r in rows:
        assert r.runtime == "llama.cpp" and r.speedup_measured == pytest.approx(100.0 / (250.0 * 16 / 31))
        assert r.tau_measured == pytest.approx(32 / (1 + 31 - 15))
        assert np.isfinite(r.speedup_predicted) and np.isfinite(r.speedup_predicted_counts)
        assert r.terms_ms_per_block["block"]["measured"] == pytest.approx(250.0)
