"""``bench/tree_check.py`` (README, trees): its pair loads for every drafting method, with captions or not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

_spec = importlib.util.spec_from_file_location(
    "tree_check", Path(__file__).resolve().parents[1] / "bench" / "tree_check.py"
)
tree_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree_check)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method", ["MT", "MTC", None])
def test_the_pair_loads_for_any_method(method):
    """It gave caption drafting's prefix to every method, which is refused for one without C: README's
    `--method MT` example exited 1 with a traceback."""
    argv = ["--preset", "zoo", "--limit", "1", "--max-new-tokens", "8"]
    argv += ["--method", method] if method else []
    setup = tree_check._load(tree_check.parse_args(argv))
    assert setup.methods == [method or "T"]
