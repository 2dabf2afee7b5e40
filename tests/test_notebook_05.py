"""Execute notebooks/05_validation_and_planning.ipynb end to end (leave-one-source-out, sweeps, crossovers, TP
plan)."""

from pathlib import Path

import pytest

from specsim.presets import preset_names
from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_validation_and_planning.ipynb"


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_validation_notebook_runs(tmp_path, monkeypatch):
    # The kernel runs in tmp_path: point it at this checkout's package, not whichever one is installed.
    monkeypatch.setenv("PYTHONPATH", str(NOTEBOOK.parents[1]))
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=300)
    assert "all rows: specsim median" in text and "speedup < 1 from batch" in text and "GB on GPU 0" in text
    assert "SD pays at batches" in text and "magicdec" in text
    assert images >= 3
