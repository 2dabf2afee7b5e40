"""Execute every notebook in place so that the committed copies carry their tables and figures.

    python notebooks/regenerate.py            # all notebooks, in order
    python notebooks/regenerate.py 02 06      # only those whose name starts with these

The notebooks read committed data only (profiles under specsim/profiles and notebooks/data); none times
this machine, so their outputs are the same wherever they are regenerated. Kernels run in a temporary
folder, as in the tests (tests/test_notebook_*.py), so files a notebook writes (plots) stay out of the
repo. Execution metadata (timestamps) is dropped to keep diffs to the outputs themselves.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def regenerate(path: Path, workdir: str, timeout_s: int = 600) -> int:
    """Run ``path`` in ``workdir``; write it back executed. Returns its number of outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": workdir}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)
    return sum(len(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code")


def main(argv: list[str]) -> int:
    paths = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    if argv:
        paths = [p for p in paths if any(p.name.startswith(a) for a in argv)]
        if not paths:
            print(f"regenerate: no notebook starts with {', '.join(argv)}", file=sys.stderr)
            return 2
    os.environ["PYTHONPATH"] = str(HERE.parent)  # the kernels import this checkout's package
    for p in paths:
        with tempfile.TemporaryDirectory() as workdir:
            print(f"{p.name}: {regenerate(p, workdir)} outputs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
