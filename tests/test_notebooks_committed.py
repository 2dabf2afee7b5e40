"""The committed notebooks carry their outputs (regenerated with `python notebooks/regenerate.py`)."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed(path):
    cells = [
        c
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code" and "".join(c["source"]).strip()
    ]
    missing = [i for i, c in enumerate(cells) if c.get("execution_count") is None]
    assert not missing, (
        f"{path.name}: code cells {missing} were not executed (run python notebooks/regenerate.py)"
    )
    assert sum(len(c["outputs"]) for c in cells) >= len(cells) // 2, (
        f"{path.name}: most cells have no outputs"
    )
    errors = [o for c in cells for o in c["outputs"] if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: committed with an error output"
