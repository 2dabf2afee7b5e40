"""`calibrate acceptance` / `check` with --method on tiny zoo-architecture models, and the built-in zoo prompt
set."""

import json
from importlib import resources
from pathlib import Path

import pytest
import torch

from calibrate.drafting import Method
from specsim.cli.main import main
from specsim.profiles import load_profile

METHODS = ["M", "T", "C", "F", "P4", "MTC", "adaptive:MT"]


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """Tiny zoo target/draft/captioner folders (a few training steps: weights barely matter here)."""
    from calibrate.zoo.train import main as train

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("zoo")
    assert (
        train(
            [
                "--out",
                str(out),
                "--size",
                "tiny",
                "--threads",
                "1",
                "--n-train",
                "60",
                "--n-validation",
                "4",
                "--n-eval",
                "1",
                "--steps",
                "vision=1",
                "--steps",
                "target=1",
                "--steps",
                "draft=1",
                "--steps",
                "captioner=1",
                "--no-progress",
            ]
        )
        == 0
    )
    return {r: str(out / r) for r in ("target", "draft", "captioner")}


def _models(zoo, captioner=True):
    args = ["--target", zoo["target"], "--draft", zoo["draft"], "--threads", "1", "--no-progress"]
    return args + (["--captioner", zoo["captioner"]] if captioner else [])


def test_method_names_and_costs():
    assert [
        Method.parse(m).code
        for m in (
            "multimodal",
            "text-only",
            "caption",
            "target-features",
            "pooled(4)",
            "zero-rows",
            "MTCP4",
            "adaptive:MT",
            "plain",
        )
    ] == ["M", "T", "C", "F", "P4", "Z", "MTCP4", "adaptive:MT", "plain"]
    assert Method.parse("MTC").costs(5) == {
        "draft_batch_size": 3,
        "uses_draft_vision": True,
        "captions_per_prompt": 5,
        "weights": (1 / 3, 1 / 3, 1 / 3),
    }
    assert Method.parse("T").costs(2)["uses_draft_vision"] is False
    assert Method.parse("F").costs(2)["uses_draft_vision"] is False
    assert Method.parse("Z").costs(2)["uses_draft_vision"] is False
    assert Method.parse("P4").costs(1) == {
        "draft_batch_size": 1,
        "uses_draft_vision": True,
        "captions_per_prompt": 0,
        "weights": None,
    }


def test_acceptance_records_every_method_per_scenario(tiny_zoo, tmp_path, capsys):
    out = tmp_path / "zoo.json"
    argv = [
        "calibrate",
        "acceptance",
        *_models(tiny_zoo),
        "--prompts",
        "zoo",
        "--limit",
        "3",
        "--max-new-tokens",
        "5",
        "--top-k",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv + [a for m in METHODS for a in ("--method", m)] + ["--method", "multimodal"]) == 0
    prof = load_profile(str(out))
    got = {(a.scenario, a.method): a for a in prof.acceptance}
    assert set(got) == {(f"zoo-{n}img", m) for n in (1, 2, 5) for m in METHODS}  # 'multimodal' is M
    for (scenario, method), a in got.items():
        n = int(scenario.split("-")[1][0])
        assert a.images_per_prompt == n and len(a.traces) == 1 and 1 <= len(a.traces[0].match) <= 5
        assert a.draft_batch_size == (3 if method == "MTC" else 2 if method == "adaptive:MT" else 1)
        assert a.captions_per_prompt == (n if "C" in method else 0)
        assert a.uses_draft_vision == any(c in method for c in "MP")
        t = a.traces[0]  # --top-k 3: every method, ensembles included, has ranks and top-3 probabilities
        assert len(t.draft_rank) == len(t.match) and all(
            (r == 0) == bool(m) for r, m in zip(t.draft_rank, t.match)
        )
        assert all(len(row) == 3 and row[0] >= row[1] >= row[2] for row in t.draft_top_probs)
    # Each context's length is what its method feeds the draft: T drops the 16 image tokens per image and
    # P4 keeps 4 of them, so T < P4 < M on the 5-image story.
    ctx = {m: got[("zoo-5img", m)].draft_prompt_tokens for m in ("M", "T", "P4")}
    assert ctx["T"] < ctx["P4"] == ctx["M"] - 5 * 12
    assert "zoo-5img/MTC" in capsys.readouterr().out


