"""The shipped runtime files are what the fit they cite writes today (they had drifted: vLLM's said
`specsim validate --fit-all --write-runtimes specsim/hardware/runtimes` but held an older fit's values, e.g.
draft_floor_ms_per_forward 0.50 ms where the command now fits 0.17 ms)."""

import json

from specsim.cli.cmd_validate import FIT_COMMAND
from specsim.hardware.runtime import RUNTIMES_DIR
from specsim.validation.published_set import load_published_set
from specsim.validation.runtime_fit import fit_all, load_runtimes
from tests.conftest import json_close


def test_shipped_runtimes_are_what_the_cited_fit_writes():
    ps = load_published_set()
    fitted = fit_all(ps, load_runtimes(ps), FIT_COMMAND)
    assert fitted
    for name, rt in fitted.items():
        shipped = json.loads((RUNTIMES_DIR / f"{name}.json").read_text())
        same = json_close(rt.to_json(), shipped, rel=1e-4, abs_=1e-6)
        assert same, f"{name}.json is not what `{FIT_COMMAND}` writes"
