"""``specsim check --synthetic-acceptance SPEC`` on the shipped zoo: one request, a static batch and the
server loop, each run under a schedule and compared with the prediction from the same schedule.

- the schedule sources (τ, rates, a profile's τ, a profile's traces) give what they say, seeded;
- the rows say they were measured so, the engine's blocks equal the schedule's replay, so measured τ equals
  the predicted τ exactly (the passes are timed; how close the speedups are is a timing goal for bench/);
- bad SPECs and flags: one line naming the value, exit 2, before any model loads.
"""

import json

import numpy as np
import pytest

from calibrate.measure.synthetic_schedules import build_schedule, parse_schedule
from specsim.acceptance.replay import replay_traces_tau
from specsim.acceptance.theory import tau_iid
from specsim.cli.main import main
from specsim.profiles import load_profile, resolve_profile_path


@pytest.fixture
def zoo_profile(tmp_path):
    path = tmp_path / "zoo.json"
    path.write_bytes(resolve_profile_path("zoo-cpu-batch").read_bytes())
    return path


def _check(path, *extra):
    argv = ["check", "--preset", "zoo", "--profile", str(path), "--threads", "1", "--method", "M"]
    argv += ["--min-rounds", "1", "--max-rounds", "1", "--no-progress", "--json", *extra]
    return main(argv)


def test_schedule_sources_give_what_they_say():
    ids = [f"p{i}" for i in range(40)]
    drawn = build_schedule(parse_schedule("tau:3@4"), ids, 400, seed=1)
    alpha = np.mean([m for p in ids for m in drawn.match[p]])
    assert tau_iid(alpha, 4) == pytest.approx(3.0, abs=0.05)  # 16 000 draws at the α of τ = 3 at γ = 4
    assert drawn == build_schedule(parse_schedule("tau:3@4"), ids, 400, seed=1)
    rates = build_schedule(parse_schedule("rates:1,1,0"), ["a"], 6, seed=0)
    assert rates.match["a"] == (1, 1, 0, 0, 0, 0)  # the last rate holds on
    ibed = parse_schedule("tau:ibed-llava1.5-7b-68m:M/ChartQA")
    assert tau_iid(ibed.rates[0], 5) == pytest.approx(2.24)  # IbED Table 1a, M on ChartQA at γ = 5
    zoo = load_profile("zoo-cpu-batch")
    entry = next(e for e in zoo.acceptance if e.method == "M" and e.scenario == "zoo-1img")
    own = {t.prompt_id: t.match for t in entry.traces}
    replayed = build_schedule(parse_schedule("traces:zoo-cpu-batch:M/zoo-1img"), [*own, "new"], 64, seed=5)
    for p, m in own.items():  # its own trace, repeated from its start
        assert replayed.match[p] == tuple(np.resize(m, 64))
    assert replayed.match["new"] == tuple(np.resize(entry.traces[0].match, 64))  # the pool's first in turn


def test_one_request_check_under_a_schedule(zoo_profile, capsys):
    assert _check(zoo_profile, "--gamma", "2,4", "--limit", "3", "--max-new-tokens", "12",
                  "--synthetic-acceptance", "tau:2.2@4", "--seed", "7") == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 6  # 1, 2 and 5 images x γ 2, 4
    for row in out["rows"]:
        assert row["synthetic_acceptance"] == "tau:2.2@4"
        assert row["tau_measured"] == pytest.approx(row["tau_predicted"], rel=1e-12)
    assert all(same == total > 0 for same, total in out["replay_equals_engine"].values())
    spread = out["block_ms_spread"]
    assert set(spread) == {"M/γ=2", "M/γ=4"}
    for row in spread.values():  # every block after the first, each draft step of them
        assert row["blocks"] == row["draft"]["n"] == row["draft_first_step"]["n"] > 0
        assert 0 < row["draft"]["p50"] <= row["draft"]["p90"] <= row["draft"]["max"]
    assert spread["M/γ=4"]["draft_later_step"]["n"] > spread["M/γ=2"]["draft_later_step"]["n"]
    stored = [r for r in load_profile(str(zoo_profile)).checks if r.synthetic_acceptance == "tau:2.2@4"]
    assert len(stored) == 6 and all(r.batch is None for r in stored)
    lossless = [r for r in load_profile(str(zoo_profile)).checks if r.synthetic_acceptance is None]
    assert lossless  # the profile's lossless rows are kept beside them