def test_image_prompts_need_multimodal_methods_and_captions_a_captioner(tiny_zoo, tmp_path, capsys):
    base = ["calibrate", "acceptance", "--prompts", "zoo", "--limit", "1", "--out", str(tmp_path / "p.json")]
    assert main(base + _models(tiny_zoo)) == 2
    assert "expected multimodal methods" in capsys.readouterr().err
    assert main(base + _models(tiny_zoo, captioner=False) + ["--method", "MC"]) == 2
    assert "needs --captioner" in capsys.readouterr().err
    assert main(base + _models(tiny_zoo) + ["--method", "T", "--top-k", "2", "--temperature", "0.5"]) == 2
    assert "--top-k" in capsys.readouterr().err
    assert main(base + _models(tiny_zoo) + ["--method", "MX"]) == 2
    err = capsys.readouterr().err
    assert "'MX'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_check_compares_every_method_and_scenario(tiny_zoo, tmp_path, capsys):
    prof = tmp_path / "zoo.json"
    assert (
        main(
            [
                "calibrate",
                "latency",
                "--target",
                tiny_zoo["target"],
                "--draft",
                tiny_zoo["draft"],
                "--threads",
                "1",
                "--contexts",
                "64,256",
                "--gammas",
                "1,2",
                "--batch-sizes",
                "1,2",
                "--prefill-tokens",
                "32,128",
                "--min-repeats",
                "2",
                "--max-repeats",
                "2",
                "--quiet",
                "--out",
                str(prof),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                *_models(tiny_zoo, captioner=False),
                "--prompts",
                "zoo",
                "--limit",
                "3",
                "--max-new-tokens",
                "5",
                "--method",
                "M",
                "--method",
                "MT",
                "--out",
                str(prof),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "check",
                "--profile",
                str(prof),
                *_models(tiny_zoo, captioner=False),
                "--prompts",
                "zoo",
                "--limit",
                "3",
                "--max-new-tokens",
                "5",
                "--method",
                "M",
                "--method",
                "MT",
                "--gamma",
                "1,2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "zoo-5img" in out and "scenario" in out
    rows = load_profile(str(prof)).checks
    assert {(r.scenario, r.method, r.gamma) for r in rows} == {
        (f"zoo-{n}img", m, g) for n in (1, 2, 5) for m in ("M", "MT") for g in (1, 2)
    }
    # Greedy SD is exactly the replayed trace: measured τ equals the predicted τ for the same prompts.
    assert all(abs(r.tau_measured - r.tau_predicted) < 1e-9 for r in rows)
    assert "trace replay == engine for 2/2" in out


def test_builtin_zoo_prompt_set_is_the_generators_output():
    from calibrate.workload.prompt_sets import load_prompts
    from calibrate.zoo.zoo_prompts import PER_SCENARIO, records, select_examples

    folder = Path(str(resources.files("calibrate") / "prompts"))
    examples = select_examples()
    lines = (folder / "zoo.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == records(examples)
    for e in examples[:6]:  # pixels of the committed PNGs are the rendered scenes
        from PIL import Image

        for k, img in enumerate(e.images()):
            with Image.open(folder / "zoo" / f"{e.uid}-{k}.png") as png:
                assert png.convert("RGB").tobytes() == img.tobytes()
    prompts = load_prompts("zoo")
    assert len(prompts) == 3 * PER_SCENARIO
    assert {Path(i).name for p in prompts for i in p.images} == {p.name for p in (folder / "zoo").iterdir()}
    assert [p.images_per_prompt for p in prompts[:3]] == [1, 2, 5]
    assert all(Path(i).is_file() for p in prompts for i in p.images)
