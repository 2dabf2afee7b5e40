"""Labels say where each number came from: a τ is starred as an extrapolation only where one was made (a
measured γ's α carried to another γ, not a τ or α given on the command line), and a fixed γ is not called
the best one."""

import re

from specsim.cli.main import main

H100 = ["--device", "h100-sxm", "--batch", "1,8", "--context", "1024"]


def _hardware(capsys, *argv) -> str:
    assert main(["hardware", *argv, *H100]) == 0
    return capsys.readouterr().out.split("validation of these speedups")[0]  # the plan, not its validation


def test_a_given_alpha_is_not_an_extrapolation_and_a_fixed_gamma_is_not_the_best(capsys):
    models = ["--target", "llama-2-70b", "--draft", "llama-2-7b"]
    out = _hardware(capsys, *models, "--alpha", "0.7", "--gamma", "4")
    # no starred tau ('2.77*'; a product such as '4*0.1307' in the overhead line is no mark)
    assert "extrapolation" not in out and not re.search(r"\d\*(?![\d.])", out.replace("gamma*c", ""))
    assert "best γ" not in out and "best-γ" not in out
    assert "speedup at γ = 4 vs batch size" in out


def test_a_measured_tau_carried_to_another_gamma_is_starred(capsys):
    out = _hardware(capsys, "--pair", "llava-1.5-7b-68m", "--gamma", "3")  # IbED measured γ = 5
    assert "* tau at this gamma is an i.i.d. extrapolation from the measured gamma" in out
    assert "best γ" not in out


def test_the_best_gamma_is_called_so_when_it_was_searched(capsys):
    out = _hardware(capsys, "--target", "llama-2-70b", "--draft", "llama-2-7b", "--alpha", "0.7")
    assert "best γ" in out and "extrapolation" not in out
