"""Issue 51's calibrate and check cases: a flag that would fail after minutes of measuring, or be ignored, is
refused before a model loads; errors stay one line. Each failed before its fix."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specsim.cli.main import main  # noqa: E402
from tests.test_models import TINY_LLAMA, TINY_LLAVA  # noqa: E402


def _one_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and out == "", (out[:200], err)
    return err


@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model fails the test: the flag must be refused first."""

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the flags were checked")

    import calibrate.models.loading as loading
    import calibrate.workload.run_setup as run_setup

    monkeypatch.setattr(loading, "load_pair", refuse)
    monkeypatch.setattr(run_setup, "latency_models", refuse)


def _configs(tmp_path):
    t, d = tmp_path / "t.json", tmp_path / "d.json"
    t.write_text(json.dumps(TINY_LLAVA))
    d.write_text(json.dumps({**TINY_LLAVA, "text_config": {**TINY_LLAMA, "num_hidden_layers": 1}}))
    return ["calibrate", "latency", "--target-config", str(t), "--draft-config", str(d), "--quiet"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--gammas", "1"], "--gammas: expected a gamma >= 2 among them"),
        (["--warmup", "0", "--min-repeats", "1", "--max-repeats", "1"], "--max-repeats: expected at least 2"),
        (["--request-gammas", "1,3"], "--request-gammas: applies with --request-batches only"),
        (["--request-rounds", "3"], "--request-rounds: applies with --request-batches only"),
        (["--no-server-loop"], "--no-server-loop: applies with --request-batches only"),
    ],
)
def test_calibrate_latency_refuses_before_measuring(tmp_path, capsys, no_loading, extra, expected):
    """--gammas 1 failed after the whole measurement ("no measurement for draft_next"); one round per point
    failed on its own 0.0 ms; the batched sweep's flags did nothing without --request-batches."""
    assert main([*_configs(tmp_path), "--out", str(tmp_path / "p.json"), *extra]) == 2
    assert expected in _one_line(capsys)


ZOO_CHECK = ["check", "--profile", "zoo-cpu-batch", "--preset", "zoo", "--no-write", "--no-progress"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--batch", "2", "--gamma", "3", "--method", "M", "--scenario", "nope"], "scenario='nope-1img'"),
        (["--batch", "2", "--gamma", "3", "--method", "MC", "--prompts", "reference"], "='reference'"),
        (["--batch", "2", "--gamma", "3", "--method", "M", "--max-new-tokens", "5000"], "--max-new-tokens: "),
        (["--batch", "2", "--gamma", "6", "--method", "M"], "--gamma: gamma 6 was not measured"),
        (["--serve-rates", "1", "--gamma", "9", "--method", "T"], "--gamma: gamma 9 was not measured"),
        (["--serve-rates", "1", "--gamma", "2", "--method", "M", "--scenario", "x"], "scenario='x-1img'"),
        (["--gamma", "3", "--remeasure-batched"], "--remeasure-batched: applies with --batch or"),
        (["--gamma", "3", "--max-num-seqs", "4"], "--max-num-seqs: applies with --serve-rates only"),
    ],
)
def test_batched_and_serving_checks_refuse_before_the_models_load(capsys, no_loading, extra, expected):
    """These were refused only after the models loaded (or, for a gamma outside the batched grid, after
    the whole run); --remeasure-batched and --max-num-seqs were ignored without --batch/--serve-rates."""
    assert main([*ZOO_CHECK, *extra]) == 2
    assert expected in _one_line(capsys)


def test_the_latency_workload_line_comes_after_the_plan_is_accepted(tmp_path, capsys):
    """calibrate latency printed its "workload" line to stderr, then an error: two lines."""
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "p.json"), "--quiet"]
    # contexts sized from the workload (its longest prompt + 1000 new tokens) and gamma 8 pass 1024 positions:
    # refused by the plan once the models load (only the 1-token-prompt bound is checked before them)
    assert main([*argv, "--max-new-tokens", "1000", "--gammas", "8"]) == 2
    line = _one_line(capsys)
    assert "--contexts/--verify-context/--gammas" in line and "(without --contexts, they reach" in line


def test_a_workload_past_the_window_names_max_new_tokens_before_loading(tmp_path, capsys, monkeypatch):
    """--max-new-tokens 5000 loaded the models, then blamed --contexts/--verify-context/--gammas."""
    import calibrate.workload.run_setup as run_setup

    monkeypatch.setattr(run_setup, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "p.json"), "--quiet"]
    assert main([*argv, "--max-new-tokens", "5000", "--gammas", "1,2"]) == 2
    assert "--max-new-tokens: contexts sized from the workload reach at least 5001" in _one_line(capsys)


def test_given_contexts_keep_the_verify_context_among_them(tmp_path, capsys, monkeypatch):
    """--contexts 64 with --max-new-tokens 5000 took the workload's middle context (2589) as the verify
    context, added it to the plan beside 64, and failed after loading on a 2592-position plan."""
    from calibrate.measure import latency_plan as L

    seen = {}

    def stop(target, **overrides):
        seen.update(overrides)
        raise L.SpecsimError("stopped")

    monkeypatch.setattr(L, "default_plan", stop)
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "p.json"), "--quiet"]
    assert main([*argv, "--contexts", "64,300,900", "--max-new-tokens", "5000", "--gammas", "1,2"]) == 2
    assert seen["contexts_tokens"] == [64, 300, 900] and seen["verify_context_tokens"] == 300


def test_max_new_tokens_beside_no_workload_is_refused(tmp_path, capsys, monkeypatch):
    """--no-workload --max-new-tokens 10 (or 300, or 900) measured the same grid, without a word."""
    import calibrate.workload.run_setup as run_setup

    monkeypatch.setattr(run_setup, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "p.json"), "--quiet"]
    assert main([*argv, "--contexts", "64", "--no-workload", "--max-new-tokens", "10"]) == 2
    assert "--max-new-tokens: sizes the workload's contexts, which --no-workload drops" in _one_line(capsys)
