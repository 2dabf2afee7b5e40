"""Red-team inputs that used to be accepted silently or priced wrongly: each is one line, exit 2, nothing
written, and (calibrate) no model loaded."""

import json

import pytest

from specsim.cli.main import main
from specsim.errors import SpecsimError
from specsim.hardware.model import spec_from_config

LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
}
HARDWARE = ["hardware", "--device", "h100-sxm", "--batch", "1", "--context", "1024", "--alpha", "0.8"]


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("specsim: error: "), captured.err
    assert captured.out == "", captured.out
    return captured.err


# --------------------------------------------------------------------------- 1: HF config values
@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("intermediate_size", 0, ".intermediate_size: expected an integer >= 1, got 0"),
        ("intermediate_size", -4, ".intermediate_size: expected an integer >= 1, got -4"),
        ("num_key_value_heads", 0, ".num_key_value_heads: expected an integer >= 1, got 0"),
        ("num_key_value_heads", -8, ".num_key_value_heads: expected an integer >= 1, got -8"),
        ("head_dim", 0, ".head_dim: expected an integer >= 1, got 0"),
        (
            "num_key_value_heads",
            64,
            ".num_key_value_heads: expected at most num_attention_heads (32), got 64",
        ),
        (
            "num_key_value_heads",
            5,
            ".num_key_value_heads: expected a divisor of num_attention_heads (32), got 5",
        ),
        ("num_attention_heads", 30, ".num_attention_heads: expected a divisor of hidden_size (4096)"),
    ],
)
def test_config_zero_negative_or_inconsistent_heads_are_errors(tmp_path, capsys, key, value, expected):
    path = tmp_path / ".json"
    cfg = {**LLAMA, key: value}
    if key == "num_attention_heads":
        cfg["num_key_value_heads"] = 30
    path.write_text(json.dumps(cfg))
    assert main([*HARDWARE, "--target", str(path), "--draft", "llava-1.5-68m"]) == 2
    assert expected in _one_line(capsys)


@pytest.mark.parametrize("key", ["hidden_size", "image_size", "patch_size"])
def test_vision_config_zero_is_an_error(key):
    cfg = {"model_type": "llava", "text_config": LLAMA, "vision_config": {key: 0}}
    with pytest.raises(SpecsimError, match=rf"vision_config\.{key}: expected an integer >= 1, got 0"):
        spec_from_config(cfg, "m")


def test_config_missing_keys_still_default():
    cfg = {k: v for k, v in LLAMA.items() if k not in ("intermediate_size", "num_key_value_heads")}
    m = spec_from_config(cfg, "m")
    assert (m.intermediate, m.kv_heads, m.head_dim) == (11008, 32, 128)  # LlamaConfig's defaults
    assert spec_from_config({**cfg, "head_dim": 256}, "m").head_dim == 256  # given: no division needed


# --------------------------------------------------------------------------- 2: flags
@pytest.mark.parametrize("flag", ["--dtype", "--kv-dtype"])
@pytest.mark.parametrize("value", ["", "  "])
def test_hardware_empty_dtype_is_an_error(capsys, flag, value):
    assert main([*HARDWARE, flag, value]) == 2
    assert f"{flag}: expected a dtype name" in _one_line(capsys)


def test_hardware_unknown_dtype_names_the_flag(capsys):
    assert main([*HARDWARE, "--dtype", "float12"]) == 2
    assert "--dtype: expected one of" in _one_line(capsys)


@pytest.mark.parametrize(
    "flag, value", [("--validate", None), ("--fit-device", "h100-sxm"), ("--fit-dtype", "float32")]
)
def test_hardware_fit_options_need_fit_profile(tmp_path, capsys, flag, value):
    plot = tmp_path / "p.png"
    args = [*HARDWARE, flag] + ([value] if value else []) + ["--plot", str(plot)]
    assert main(args) == 2
    assert f"{flag}: needs --fit-profile" in _one_line(capsys)
    assert not plot.exists()


def test_validate_write_runtimes_needs_fit_all(tmp_path, capsys):
    out = tmp_path / "runtimes"
    out.mkdir()
    assert main(["validate", "--no-sweeps", "--write-runtimes", str(out)]) == 2
    assert "--write-runtimes: needs --fit-all" in _one_line(capsys)
    assert list(out.iterdir()) == []


def test_validate_runtime_files_must_replace_a_runtime_of_the_data(tmp_path, capsys):
    """--runtime FILE replaces the shipped runtime of its name: a name no row uses would replace nothing (the
    output was that of a run without it), and a second file of one name would leave the first unread."""
    from specsim.hardware.runtime import RUNTIMES_DIR

    vllm = json.loads((RUNTIMES_DIR / "vllm.json").read_text())
    other = tmp_path / "foo.json"
    other.write_text(json.dumps(vllm | {"name": "foo-rt"}))
    assert main(["validate", "--no-sweeps", "--runtime", str(other)]) == 2
    assert "runtime 'foo-rt' prices no row of --data (its rows' runtimes: " in _one_line(capsys)
    copy = tmp_path / "vllm.json"
    copy.write_text(json.dumps(vllm))
    assert main(["validate", "--no-sweeps", "--runtime", str(copy), "--runtime", str(copy)]) == 2
    assert "a second file for runtime 'vllm'" in _one_line(capsys)


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("fixed:", "expected a policy like"),
        ("fixed", "expected a policy like"),
        ("heuristic:", "expected a policy like"),
        ("batch:1=5,8=3@", "expected a policy like"),
        ("heuristic:2,max=4,max=8", "max= given twice"),
        ("confidence:0.4,gamma=8,gamma=4", "gamma= given twice"),
        ("confidence:0.4,heuristic,heuristic", "heuristic given twice"),
    ],
)
def test_policy_without_value_or_with_repeated_keys_is_an_error(capsys, policy, expected):
    assert main(["predict", "--gamma", "3", "--policy", policy]) == 2
    err = _one_line(capsys)
    assert expected in err and "--policy" in err and repr(policy) in err


