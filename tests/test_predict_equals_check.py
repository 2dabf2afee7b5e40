"""``specsim check`` tests exactly what ``specsim predict`` prints: for every greedy check row committed in
the reference pair's and the zoo's profiles (chains, token trees, draft-length policies), the speedup that
``specsim predict --json`` prints at the check's settings (its γ, tree or policy, its --max-new-tokens 64) is
the row's predicted column. Both come from :func:`specsim.predict.pricing.price`; a second pricing path in
either command would break this."""

import json

import pytest

from specsim.cli.main import main
from specsim.profiles import load_profile

# The profiles' checks ran with --max-new-tokens 64 (their provenance says so).
CHECKED = ("zoo-cpu", "qwen2.5-coder-0.5b-1.5b-cpu-trees")
MAX_NEW_TOKENS = "64"


def _predict_json(capsys, *args) -> object:
    assert main(["predict", *args, "--max-new-tokens", MAX_NEW_TOKENS, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", CHECKED)
def test_predict_prints_the_checks_predicted_column(capsys, name):
    rows = [r for r in load_profile(name).checks if r.temperature is None]
    chains = [r for r in rows if r.draft is None]
    drafts = sorted({r.draft for r in rows if r.draft is not None})
    assert chains and drafts, "the committed checks cover chains and trees or policies"
    printed = {}
    for gamma in sorted({r.gamma for r in chains}):
        for p in _predict_json(capsys, "--profile", name, "--gamma", str(gamma)):
            printed[(p["method"], p["scenario"], None, gamma)] = p["speedup"]
    flags = [x for d in drafts for x in (f"--{d.split(':')[0]}", d.split(":", 1)[1])]
    out = _predict_json(capsys, "--profile", name, "--gamma", "1", *flags)
    for comparison in out["drafts"]:
        for p in comparison["drafts"]:
            printed[(comparison["method"], comparison["scenario"], p["draft"], p["gamma"])] = p["speedup"]
    for r in rows:
        label = None if r.draft is None else r.draft.split(":", 1)[0] + ":" + r.draft.split(":", 1)[1]
        key = (r.method, r.scenario, label, r.gamma)
        assert printed[key] == pytest.approx(r.speedup_predicted, rel=1e-12), key


# llama.cpp's one-request checks ran with --max-new-tokens 64 as well (README, "llama.cpp").
LLAMA_CPP_CHECKED = ("llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu", "llama-cpp-qwen2.5-coder-0.5b-1.5b-cpu-check")


@pytest.mark.parametrize("name", LLAMA_CPP_CHECKED)
def test_predict_prints_the_llama_cpp_checks_predicted_column(capsys, name):
    """A check of llama.cpp's own SD is priced by the same ``price`` as ``predict``: every draft-model row's
    predicted speedup (τ from the traces) is what ``predict`` prints at its γ."""
    rows = [r for r in load_profile(name).checks if r.runtime == "llama.cpp" and r.draft is None]
    assert len({r.gamma for r in rows}) >= 6, "the committed check covers γ 1..6"
    for r in rows:
        (p,) = [
            p
            for p in _predict_json(capsys, "--profile", name, "--gamma", str(r.gamma))
            if (p["method"], p["scenario"]) == (r.method, r.scenario)
        ]
        assert p["speedup"] == pytest.approx(r.speedup_predicted, rel=1e-12), r.gamma
