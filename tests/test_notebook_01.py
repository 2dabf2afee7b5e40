"""Execute notebooks/01_theory.ipynb end to end (it asserts the Table 1b reproduction itself)."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_theory.ipynb"


def test_theory_notebook_runs(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "largest |ours - paper|" in outputs
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 3