# --------------------------------------------------------------------------- calibrate: before models load
def _no_models(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from calibrate.models import loading as M

    def refuse(*a, **k):
        pytest.fail("a model was loaded before the bad argument was refused")

    monkeypatch.setattr(M, "load_pair", refuse)
    monkeypatch.setattr(M, "model_from_spec", refuse)


def _acceptance(tmp_path, *extra) -> list[str]:
    return [
        "calibrate",
        "acceptance",
        "--preset",
        "qwen2.5-coder-0.5b-1.5b",
        "--no-progress",
        "--out",
        str(tmp_path / "p.json"),
        *extra,
    ]


@pytest.mark.parametrize("method", ["M\n", "\nM", "plain\n", "M T", "M\t"])
def test_method_with_whitespace_is_an_error(tmp_path, capsys, monkeypatch, method):
    _no_models(monkeypatch)
    assert main(_acceptance(tmp_path, "--method", method)) == 2
    err = _one_line(capsys)
    assert "--method:" in err and repr(method) in err
    assert not (tmp_path / "p.json").exists()


def test_images_per_prompt_must_match_the_images(tmp_path, capsys, monkeypatch):
    _no_models(monkeypatch)
    (tmp_path / "a.png").write_bytes(b"not decoded before the models load")
    record = {"id": "one", "prompt": "<image> what is this?", "images": ["a.png"], "images_per_prompt": 5}
    (tmp_path / "p.jsonl").write_text(json.dumps(record) + "\n")
    args = _acceptance(tmp_path, "--prompts", str(tmp_path / "p.jsonl"), "--method", "M")
    assert main(args) == 2
    err = _one_line(capsys)
    assert "images_per_prompt: expected 1 (the prompt's images), got 5" in err and "'one'" in err
    assert not (tmp_path / "p.json").exists()


def test_sample_paths_is_capped_before_models_load(tmp_path, capsys, monkeypatch):
    _no_models(monkeypatch)
    from calibrate.workload import run_setup as W

    monkeypatch.setattr(W, "load_setup", lambda *a, **k: pytest.fail("set up before --sample-paths"))
    assert main(_acceptance(tmp_path, "--sample-paths", "1000000")) == 2
    err = _one_line(capsys)
    assert "--sample-paths: expected 0 (off) or at least 2 and at most 1024" in err and "1000000" in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["sweep", "--gamma", "1-3", "--gamma", "2-4"], "--gamma"),
        (["predict", "--gamma", "5", "--json", "--json"], "--json"),
        (["predict", "--gam", "5", "--gamma=4"], "--gamma"),  # abbreviated and with '=' alike
        (["recommend", "--engine", "vllm", "--device", "h100-sxm", "--device", "l4"], "--device"),
        (["validate", "--data", "a.json", "--data", "b.json"], "--data"),
        (["calibrate", "latency", "--out", "a.json", "--out", "b.json"], "--out"),
    ],
)
def test_an_option_given_twice_is_an_error(capsys, argv, flag):
    """The second value silently won (recommend kept the last --device of two, sweep the last --gamma)."""
    assert main(argv) == 2
    assert f"{flag}: given twice (expected it once)" in _one_line(capsys)


def test_repeatable_options_still_repeat(capsys):
    assert main(["predict", "--gamma", "5", "--method", "M", "--method", "T", "--scenario", "ChartQA"]) == 0
    assert main(["hardware", "--device", "h100-sxm", "--device", "l4", "--batch", "1", "--context", "8"]) == 0


def test_context_and_output_lengths_need_a_decode(capsys):
    """recommend took --context 0 where hardware refuses it; hardware --output-tokens 0 printed an end-to-end
    speedup of the prefills alone."""
    argv = ["recommend", "--engine", "vllm", "--alpha", "0.7", "--pair", "llava-1.5-7b-68m", "--context", "0"]
    assert main(argv) == 2 and "--context: expected one integer in 1.." in _one_line(capsys)
    argv = ["hardware", "--device", "h100-sxm", "--prompt-tokens", "100", "--output-tokens", "0"]
    assert main(argv) == 2 and "--output-tokens: expected an integer in 1..16777216" in _one_line(capsys)


def test_validate_lists_only_the_sources_its_rows_come_from(tmp_path, capsys):
    """A --data file with one source's rows printed every source it cites under 'sources:' (and in --json),
    as if their rows had been checked."""
    from importlib import resources

    from specsim.validation.published_set import DATA_FILE

    data = json.loads((resources.files("specsim") / DATA_FILE).read_text())
    data["rows"] = [r for r in data["rows"] if r["source"] == "gpt-fast"]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(data))
    assert main(["validate", "--data", str(path), "--no-sweeps"]) == 0
    cited = capsys.readouterr().out.split("\nsources:\n")[1].splitlines()
    assert [c.split(":")[0].strip() for c in cited if c.startswith("  ")] == ["gpt-fast"]
    assert main(["validate", "--data", str(path), "--no-sweeps", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["sources"]) == ["gpt-fast"]
