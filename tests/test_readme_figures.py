"""README's `specsim validate` figures are what the command prints today (they had drifted: the paragraph
said 110 rows and 9.3 % while the command printed 157 rows and 10.5 %), and so are its MoE planning figures
(they had drifted too: 0.78× and c = 0.51 where the command printed 0.80× and 0.45)."""

import json
import re
from pathlib import Path

from specsim.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _validate(capsys, *extra: str) -> dict:
    assert main(["validate", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _today_block() -> str:
    text = README.read_text()
    start = text.index("Today (`specsim validate`")
    return text[start : text.index("Where it misses:", start)]


def test_readme_validate_figures_are_the_commands(capsys):
    out = _validate(capsys, "--no-sweeps")  # the sweeps hold none of these figures
    s, covered = out["summary"], out["summary_fitted_only"]
    (band,) = [b for b in out["batch_bands"] if b["batch_band"] == "batch 16..127"]
    block = _today_block()
    expected = [
        f"{s['rows']} rows from {len(out['sources'])} sources, median {_pct(s['median_abs_error'])}, "
        f"max {_pct(s['max_abs_error'])} (textbook {_pct(s['textbook_median_abs_error'])} / "
        f"{_pct(s['textbook_max_abs_error'])})",
        f"the {covered['rows']} rows whose runtime another source covers: "
        f"{_pct(covered['median_abs_error'])} / {_pct(covered['max_abs_error'])}",
        f"batch 16..127: {_pct(band['median_abs_error'])} / {_pct(band['max_abs_error'])} "
        f"over {band['rows']} rows",
    ]
    flat = re.sub(r"\s+", " ", block)
    for line in expected:
        assert line in flat, (line, flat)
    load = out["load_rows"]["summary"]
    served = (
        f"served {_pct(load['median_abs_error'])} / {_pct(load['max_abs_error'])} over {load['rows']} rows "
        f"against the decode phase's {_pct(load['decode_phase_median_abs_error'])} / "
        f"{_pct(load['decode_phase_max_abs_error'])}"
    )
    assert served in re.sub(r"\s+", " ", README.read_text())


def test_readme_in_sample_figure_is_the_commands(capsys):
    s = _validate(capsys, "--fit-all", "--no-sweeps")["summary"]
    flat = re.sub(r"\s+", " ", _today_block())
    assert f"in-sample (`--fit-all`): {_pct(s['median_abs_error'])} / {_pct(s['max_abs_error'])}" in flat


def _plan_rows(capsys, *argv: str) -> list[dict]:
    assert main(["hardware", *argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["plan"]["rows"]
    return sorted((r for r in rows if r["context_tokens"] == 1024), key=lambda r: r["batch_size"])


def test_readme_moe_planning_figures_are_the_commands(capsys):
    flat = re.sub(r"\s+", " ", README.read_text())
    qwen = _plan_rows(
        capsys,
        *"--target Qwen/Qwen3-30B-A3B --draft Qwen/Qwen3-0.6B --device h100-sxm --runtime vllm".split(),
        *"--batch 1,8,32".split(),
    )
    one, last = qwen[0], qwen[-1]
    assert (
        f"gives {one['speedup']:.2f}× at batch 1 (c = {one['c']:.2f}: the 28-layer draft's per-forward costs "
        f"against a {one['target_ms_per_step']:.1f} ms step" in flat
    )
    assert f"rising to {last['speedup']:.2f}× at batch 32" in flat
    deepseek = "--target deepseek-ai/DeepSeek-V3 --draft-kind mtp --device h200 --tp 8 --alpha 0.8".split()
    split = _plan_rows(capsys, *deepseek, "--batch", "1,16,64")
    spread = _plan_rows(capsys, *deepseek, "--batch", "1,16,64", "--expert-parallel")
    figures = lambda rows: ", ".join(f"{r['speedup']:.2f}×" for r in rows)  # noqa: E731
    assert f"{figures(split)} at batch 1, 16, 64 split, {figures(spread)} spread" in flat