def test_batch_and_serving_checks_under_the_zoo_traces(zoo_profile, capsys):
    spec = "traces:zoo-cpu-batch:M"
    assert _check(zoo_profile, "--gamma", "3", "--limit", "6", "--max-new-tokens", "12", "--batch", "2",
                  "--synthetic-acceptance", spec) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 3 and all(r["batch"] == 2 and r["synthetic_acceptance"] == spec for r in rows)
    for r in rows:
        assert r["tau_measured"] == pytest.approx(r["tau_predicted"], rel=1e-12)
    assert _check(zoo_profile, "--gamma", "2", "--limit", "3", "--max-new-tokens", "8", "--serve-rates", "40",
                  "--serve-requests", "4", "--synthetic-acceptance", spec) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["method"], r["gamma"], r["synthetic_acceptance"]) for r in rows] == [
        ("target", 0, spec),
        ("M", 2, spec),
    ]
    stored = load_profile(str(zoo_profile)).serve_checks
    assert sum(r.synthetic_acceptance == spec for r in stored) == 2


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("tau:9@2", "--synthetic-acceptance 'tau:9@2': tau: expected 1 <= tau <= gamma+1"),
        ("tau:2@0", "gamma: expected an integer >= 1, got 0"),
        ("rates:0.5,1.5", "rates: expected acceptance rates in [0, 1], got 1.5"),
        ("rates:0.5,x", "rates: expected a number, got 'x'"),
        ("traces:/nowhere/missing.json:M", "missing.json"),
        ("tau:zoo-cpu-batch:M", "expected PROFILE:METHOD/SCENARIO"),
        ("traces:zoo-cpu-batch:Q", "has no entry Q/*"),
        ("traces:zoo-cpu-batch", "expected one method's greedy traces"),
        ("beta:0.5", "--synthetic-acceptance: expected tau:T@G"),
    ],
)
def test_bad_schedules_exit_2_before_models_load(zoo_profile, capsys, monkeypatch, spec, expected):
    import calibrate.workload.run_setup as run_setup

    monkeypatch.setattr(run_setup, "load_setup", lambda *a, **k: pytest.fail("models loaded"))
    assert _check(zoo_profile, "--gamma", "2", "--synthetic-acceptance", spec) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err


