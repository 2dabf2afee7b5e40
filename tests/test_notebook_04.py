"""Execute notebooks/04_hardware_planning.ipynb end to end (it checks the roofline by hand itself)."""

from pathlib import Path

import pytest

from specsim.hardware.model import preset_names
from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "04_hardware_planning.ipynb"


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_hardware_notebook_runs(tmp_path):
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=180)
    assert "h100-sxm" in text and "speedup < 1 from batch" in text and "assumptions" in text
    assert images >= 1
