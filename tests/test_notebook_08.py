"""Execute notebooks/08_batch.ipynb (published batch sweeps, the H100 plan, the CPU's batched checks) and hold
its claim that the plan is what `specsim hardware` prints."""

import json
from pathlib import Path

from tests.conftest import run_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "08_batch.ipynb"


def test_batch_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's package
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=300)
    assert "stops from" in text and "published below 1" in text
    assert "leave-one-source-out" in text and "not validated here" in text
    assert "median |error|" in text and "predicted" in text
    assert images >= 2


def test_the_plan_is_what_the_command_prints(capsys):
    """Every speedup the committed notebook prints for the H100 plan equals `specsim hardware --json`'s."""
    from specsim.cli.main import main

    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    cell = next(c for c in code if "plan_hardware(" in "".join(c["source"]))
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    shown = {
        int(p[0]): p[2]
        for p in (line.split() for line in printed.splitlines())
        if len(p) >= 4 and p[0].isdigit() and p[3] in ("yes", "NO")
    }
    assert len(shown) >= 8
    argv = ["hardware", "--pair", "llava-1.5-7b-68m", "--device", "h100-sxm", "--runtime", "vllm"]
    argv += ["--context", "1024", "--batch", ",".join(map(str, shown))]
    argv += ["--method", "M", "--scenario", "ChartQA"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["plan"]["rows"]
    got = {r["batch_size"]: f"{r['speedup']:.2f}" for r in rows}
    assert got == shown
