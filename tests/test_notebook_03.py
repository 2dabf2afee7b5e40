"""Execute notebooks/03_drafting_methods.ipynb on the committed zoo profile (no model runs inside)."""

from pathlib import Path

from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_drafting_methods.ipynb"


def test_drafting_methods_notebook_runs(tmp_path):
    text, images = run_notebook(NOTEBOOK, tmp_path)
    assert "zoo-5img" in text and "adaptive:MTC" in text
    assert "fact positions" in text and "median |rel. err|" in text
    assert images >= 5