@pytest.mark.parametrize("extra", [["--temperature", "1"], ["--tree", "2,1"], ["--policy", "heuristic:2"]])
def test_synthetic_runs_fixed_gamma_greedy(zoo_profile, capsys, extra):
    assert _check(zoo_profile, "--gamma", "2", "--synthetic-acceptance", "tau:2@2", *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs fixed gamma, greedy" in err[0], err


def test_replayed_traces_keep_their_tau():
    """A profile's traces as the schedule (cut to their own length) replay to that entry's τ."""
    zoo = load_profile("zoo-cpu-batch")
    entry = next(e for e in zoo.acceptance if e.method == "T" and e.scenario == "zoo-2img")
    n, ids = min(len(t.match) for t in entry.traces), [t.prompt_id for t in entry.traces]
    schedule = build_schedule(parse_schedule("traces:zoo-cpu-batch:T/zoo-2img"), ids, n, seed=0)
    cut = [t.match[:n] for t in entry.traces]
    assert replay_traces_tau(schedule.traces(ids, n), 3) == replay_traces_tau(cut, 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--preset", "zoo", "--profile", "{p}", "--threads", "1", "--method", "plain", "--prompts",
         "reference", "--gamma", "2", "--limit", "1", "--max-new-tokens", "64", "--min-rounds", "1",
         "--max-rounds", "1", "--no-progress"],  # the Qwen profile's own method and prompts
        ["calibrate", "acceptance", "--preset", "zoo", "--threads", "1", "--method", "M", "--limit", "1",
         "--max-new-tokens", "8", "--no-progress", "--out", "{p}"],
        ["calibrate", "latency", "--preset", "zoo", "--threads", "1", "--quiet", "--out", "{p}",
         "--contexts", "32", "--gammas", "1,2", "--batch-sizes", "1", "--min-repeats", "2", "--max-repeats",
         "2", "--no-vision"],
    ],
)  # fmt: skip
def test_another_pairs_profile_is_refused_before_anything_is_measured(monkeypatch, tmp_path, capsys, argv):
    """A profile is one pair's: the zoo's runs were priced against the Qwen pair's profile (verify +33217 %)
    and written into it, replacing its own rows; now one line, the file untouched, and before the models
    load (it was after: minutes at 7B scale)."""
    import calibrate.models.loading as loading

    monkeypatch.setattr(loading, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    monkeypatch.setattr(loading, "model_from_spec", lambda *a, **k: pytest.fail("models loaded"))
    other = tmp_path / "qwen.json"
    other.write_bytes(resolve_profile_path("qwen2.5-coder-0.5b-1.5b-cpu-check").read_bytes())
    before = other.read_bytes()
    assert main([a.format(p=other) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "measured on target 'qwen2.5-coder-1.5b-instruct' / draft 'qwen2.5-coder-0.5b-instruct'" in err
    assert "this run loads 'zoo:target' / 'zoo:draft'" in err and other.read_bytes() == before


@pytest.mark.parametrize("command", [["check", "--profile", "zoo-cpu-batch", "--no-write"],
                                     ["calibrate", "acceptance", "--out", "{d}/n.json"]])  # fmt: skip
@pytest.mark.parametrize("flag", ["--target", "--draft"])
def test_a_preset_beside_a_model_flag_is_refused(tmp_path, capsys, command, flag):
    """--preset names both models: a --target or --draft beside it went unread, and the preset's pair ran."""
    argv = [a.format(d=tmp_path) for a in command] + ["--preset", "zoo", "--method", "M", flag, "x"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "specsim: error: models: give either --preset PAIR or --target and --draft, not both"


def test_a_gamma_past_the_profiles_grid_is_refused_before_the_models_load(monkeypatch, capsys):
    """It was refused after the models loaded and the runs ran (γ 1000 with a RuntimeWarning first)."""
    import calibrate.workload.run_setup as setup

    monkeypatch.setattr(setup, "load_setup", lambda *a, **k: pytest.fail("models loaded"))
    argv = ["check", "--preset", "zoo", "--profile", "zoo-cpu-batch", "--no-write", "--method", "M"]
    for gamma in ("9", "1000"):
        assert main([*argv, "--gamma", f"2,{gamma}"]) == 2
        err = capsys.readouterr().err
        said = f"--gamma {gamma}: the profile's grid stops at gamma 8 (give --gamma up to it)"
        assert err == f"specsim: error: {said}\n"


def test_a_bad_policy_is_named_once(capsys):
    """The policy parser names --policy itself: check prefixed it again ("--policy 'X': --policy: ...")."""
    argv = ["check", "--preset", "zoo", "--profile", "zoo-cpu-batch", "--no-write", "--policy", "X"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: --policy: expected a policy like") and err.count("--policy") == 1


@pytest.mark.parametrize("flag", ["--contexts", "--verify-context", "--prefill-tokens"])
def test_latency_sizes_past_the_targets_positions_are_refused_before_loading(
    monkeypatch, tmp_path, capsys, flag
):
    """Read off the zoo target's config (1024 positions): the models loaded, then the plan was refused. The
    zoo's draft has 1024 too: the tie names the target."""
    import calibrate.workload.run_setup as setup

    monkeypatch.setattr(setup, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    out = tmp_path / "l.json"
    assert main(["calibrate", "latency", "--preset", "zoo", "--out", str(out), flag, "100000"]) == 2
    err = capsys.readouterr().err
    assert err == f"specsim: error: {flag}: 100000 tokens, past the target's 1024 max positions\n"
    assert not out.exists()
