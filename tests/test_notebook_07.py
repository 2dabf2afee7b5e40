"""Execute notebooks/07_serving_engines.ipynb: a vLLM metrics file to a per-batch recommendation."""

import os
from pathlib import Path

import pytest

from specsim.hardware.model import preset_names
from tests.conftest import run_notebook

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
