"""A context or a request longer than the target's window (its config's max_position_embeddings) is no
figure a run can have: `hardware`, `recommend`, `serve`, `tune`, `predict` and `sweep` refuse it where
given, and `hardware` leaves its default contexts beyond the window out, saying so. A context holds a
block: the verify pass writes γ + 1 positions after it."""

import json

import pytest

from specsim.cli.main import main
from specsim.hardware.model import spec_from_config
from specsim.hardware.model_resolution import load_model_spec, shipped_models


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.filterwarnings("ignore::specsim.errors.SpecsimWarning")  # quantized checkpoints say so
def test_the_window_is_read_from_the_config_and_every_shipped_model_states_one():
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    cfg |= {"intermediate_size": 128, "vocab_size": 100}
    assert spec_from_config(cfg).max_positions is None  # not stated: not checked
    assert spec_from_config(cfg | {"max_position_embeddings": 2048}).max_positions == 2048
    models = [
        m.id for m in shipped_models() if "eagle" not in m.id.lower()
    ]  # a head reads the target's positions
    assert [m for m in models if load_model_spec(m).max_positions is None] == []
    assert load_model_spec("llama-3.1-8b").max_positions == 131072


def test_hardware_leaves_default_contexts_beyond_the_window_out_and_refuses_given_ones(capsys):
    base = ["hardware", "--device", "h100-sxm", "--batch", "1", "--alpha", "0.7"]
    assert main([*base, "--json"]) == 0  # llava-1.5-7b: 4096 positions; the defaults are 1024,4096,8192
    plan = json.loads(capsys.readouterr().out)["plan"]
    # a context at the window holds no block: the verify pass writes gamma + 1 positions past it
    assert sorted({r["context_tokens"] for r in plan["rows"]}) == [1024]
    note = "context 4096,8192 left out: a γ 8 block there needs context + 9 positions, beyond llava-1.5-7b's"
    assert any(note in a for a in plan["assumptions"])
    assert main([*base, "--context", "1024,8192"]) == 2
    err = _error(capsys)
    assert "--context: 8201 positions for a γ 8 block at context 8192 (+ γ + 1), beyond llava-1.5-7b's" in err
    assert "give a smaller --context or --gamma-max" in err
    assert main([*base, "--context", "4087", "--json"]) == 0  # 4087 + 8 + 1 = 4096 positions: it fits
    assert main([*base, "--context", "4088"]) == 2
    assert "--context: 4097 positions for a γ 8 block at context 4088" in _error(capsys)
    assert main([*base, "--context", "4088", "--gamma-max", "7", "--json"]) == 0
    capsys.readouterr()
    assert main([*base, "--prompt-tokens", "4000", "--output-tokens", "200"]) == 2
    assert "--prompt-tokens/--output-tokens: 4208 positions for a γ 8 block at context 4000 + 199" in _error(
        capsys
    )
    # a request whose positions fit but whose last block does not: the verify pass writes γ + 1 past it
    at_gamma = [*base[:-2], "--tau", "3", "--gamma", "4"]
    argv = [*at_gamma, "--prompt-tokens", "4095", "--output-tokens", "1"]
    assert main(argv) == 2
    err = _error(capsys)
    assert "4100 positions for a γ 4 block at context 4095 (+ γ + 1)" in err
    assert err.rstrip().endswith("give a smaller --prompt-tokens/--output-tokens or --gamma")  # the γ given
    assert main([*argv[:-3], "4091", "--output-tokens", "1", "--json"]) == 0  # 4091 + 4 + 1 = 4096: fits
    capsys.readouterr()
    assert main([*at_gamma, "--context", "4095"]) == 2
    assert _error(capsys).rstrip().endswith("give a smaller --context or --gamma")


def test_where_no_default_context_holds_a_block_the_largest_that_does_stands_in(capsys):
    argv = ["hardware", "--pair", "zoo", "--alpha", "0.7", "--device", "l4", "--batch", "1", "--json"]
    assert main(argv) == 0  # the zoo's target has 1024 positions: 1024 + 8 + 1 is beyond them
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["contexts"] == [1015] and {r["context_tokens"] for r in plan["rows"]} == {1015}
    assert any(a.endswith("beyond zoo:target's 1024; context 1015 instead") for a in plan["assumptions"])


