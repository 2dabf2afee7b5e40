"""Execute notebooks/02_calibrate_and_check.ipynb on a committed profile (no model runs inside)."""

from pathlib import Path

from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_calibrate_and_check.ipynb"


def test_calibrate_and_check_notebook_runs(tmp_path):
    text, images = run_notebook(NOTEBOOK, tmp_path)
    assert "tau: replay vs engine, largest |rel. err|" in text
    assert "textbook" in text and "median |rel. err|" in text
    assert "95% hw" in text and "draft pred" in text and "v(γ) =" in text  # half-widths and per-term table
    assert images >= 5
