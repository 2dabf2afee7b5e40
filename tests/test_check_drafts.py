"""`specsim check --tree/--policy` end to end on tiny random models, as a user runs it: latency with tree
grids, top-k acceptance, then real tree and policy runs next to the chain, rows written under their draft
names with replay == engine; and the one-line refusals before any run."""

import json

import pytest

pytest.importorskip("torch")

from specsim.cli.main import main  # noqa: E402
from specsim.profiles import (
    load_profile,
    save_profile,  # noqa: E402
)
from tests.conftest import make_profile  # noqa: E402
from tests.test_check import TINY  # noqa: E402


@pytest.fixture
def files(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        '{"id": "x", "prompt": "def add(a, b):"}\n{"id": "y", "prompt": "Explain recursion."}\n'
    )
    return str(cfg), str(prompts), tmp_path / "prof.json"


def test_check_runs_trees_and_policies_next_to_the_chain(files, capsys):
    cfg, prompts, prof = files
    common = ["--prompts", prompts, "--max-new-tokens", "8", "--threads", "1"]
    assert (
        main(
            [
                "calibrate",
                "latency",
                "--target-config",
                cfg,
                "--draft-config",
                cfg,
                *common,
                "--out",
                str(prof),
                "--gammas",
                "1,2,3",
                "--tree-sizes",
                "2,4",
                "--tree",
                "2,1",
                "--warmup",
                "0",
                "--min-repeats",
                "2",
                "--max-repeats",
                "2",
                "--no-vision",
                "--quiet",
            ]
        )
        == 0
    )
    assert "tree verify Tv(n)" in capsys.readouterr().out
    tree = load_profile(str(prof)).latency.cost_model.tree
    assert (
        tree.trees == ("chain:1", "chain:2", "2,1")
        and tree.verify.rows == (2, 3, 5)
        and tree.draft.rows == (1, 2)
    )
    models = ["--target", cfg, "--draft", cfg, *common, "--no-progress"]
    assert main(["calibrate", "acceptance", *models, "--top-k", "4", "--out", str(prof)]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "check",
                "--profile",
                str(prof),
                "--gamma",
                "2",
                "--tree",
                "2,1",
                "--policy",
                "heuristic:2,max=3",
                "--max-rounds",
                "2",
                *models,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "greedy trees, trace replay == engine for 2/2 (prompt, tree)" in out
    assert "greedy policies, trace replay == engine for 2/2 (prompt, policy)" in out
    assert "tree:2,1" in out and "gamma / draft" in out and "by kind: chain: median" in out
    checks = {c.draft: c for c in load_profile(str(prof)).checks}
    assert set(checks) == {None, "tree:2,1", "policy:heuristic:2,max=3"}
    assert checks["tree:2,1"].gamma == 4 and checks["tree:2,1"].speedup_textbook is None
    assert all(
        c.tau_measured == pytest.approx(c.tau_predicted) for c in checks.values()
    )  # exact greedy replay
    assert all(c.rounds == 2 and c.terms_ms_per_block is not None for c in checks.values())


def test_check_refuses_what_it_cannot_predict_before_running(files, capsys):
    cfg, prompts, prof = files
    save_profile(make_profile(), prof)  # schema-1 tables: a one-context cost model without tree grids
    args = [
        "check",
        "--profile",
        str(prof),
        "--target",
        cfg,
        "--draft",
        cfg,
        "--prompts",
        prompts,
        "--max-new-tokens",
        "8",
        "--no-progress",
    ]
    assert main(args + ["--tree", "2,1"]) == 2
    err = capsys.readouterr().err
    assert "no token-tree grids" in err and len(err.strip().splitlines()) == 1
    assert main(args + ["--tree", "9,9,9,9"]) == 2
    assert "--tree" in capsys.readouterr().err


def test_the_check_warms_up_every_gamma_it_times(monkeypatch):
    """On a GPU each γ's pass shapes (γ+1 verify rows) run their first kernels in the warm-up, not round 1."""
    from types import SimpleNamespace

    from calibrate.measure import check_runs

    warmed = []
    monkeypatch.setattr(check_runs, "decode_run", lambda target, d, req, g, acc, **kw: warmed.append(g))
    monkeypatch.setattr("calibrate.run.engine.target_decode", lambda *a, **k: None)
    setup = SimpleNamespace(requests=["r"], target=None)
    check_runs._warm_up(setup, {"M": "draft"}, [1, 3, 5, "tree"], {"max_new_tokens": 32})
    assert warmed == [1, 3, 5, "tree"]
