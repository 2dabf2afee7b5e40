"""README's `specsim validate` figures are what the command prints today (they had drifted: the paragraph
said 110 rows and 9.3 % while the command printed 157 rows and 10.5 %)."""

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