def test_recommend_refuses_a_context_where_its_largest_gamma_block_does_not_fit(capsys):
    base = ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7"]
    assert main([*base, "--context", "4090", "--gamma-max", "5"]) == 0  # 4090 + 5 + 1 = 4096
    capsys.readouterr()
    assert main([*base, "--context", "4090", "--gamma-max", "6"]) == 2
    assert "--context: 4097 positions for a γ 6 block at context 4090" in _error(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        [
            "recommend",
            "--engine",
            "vllm",
            "--pair",
            "llava-1.5-7b-68m",
            "--alpha",
            "0.7",
            "--context",
            "4097",
        ],
        ["serve", "--alpha", "0.7", "--requests", "10", "--rate", "2", "--prompt-tokens", "3500"],
        ["tune", "--alpha", "0.7", "--requests", "10", "--trials", "2", "--prompt-tokens", "3500"],
    ],
)
def test_recommend_serve_and_tune_refuse_what_the_window_cannot_hold(capsys, argv):
    # serve and tune: 3500 prompt + 576 image + 256 output tokens = 4332 positions
    assert main([*argv, "--no-progress"] if argv[0] == "tune" else argv) == 2
    assert "beyond llava-1.5-7b's 4096 positions (max_position_embeddings)" in _error(capsys)


@pytest.mark.parametrize(
    "argv, want",
    [
        (["predict", "--gamma", "3", "--context-tokens", "100000"], "100004 positions for a γ 3 block"),
        (["sweep", "--gamma", "1-4", "--context-tokens", "1020"], "1025 positions for a γ 4 block"),
        (
            ["predict", "--gamma", "3", "--context-tokens", "1000", "--new-tokens", "64"],
            "1068 positions for a γ 3 block at context 1000 + 64 new tokens",
        ),
    ],
)
def test_predict_and_sweep_refuse_a_context_past_the_profiles_target_window(capsys, argv, want):
    # zoo-cpu-batch measured the zoo's target, 1024 positions; linear extrapolation went on past them
    assert main([*argv, "--profile", "zoo-cpu-batch", "--method", "M"]) == 2
    err = _error(capsys)
    assert want in err and "beyond zoo:target's 1024 positions" in err and err.rstrip().endswith("--gamma")


def test_predict_prices_a_context_whose_block_fits(capsys):
    assert main(["predict", "--gamma", "3", "--context-tokens", "1020", "--profile", "zoo-cpu-batch"]) == 0


def test_hardware_holds_a_given_image_size_to_the_contexts(capsys):
    """Qwen2.5-VL's image tokens follow the size (28-pixel patches merged 2x2): a context, or a prompt,
    shorter than one image of the --image-size given contradicts it."""
    base = ["hardware", "--target", "qwen2.5-vl-7b", "--draft", "qwen2.5-vl-3b", "--device", "h100-sxm"]
    base += ["--tau", "3", "--gamma", "4", "--batch", "1"]
    assert main([*base, "--image-size", "4000x4000", "--context", "1024"]) == 2
    err = _error(capsys)
    assert "--context: 1024, but one image fills 16384 of" in err and "expected at least 16384" in err
    assert main([*base, "--image-size", "4000x4000", "--prompt-tokens", "1000", "--output-tokens", "9"]) == 2
    assert _error(capsys).startswith("specsim: error: --prompt-tokens: 1000, but one image fills 16384")
    assert main([*base, "--image-size", "4000x4000"]) == 2  # above every default context
    assert "give a --context of at least 16384 or a smaller size" in _error(capsys)
    assert main([*base, "--image-size", "2000x2000", "--json"]) == 0  # 5041 tokens: 1024 and 4096 left out
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert {r["context_tokens"] for r in plan["rows"]} == {8192}
    assert any(a.startswith("context 1024,4096 left out: one image fills 5041") for a in plan["assumptions"])
    assert main([*base, "--context", "1024", "--json"]) == 0  # no size given: the context may be text
    capsys.readouterr()
