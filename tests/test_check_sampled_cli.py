"""``specsim check --temperature T`` on a tiny seeded pair (draft = noisy copy of the target): seeded sampled
runs, Monte Carlo intervals, rows written beside the greedy ones, reproducible with the same --seed; and
its argument errors, one line each, before any model loads."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specsim.cli.main import main
from specsim.profiles import load_profile, save_profile
from tests.conftest import make_profile


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    from tests.tiny_pair import tiny_pair

    folder = tmp_path_factory.mktemp("sampled")
    target, draft = tiny_pair(seed=0, noise=0.1)
    target.save_pretrained(folder / "target")
    draft.save_pretrained(folder / "draft")
    prompts = folder / "p.jsonl"
    prompts.write_text(
        '{"id": "x", "prompt": "def add(a, b):"}\n{"id": "y", "prompt": "Explain recursion."}\n'
    )
    prof = folder / "prof.json"
    pair = replace(make_profile().provenance, target=str(folder / "target"), draft=str(folder / "draft"))
    save_profile(make_profile(acceptance=(), provenance=pair), prof)  # of the models the runs load
    models = [
        "--target",
        str(folder / "target"),
        "--draft",
        str(folder / "draft"),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "12",
        "--threads",
        "1",
        "--no-progress",
    ]
    assert main(["calibrate", "acceptance", *models, "--sample-paths", "3", "--out", str(prof)]) == 0
    return prof, models


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


def test_sampled_check_rows_intervals_and_seeds(tiny, capsys):
    prof, models = tiny
    assert (
        main(["check", "--profile", str(prof), "--gamma", "1,3", "--max-rounds", "2", "--json", *models]) == 0
    )
    assert len(_strict(capsys.readouterr().out)["rows"]) == 2  # the greedy check's JSON is strict too
    argv = [
        "check",
        "--profile",
        str(prof),
        "--gamma",
        "1,3",
        "--temperature",
        "1",
        "--seeds",
        "3",
        "--json",
        *models,
    ]
    assert main(argv) == 0
    out = _strict(capsys.readouterr().out)
    rows = out["rows"]
    assert [r["gamma"] for r in rows] == [1, 3] and out["rounds"] == 3 and out["temperature"] == 1.0
    for r in rows:
        assert r["temperature"] == 1.0 and r["rounds"] == 3 and r["prompts"] == 2
        assert r["tau_interval"][0] <= r["tau_predicted"] <= r["tau_interval"][1]
        assert r["speedup_interval"][0] <= r["speedup_predicted"] <= r["speedup_interval"][1]
        assert 1.0 <= r["tau_measured"] <= r["gamma"] + 1
    assert set(out["coverage"]) >= {"tau_coverage", "speedup_coverage", "both_coverage", "goal"}
    assert all("3 sampled target paths per prompt" in r["notes"] for r in rows)
    assert all(len(t.accept_paths) == 3 for e in load_profile(str(prof)).acceptance for t in e.traces)
    checks = load_profile(str(prof)).checks
    assert sorted((c.gamma, c.temperature or 0.0) for c in checks) == [(1, 0.0), (1, 1.0), (3, 0.0), (3, 1.0)]
    assert sum(c.temperature is None for c in checks) == 2  # the greedy rows stay
    # the same --seed: the same sampled runs (τ) and the same Monte Carlo (intervals)
    assert main([*argv, "--no-write"]) == 0
    again = _strict(capsys.readouterr().out)["rows"]
    assert [(r["tau_measured"], r["tau_interval"]) for r in again] == [
        (r["tau_measured"], r["tau_interval"]) for r in rows
    ]
    assert main([a for a in argv if a != "--json"] + ["--no-write"]) == 0  # text tables
    text = capsys.readouterr().out
    assert "95% interval" in text and "prediction interval: tau" in text


def test_sampled_check_needs_beta_at_the_same_temperature(tiny, capsys):
    prof, models = tiny
    argv = ["check", "--profile", str(prof), "--gamma", "2", "--temperature", "0.5", "--no-write", *models]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "beta was measured at T=1, but --temperature is 0.5" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--temperature", "1", "--seeds", "1"], "--seeds: expected at least 2 runs per prompt"),
        (["--seeds", "3"], "--seeds: applies with --temperature > 0 only"),  # greedy: ignored
        (["--temperature", "1", "--tree", "4,2,1"], "--tree/--policy: greedy checks only"),  # dropped
        (["--temperature", "1", "--policy", "1-8:3"], "--tree/--policy: greedy checks only"),
        (["--temperature", "nan"], "argument --temperature: expected a finite number"),
        (["--temperature", "-1"], "argument --temperature: expected a finite number in 0 or 0.001..1000"),
        (["--temperature", "1", "--seeds", "0"], "argument --seeds: expected an integer in 1..100000"),
        (["--seed", "-3"], "argument --seed: expected an integer"),
        (["--max-new-tokens", "1"], "--max-new-tokens: expected an integer >= 2"),
        (["--max-new-tokens", "0"], "argument --max-new-tokens: expected an integer in 1..16777216"),  # 0..
        (["--max-rounds", "10000000"], "argument --max-rounds: expected an integer in 1..100000"),
        (["--min-rounds", "3", "--max-rounds", "2"], "--min-rounds/--max-rounds: expected 1 <= min <= max"),
        (["--max-minutes", "inf"], "argument --max-minutes: expected a finite number"),
        (
            ["--max-minutes", "1e9"],
            "argument --max-minutes: expected a finite number in 0.001..100000 (minutes)",
        ),
        (["--halfwidth", "nan"], "argument --halfwidth: expected a fraction in (0, 1), got 'nan'"),
        (["--halfwidth", "1.5"], "argument --halfwidth: expected a fraction in (0, 1)"),
        (["--halfwidth", "0"], "argument --halfwidth: expected a fraction in (0, 1), got '0'"),
        (["--gamma", "1-100000"], "--gamma: expected values <= 1024"),
    ],
)
def test_check_arguments_fail_before_models_load(tmp_path, capsys, monkeypatch, extra, message):
    pytest.importorskip("torch")
    import calibrate.workload.run_setup as CA

    def no_models(*a, **k):
        raise AssertionError("models loaded before the arguments were checked")

    monkeypatch.setattr(CA, "load_setup", no_models)
    prof = save_profile(make_profile(acceptance=()), tmp_path / "p.json")
    code = main(["check", "--profile", str(prof), "--target", "x.json", "--draft", "y.json", *extra])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and message in err, err
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sample-paths", "1"], "--sample-paths: expected 0 (off) or at least 2"),
        (["--sample-paths", "-1"], "argument --sample-paths: expected an integer"),
        (["--seed", "x"], "argument --seed: expected an integer"),
    ],
)
def test_acceptance_path_arguments_fail_before_models_load(tmp_path, capsys, monkeypatch, extra, message):
    pytest.importorskip("torch")
    import calibrate.workload.run_setup as CA

    monkeypatch.setattr(
        CA, "load_setup", lambda *a, **k: (_ for _ in ()).throw(AssertionError("models loaded"))
    )
    code = main(
        [
            "calibrate",
            "acceptance",
            "--target",
            "x.json",
            "--draft",
            "y.json",
            "--out",
            str(tmp_path / "p.json"),
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and not list(tmp_path.iterdir())


def test_a_missing_prompt_set_and_a_policy_past_the_grid_fail_before_models_load(
    tmp_path, capsys, monkeypatch
):
    """``calibrate latency --prompts`` and ``check --policy`` are refused from files alone: no model loads."""
    pytest.importorskip("torch")
    import calibrate.workload.run_setup as CA

    def no_models(*a, **k):
        raise AssertionError("models loaded before the arguments were checked")

    monkeypatch.setattr(CA, "load_setup", no_models)
    monkeypatch.setattr(CA, "latency_models", no_models)
    out = str(tmp_path / "l.json")
    assert main(["calibrate", "latency", "--preset", "zoo", "--prompts", "nosuchset", "--out", out]) == 2
    assert "--prompts: prompt set 'nosuchset' not found" in capsys.readouterr().err
    policy = ["--policy", "confidence:0.7,gamma=20", "--max-new-tokens", "40", "--no-progress"]
    policy += ["--limit", "1", "--gamma", "2"]  # the default list's 6 and 8 are past zoo-cpu's grid
    assert main(["check", "--preset", "zoo", "--profile", "zoo-cpu", "--method", "M", *policy]) == 2
    assert "reaches gamma 20 on M/" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_sampled_check_without_a_vision_cost_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    """A profile measured with --no-vision: a sampled check ran every seed, then failed pricing set-up."""
    pytest.importorskip("torch")
    import calibrate.workload.run_setup as CA

    monkeypatch.setattr(CA, "load_setup", lambda *a, **k: pytest.fail("models loaded"))
    root = Path(__file__).resolve().parents[1]
    shipped = json.loads((root / "specsim" / "profiles" / "measured" / "zoo-cpu.json").read_text())
    shipped["latency"]["vision_encoder_ms_per_image"] = None
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(shipped))
    argv = ["check", "--preset", "zoo", "--profile", str(prof), "--limit", "1", "--method", "M"]
    assert main([*argv, "--gamma", "2", "--temperature", "1", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "--temperature: a sampled check prices each request's set-up; vision_encoder_ms_per_image" in err
