"""Execute notebooks/04_hardware_planning.ipynb end to end (it checks the roofline by hand itself)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from specsim.hardware.model import preset_names

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "04_hardware_planning.ipynb"


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_hardware_notebook_runs(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "h100-sxm" in outputs and "speedup < 1 from batch" in outputs and "assumptions" in outputs
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 1
