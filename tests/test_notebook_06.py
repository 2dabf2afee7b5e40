"""Execute notebooks/06_trees_and_policies.ipynb on a committed profile (no model runs inside)."""

from pathlib import Path

import pytest

from specsim.presets import preset_names
from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06_trees_and_policies.ipynb"


@pytest.mark.skipif("qwen2.5-coder-1.5b" not in preset_names(), reason="calibrate presets not installed")
def test_trees_and_policies_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(NOTEBOOK.parents[1]))  # the kernel imports this checkout's package
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=300)
    assert "per-rank acceptance" in text and "best tree" in text and "Tv(n)/Tp at context" in text
    assert "tree:" in text and "policy:" in text and "gamma / draft" in text  # check rows of every kind
    assert "best tree speedup" in text  # the hardware planner's table
    assert images >= 5
