"""A token cap below a traced request is refused, naming the flag, before anything is priced or loaded."""

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
