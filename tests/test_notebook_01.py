"""Execute notebooks/01_theory.ipynb end to end (it asserts the Table 1b reproduction itself)."""

from pathlib import Path

from tests.conftest import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_theory.ipynb"


def test_theory_notebook_runs(tmp_path):
    text, images = run_notebook(NOTEBOOK, tmp_path)
    assert "largest |ours - paper|" in text
    assert images >= 3
