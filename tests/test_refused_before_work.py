"""Flags refused, naming the flag, before anything is priced or loaded: a token cap below a traced request,
images for a target built from its config (no image processor)."""

from __future__ import annotations

import json

import pytest

from specsim.cli.main import main
from specsim.profiles import load_profile, resolve_profile_path

PROFILE = "qwen2.5-coder-0.5b-1.5b-cpu-check"


def _longest(name: str, methods=None) -> int:
    profile = load_profile(str(resolve_profile_path(name)))
    entries = [a for a in profile.acceptance if methods is None or a.method in methods]
    return max(len(t.match) for a in entries for t in a.traces if t.match is not None)


def test_predict_refuses_a_cap_below_the_traces(capsys):
    """It printed speedup n/a beside a note and exited 0."""
    longest = _longest(PROFILE)
    assert main(["predict", "--profile", PROFILE, "--gamma", "3", "--max-new-tokens", str(longest - 1)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    said = f"expected >= {longest} (the longest traced request's new tokens), got {longest - 1}"
    assert captured.err == f"specsim: error: --max-new-tokens: {said}\n"
    argv = ["predict", "--profile", PROFILE, "--gamma", "3", "--max-new-tokens", str(longest), "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["speedup"] is not None for r in rows)


def test_check_refuses_a_cap_below_the_traces_before_the_models_load(monkeypatch, capsys):
    """It loaded the models, ran a round (a RuntimeWarning first) and then refused."""
    import calibrate.workload.run_setup as setup

    monkeypatch.setattr(setup, "load_setup", lambda *a, **k: pytest.fail("models loaded"))
    longest = _longest("zoo-cpu-batch", {"M"})
    argv = ["check", "--preset", "zoo", "--profile", "zoo-cpu-batch", "--no-write", "--method", "M"]
    assert main([*argv, "--gamma", "2", "--max-new-tokens", "3"]) == 2
    said = f"--max-new-tokens: expected >= {longest} (the longest traced request's new tokens), got 3"
    assert capsys.readouterr().err == f"specsim: error: {said}\n"


CHECK = ["check", "--preset", "zoo", "--profile", "zoo-cpu-batch", "--no-write", "--gamma", "2"]
ACCEPTANCE = ["calibrate", "acceptance", "--method", "M", "--out", "{d}/a.json"]


@pytest.mark.parametrize(
    "argv",
    [
        [*CHECK, "--method", "M", "--random-weights"],
        [*ACCEPTANCE, "--preset", "zoo", "--random-weights"],
        [
            *ACCEPTANCE,
            "--target",
            "llava-1.5-7b",
            "--draft",
            "llava-1.5-68m",
            "--prompts",
            "zoo",
            "--dtype",
            "bfloat16",
        ],
    ],
)
def test_images_for_a_target_built_from_its_config_are_refused_before_loading(
    monkeypatch, tmp_path, capsys, argv
):
    """A random-weight target has no image processor: the models loaded (seconds for the zoo, minutes at 7B),
    then the first prompt with images was refused."""
    import calibrate.models.loading as loading

    monkeypatch.setattr(loading, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: prompts: the target (") and err.count("\n") == 1
    assert "built from its config with random weights" in err and "e.g. --prompts reference" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("option", ["--captioner", "--target", "--draft"])
def test_a_missing_local_model_is_refused_before_any_model_loads(monkeypatch, tmp_path, capsys, option):
    """A missing --captioner path was read as an HF id after the target and draft had loaded."""
    import calibrate.models.loading as loading

    monkeypatch.setattr(loading, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    models = {"--target": "zoo:target", "--draft": "zoo:draft", "--captioner": "zoo:captioner"}
    models[option] = str(tmp_path / "missing")
    argv = [
        "check",
        "--profile",
        "zoo-cpu-batch",
        "--no-write",
        "--gamma",
        "2",
        "--method",
        "C",
        "--prompts",
        "zoo",
    ]
    assert main([*argv, *(a for kv in models.items() for a in kv)]) == 2
    said = f"{option}: {models[option]!r} not found (expected an existing model folder, .gguf file"
    assert capsys.readouterr().err.startswith(f"specsim: error: {said}")


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            [*CHECK, "--method", "M", "--captioner", "zoo:captioner"],
            "--captioner: applies to caption drafting only",
        ),
        (
            [*CHECK, "--method", "M", "--caption-prefix", "X"],
            "--caption-prefix: applies to caption drafting only",
        ),
        (
            [*ACCEPTANCE, "--preset", "zoo", "--caption-prefix", "X"],
            "--caption-prefix: applies to caption drafting",
        ),
        ([*ACCEPTANCE, "--preset", "zoo", "--seed", "3"], "--seed: applies with --sample-paths only"),
    ],
)
def test_a_flag_the_run_would_not_read_is_refused(monkeypatch, tmp_path, capsys, argv, said):
    """Each went unread: a caption flag with no caption method, a seed with no sampled paths."""
    import calibrate.models.loading as loading

    monkeypatch.setattr(loading, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim: error: {said}") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


CONFIGS = ["--target-config", "llava-1.5-7b", "--draft-config", "llava-1.5-68m"]


@pytest.mark.parametrize("models", [["--preset", "zoo", "--prompts", "zoo"], CONFIGS])
def test_latency_refuses_no_workload_where_it_drops_nothing(monkeypatch, tmp_path, capsys, models):
    """--prompts took precedence, and without --preset there is no pair's set to drop: it went unread."""
    import calibrate.workload.run_setup as setup

    monkeypatch.setattr(setup, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    argv = ["calibrate", "latency", *models, "--no-workload", "--out", str(tmp_path / "l.json")]
    assert main(argv) == 2
    said = "--no-workload: applies with --preset, without --prompts (drops the pair's set)"
    assert capsys.readouterr().err == f"specsim: error: {said}\n" and not list(tmp_path.iterdir())
