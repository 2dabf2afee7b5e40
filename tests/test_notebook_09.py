"""Execute notebooks/09_serving.ipynb (SD under load: the zoo and the reference pair on this CPU from their
measured profiles, LLaVA-1.5-7B/68M planned on an H100) and hold its claims against the command."""

import json
from pathlib import Path

from tests.conftest import run_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "09_serving.ipynb"


def test_serving_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    text, images = run_notebook(NOTEBOOK, tmp_path, timeout=600)
    assert text.count("highest rate with 90% of requests meeting") == 3
    assert "p50 TPOT ms pred/meas" in text and "median |error|" in text
    assert text.count("largest p50 TPOT gain") == 3
    # the simulation against a published serving benchmark (leave-one-source-out)
    assert text.count("SD stops paying from concurrency") == 2 and "served: median |error|" in text
    assert images >= 1


def test_the_h100_sweep_is_what_specsim_serve_prints(capsys):
    """The committed notebook's H100 sweep equals `specsim serve --rates ... --json` with the same flags."""
    from specsim.acceptance.theory import alpha_from_tau
    from specsim.cli.main import main
    from specsim.profiles import load_profile

    nb = json.loads(NOTEBOOK.read_text())
    cell = next(
        c for c in nb["cells"] if c["cell_type"] == "code" and "gpu_sweep = answer(" in "".join(c["source"])
    )
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    ibed = load_profile("ibed-llava1.5-7b-68m").one_entry("M", "ChartQA")
    alpha = float(alpha_from_tau(ibed.tau, ibed.gamma))
    argv = ["serve", "--pair", "llava-1.5-7b-68m", "--device", "h100-sxm", "--runtime", "vllm"]
    argv += ["--requests", "1000", "--prompt-tokens", "512", "--images", "1", "--output-tokens", "256"]
    argv += ["--gamma", "3", "--alpha", repr(alpha), "--rates", "1,2,4,8,16,32,64", "--no-progress", "--json"]
    assert main(argv) == 0
    sweep = json.loads(capsys.readouterr().out)["sweep"]
    for row in sweep["rows"]:
        tpot = f"{row['sd']['tpot_ms']['p50']:.1f} / {row['target_only']['tpot_ms']['p50']:.1f}"
        assert tpot in printed, (row["rate_per_s"], tpot)
