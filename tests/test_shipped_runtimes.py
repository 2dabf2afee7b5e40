"""The shipped runtime files are what the fit they cite writes today (they had drifted: vLLM's said
`specsim validate --fit-all --write-runtimes specsim/hardware/runtimes` but held an older fit's values, e.g.
draft_floor_ms_per_forward 0.50 ms where the command now fits 0.17 ms)."""

import json

import pytest

from specsim.cli.cmd_validate import FIT_COMMAND
from specsim.hardware.runtime import RUNTIMES_DIR, load_runtime
from specsim.validation.gpu_steps import load_records
from specsim.validation.published_set import load_published_set
from specsim.validation.runtime_fit import fit_all, load_runtimes
from specsim.validation.step_fit import STEP_FIT, fit_steps, step_set
from tests.conftest import json_close


def test_shipped_runtimes_are_what_the_cited_fit_writes():
    ps = load_published_set()
    fitted = fit_all(ps, load_runtimes(ps), FIT_COMMAND)
    assert fitted
    for name, rt in fitted.items():
        shipped = json.loads((RUNTIMES_DIR / f"{name}.json").read_text())
        same = json_close(rt.to_json(), shipped, rel=1e-4, abs_=1e-6)
        assert same, f"{name}.json is not what `{FIT_COMMAND}` writes"


def test_shipped_hf_eager_is_what_its_step_fit_writes():
    """hf-eager is fitted on our own GPU HF steps instead (`python bench/hf_eager_fit.py --write`): each
    fitted parameter is what that fit gives today."""
    shipped = load_runtime("hf-eager")
    mode, starts = STEP_FIT["hf-eager"]
    fitted = fit_steps(shipped, step_set(load_records(), mode), starts, "a check")
    for key in starts:
        assert getattr(fitted, key) == pytest.approx(getattr(shipped, key), rel=1e-4, abs=1e-6), key
