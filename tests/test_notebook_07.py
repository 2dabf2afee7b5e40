"""Execute notebooks/07_serving_engines.ipynb: a vLLM metrics file to a per-batch recommendation."""

import os
from pathlib import Path

import pytest

from specsim.presets import preset_names
from tests.conftest import committed_output, run_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "07_serving_engines.ipynb"


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_serving_engines_notebook_runs(tmp_path, monkeypatch):
    # the kernel imports this checkout's specsim (not whichever one is installed)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=180)
    assert "K = 5" in text and "num_speculative_tokens_per_batch_size" in text and "draft length" in text
    assert "i.i.d." in text or "iid" in text
    assert images >= 2


def test_the_notebooks_recommendation_is_what_the_command_prints(capsys, tmp_path):
    """Notebook 07 says its table is 'the same as specsim recommend ...': run that command on the same
    scrapes and compare every row the committed notebook printed (draft length, speedup, tau, v)."""
    import json
    import re

    from specsim.cli.main import main

    scrapes = [str(ROOT / "notebooks" / "data" / "engines" / f"vllm_scrape_{i}.prom") for i in (1, 2)]
    profile = tmp_path / "served.json"
    assert (
        main(["import", "vllm", *scrapes, "--method", "draft", "--scenario", "chat", "--out", str(profile)])
        == 0
    )
    capsys.readouterr()
    args = ["recommend", "--engine", "vllm", "--profile", str(profile), "--device", "h100-sxm", "--pair",
            "llava-1.5-7b-68m", "--context", "64", "--batch", "1,4,16,64,128,256,512", "--draft-model",
            "my-org/draft", "--json"]  # fmt: skip
    assert main(args) == 0
    table = {r["batch_size"]: r for r in json.loads(capsys.readouterr().out)["table"]}
    printed = committed_output(NOTEBOOK)
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", printed, re.M)
    assert [int(r[0]) for r in rows] == [1, 4, 16, 64, 128, 256, 512]
    for batch, gamma, speedup, tau, v in rows:
        want = table[int(batch)]
        assert (int(gamma), speedup, tau, v) == (
            want["gamma"],
            f"{want['speedup']:.2f}",
            f"{want['tau']:.3f}",
            f"{want['v']:.2f}",
        ), batch
