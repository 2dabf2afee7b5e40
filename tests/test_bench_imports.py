"""The bench scripts' names from specsim exist: bench/bench_roofline.py imported MethodTau from
specsim.hardware after it moved, and no test ran the script (README lists it)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCH = sorted((Path(__file__).resolve().parents[1] / "bench").glob("*.py"))


@pytest.mark.parametrize("script", BENCH, ids=lambda p: p.name)
def test_every_specsim_name_a_bench_script_imports_exists(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "specsim":
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            try:
                missing = [n for n in missing if importlib.util.find_spec(f"{node.module}.{n}") is None]
            except ModuleNotFoundError:
                pass
            assert not missing, f"{script.name}: {node.module} has no {missing}"
