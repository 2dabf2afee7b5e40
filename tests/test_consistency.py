"""``hardware``, ``serve`` and ``recommend`` on the same inputs agree, or say why not: serve prints, beside
its served TPOT speedup, the decode-phase speedup ``hardware`` prints for the same pair, device, runtime,
acceptance and γ at the run's mean decode batch, and the two are that one number."""

import json

import pytest

from specsim.cli.main import main

PAIR = ["--pair", "llava-1.5-7b-68m", "--device", "h100-sxm", "--runtime", "vllm"]


def _json(capsys, argv) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("acceptance", [["--alpha", "0.7"], ["--tau", "2.6"]])
def test_serve_prints_what_hardware_prints_for_the_decode_phase(capsys, acceptance):
    serve = ["serve", *PAIR, *acceptance, "--gamma", "3", "--rate", "8", "--requests", "300", "--no-progress"]
    phase = _json(capsys, [*serve, "--json"])["comparison"]["decode_phase"]
    hw = ["hardware", *PAIR, *acceptance, "--gamma", "3", "--batch", str(phase["batch"])]
    hw += ["--context", str(phase["context_tokens"]), "--json"]
    assert _json(capsys, hw)["plan"]["rows"][0]["speedup"] == pytest.approx(phase["speedup"], rel=1e-12)
    text = main(serve) == 0 and capsys.readouterr().out
    head = "decode phase, as `specsim hardware` prices these inputs"
    assert f"{head} (gamma 3, context {phase['context_tokens']}" in text
    assert "the served TPOT speedup also counts prefills riding in the steps" in text


def test_a_rate_sweep_names_the_decode_phase_at_each_rate(capsys):
    argv = ["serve", *PAIR, "--alpha", "0.7", "--rates", "1,16", "--requests", "150", "--no-progress"]
    out = _json(capsys, [*argv, "--json"])["sweep"]
    assert [p["batch"] for p in out["decode_phase"]] == sorted(p["batch"] for p in out["decode_phase"])
    assert main(argv) == 0 and capsys.readouterr().out.count(" (served ") == 2


def test_a_run_that_decodes_nothing_prints_no_decode_phase(capsys):
    """One output token per request comes from each prefill: no step decodes, TPOT has no value, and no
    decode-phase speedup is priced for it (a mean decode batch of 0 was rounded up to batch 1)."""
    argv = ["serve", *PAIR, "--alpha", "0.7", "--rate", "4", "--requests", "10", "--output-tokens", "1"]
    out = _json(capsys, [*argv, "--json"])["comparison"]
    assert out["tpot_p50_speedup"] is None and "decode_phase" not in out
    assert main(argv) == 0 and "decode phase" not in capsys.readouterr().out
