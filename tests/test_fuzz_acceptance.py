"""Seeded fuzzing of issue 51's surfaces: acceptance specs (``--acceptance``, the tuner's draft options),
``--tau``, and the options ``serve`` ignored or priced free (``--tp``/``--runtime`` with a cost profile,
``--images`` on a text-only pair). Invariant (:func:`tests.test_fuzz_inputs.check_run`): exit 0 with strict
output, or exit 2 with one ``specsim: error:`` line; a spec is parsed or refused in one short line, fast."""

import random

from specsim.predict.acceptance_source import parse_acceptance
from tests.test_fuzz_commands import _bounded, _spec_string
from tests.test_fuzz_inputs import _NUMBER_ARGS, check_run

HEADS = ["", "alpha:", "tau:", "tau:2@", "tau:x:", "positions:", "positions:0.5,", "traces:", "profile:", ":"]


def test_acceptance_spec_strings():
    rng = random.Random(5100)
    for _ in range(400):
        acc = _bounded(parse_acceptance, _spec_string(rng, HEADS, ",@:/"))
        if acc is not None:  # whatever parses gives a τ in [1, γ+1] at every γ, with its source
            for gamma in (1, 4, 9):
                tau, source = acc.tau_with_source(gamma)
                assert 1.0 <= tau <= gamma + 1 + 1e-9 and source


def test_acceptance_options_of_every_command(capsys):
    rng = random.Random(5101)
    pair = ["--pair", "llava-1.5-7b-68m", "--device", "h100-sxm"]
    commands = [
        ["serve", *pair, "--requests", "12", "--no-progress"],
        ["hardware", *pair, "--batch", "1,8", "--context", "512"],
        ["recommend", "--engine", "vllm", *pair, "--batch", "1,8"],
    ]
    for _ in range(24):
        argv = list(rng.choice(commands))
        flag = rng.choice(["--acceptance", "--tau", "--alpha"])
        value = _spec_string(rng, HEADS, ",@:") if flag == "--acceptance" else rng.choice(_NUMBER_ARGS)
        argv += [flag, value] + (["--gamma", rng.choice(["3", "0", "x"])] if argv[0] != "recommend" else [])
        if argv[0] == "recommend" and flag == "--tau":
            argv[-2] = "--alpha"
        check_run(capsys, argv + rng.choice([[], ["--json"]]))


def test_options_serve_would_ignore_or_price_free(capsys):
    rng = random.Random(5102)
    cost = ["serve", "--cost-profile", "zoo-cpu-batch", "--alpha", "0.6", "--requests", "8", "--no-progress"]
    text = ["serve", "--pair", "qwen2.5-coder-0.5b-1.5b", "--alpha", "0.6", "--requests", "8"]
    text += ["--no-progress"]
    for _ in range(12):
        n = rng.choice(_NUMBER_ARGS)
        check_run(capsys, [*cost, "--tp", n])
        code = check_run(capsys, [*text, "--images", n])
        assert code == 2 or n in ("0", "0.0"), n  # images on a text-only target are never free
    check_run(capsys, [*cost, "--tp", "2"], expect="--tp: applies to roofline pricing")
    check_run(capsys, [*cost, "--runtime", "vllm"], expect="--runtime: applies to roofline pricing")
    check_run(capsys, [*cost, "--pair", "llava-1.5-7b-68m"], expect="its costs are those models'")
