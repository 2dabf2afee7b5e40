"""`specsim check`: predicted vs measured rows (pure), the table, and the CLI end to end on tiny models."""

import json

import numpy as np
import pytest

from specsim.check import (
    Measured,
    check_row,
    error_rows,
    format_table,
    relative_error,
    summary,
    textbook_speedup,
)
from specsim.cli import main
from specsim.errors import SpecsimError
from specsim.profile import LatencySection, MethodAcceptance, Trace, load_profile, save_profile
from specsim.replay import replay_traces_tau
from specsim.theory import alpha_from_tau, tau_iid
from tests.conftest import make_profile

TRACES = (Trace(match=(1, 1, 0, 1, 1, 1, 0, 0, 1, 1), prompt_id="a"),
          Trace(match=(0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1), prompt_id="b"))


def _entry(**kw):
    return MethodAcceptance(method="plain", scenario="s", images_per_prompt=0, traces=TRACES, **kw)


def test_relative_error():
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    np.testing.assert_allclose(relative_error([2.0, 0.5], [1.0, 1.0]), [1.0, -0.5])


def test_check_row_uses_replay_and_measured_latency():
    prof = make_profile()
    meas = Measured(gamma=3, tau=2.0, sd_ms_per_token=6.0, target_ms_per_token=10.0, prompts=2, new_tokens=12)
    row = check_row(prof, _entry(gamma=5, tau=2.4), meas, prompt_ids=["a", "b"], context_tokens=None)
    tau = replay_traces_tau(TRACES, 3)
    c, v = 1.0 / 10.0, (10.0 + 2.0 * 3) / 10.0  # conftest: Tp=10, Tq=1, Tv(γ)=10+2γ at context 128
    assert row.tau_predicted == pytest.approx(tau)
    assert row.speedup_predicted == pytest.approx(tau / (3 * c + v))
    assert row.speedup_measured == pytest.approx(10.0 / 6.0)
    assert row.speedup_textbook == pytest.approx(tau_iid(alpha_from_tau(2.4, 5), 3) / (3 * c + 1.0))
    assert "replay (same prompts)" in row.notes
    # a subset of prompts replays only those traces
    sub = check_row(prof, _entry(), meas, prompt_ids=["b"])
    assert sub.tau_predicted == pytest.approx(replay_traces_tau(TRACES[1:], 3))


def test_context_outside_the_table_falls_back_to_default():
    prof = make_profile()
    meas = Measured(gamma=2, tau=2.0, sd_ms_per_token=6.0, target_ms_per_token=10.0, prompts=2, new_tokens=12)
    row = check_row(prof, _entry(), meas, context_tokens=10_000.0)
    assert "default context" in row.notes


def test_textbook_speedup_at_reference_gamma_only_differs_by_v():
    assert textbook_speedup(2.5, 4, 4, 0.1) == pytest.approx(2.5 / (0.4 + 1.0))


def test_table_and_summary():
    prof = make_profile()
    rows = [check_row(prof, _entry(gamma=5, tau=2.4),
                      Measured(gamma=g, tau=2.0, sd_ms_per_token=5.0 + g, target_ms_per_token=10.0, prompts=2,
                               new_tokens=12)) for g in (1, 2, 4)]
    errs = error_rows(rows)
    s = summary(rows)
    assert s["max_abs_rel_err"] == pytest.approx(max(abs(e["speedup_rel_err"]) for e in errs))
    text = format_table(rows)
    assert "textbook" in text and text.count("\n") == len(rows) + 2
    with pytest.raises(SpecsimError):
        summary([])


# --------------------------------------------------------------------------- CLI on tiny random models
TINY = {"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 512, "initializer_range": 0.3}


@pytest.fixture
def tiny_files(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "x", "prompt": "def add(a, b):"}\n{"id": "y", "prompt": "Explain recursion."}\n')
    prof = tmp_path / "prof.json"
    save_profile(make_profile(acceptance=()), prof)
    return cfg, prompts, prof


def test_cli_acceptance_then_check(tiny_files, capsys):
    cfg, prompts, prof = tiny_files
    models = ["--target", str(cfg), "--draft", str(cfg), "--prompts", str(prompts), "--max-new-tokens", "8",
              "--threads", "1", "--no-progress"]
    assert main(["calibrate", "acceptance", *models, "--out", str(prof)]) == 0
    entry = load_profile(str(prof)).acceptance[0]
    assert entry.method == "plain" and entry.scenario == "p" and len(entry.traces) == 2
    assert not (prof.parent / "prof.json.partial.json").exists()
    capsys.readouterr()
    assert main(["check", "--profile", str(prof), "--gamma", "1,3", *models]) == 0
    out = capsys.readouterr().out
    assert "trace replay == engine for 4/4" in out and "textbook" in out
    checks = load_profile(str(prof)).checks
    assert [c.gamma for c in checks] == [1, 3]
    assert all(c.tau_measured == pytest.approx(c.tau_predicted) for c in checks)


def test_cli_errors(tiny_files, capsys):
    cfg, prompts, prof = tiny_files
    assert main(["check", "--profile", str(prof), "--gamma", "0,2", "--target", str(cfg), "--draft", str(cfg)]) == 2
    assert "--gamma" in capsys.readouterr().err
    assert main(["check", "--profile", str(prof), "--gamma", "2", "--target", str(cfg), "--draft", str(cfg)]) == 2
    assert "no acceptance entry" in capsys.readouterr().err
    bare = prompts.parent / "bare.json"
    save_profile(make_profile(latency=LatencySection()), bare)
    assert main(["check", "--profile", str(bare), "--target", str(cfg), "--draft", str(cfg)]) == 2
    assert "no latency section" in capsys.readouterr().err
    empty = prompts.parent / "empty.jsonl"
    empty.write_text("")
    assert main(["calibrate", "acceptance", "--target", str(cfg), "--draft", str(cfg), "--prompts", str(empty),
                 "--out", str(prof)]) == 2
    assert "empty" in capsys.readouterr().err
    other = dict(TINY, vocab_size=100)
    (prompts.parent / "other.json").write_text(json.dumps(other))
    assert main(["calibrate", "acceptance", "--target", str(cfg), "--draft", str(prompts.parent / "other.json"),
                 "--prompts", str(prompts), "--out", str(prof)]) == 2
    assert "vocabular" in capsys.readouterr().err


def test_acceptance_resumes_from_partial_file(tiny_files, monkeypatch, capsys):
    import calibrate.acceptance as A

    cfg, prompts, prof = tiny_files
    argv = ["calibrate", "acceptance", "--target", str(cfg), "--draft", str(cfg), "--prompts", str(prompts),
            "--max-new-tokens", "6", "--no-progress", "--out", str(prof)]
    real, calls = A.acceptance_trace, []

    def flaky(*a, **kw):
        calls.append(a[2].prompt_id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(A, "acceptance_trace", flaky)
    assert main(argv) == 130
    assert (prof.parent / "prof.json.partial.json").is_file()
    monkeypatch.setattr(A, "acceptance_trace", lambda *a, **kw: calls.append(a[2].prompt_id) or real(*a, **kw))
    assert main(argv) == 0
    assert calls == ["x", "y", "y"]  # the finished prompt was not redone
    assert len(load_profile(str(prof)).acceptance[0].traces) == 2
