"""``serve`` answers about the models, images and acceptance the user named: the pair a cost profile was
measured on travels with it (``--pair zoo`` works; each zoo image is the zoo's 16 positions, not LLaVA's 576),
other models with its costs are refused, roofline options it would ignore are refused, images on a text-only
target are refused, and reading its grids past what it measured is flagged with by how much."""

import json
import re
from pathlib import Path

import pytest

from specsim.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
ZOO = ["serve", "--cost-profile", "zoo-cpu-batch", "--acceptance-profile", "zoo-cpu-batch", "--method", "M"]
ZOO += ["--no-progress"]
# notebook 09's zoo set-up: 2-image prompts of 51 positions (19 text tokens + 2 x 16), 32 output tokens
NB09 = ["--scenario", "zoo-2img", "--images", "2", "--prompt-tokens", "19", "--output-tokens", "32"]
NB09 += ["--requests", "400", "--gamma", "3", "--max-num-seqs", "8", "--max-num-batched-tokens", "4096"]
NB09 += ["--no-chunked-prefill", "--slo", "ttft=100,tpot=3"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specsim: error: "), err
    return err


def _notebook_rows() -> dict[float, list[float]]:
    """rate -> [TPOT p50 SD, target-only, TTFT p90 SD, target-only, tok/s SD, target-only] as printed."""
    nb = json.loads((ROOT / "notebooks" / "09_serving.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "zoo_sweep = answer(" in "".join(c["source"]))
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    rows = {}
    for line in printed.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and re.fullmatch(r"[\d.]+", cells[0]):
            nums = [float(x) for i in (1, 2, 4) for x in cells[i].split(" / ")]
            rows[float(cells[0])] = nums
    assert len(rows) == 6
    return rows


def test_pair_zoo_on_its_cost_profile_prints_notebook_09(capsys):
    """The Done-when of issue 51: `serve --pair zoo` on the zoo's cost profile, no hand-written config,
    prints notebook 09's figures to within 1 %."""
    argv = [*ZOO, "--pair", "zoo", *NB09, "--rates", "5,20,50,100,200,400", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["target"], out["draft"], out["image_tokens_per_image"]) == ("zoo:target", "zoo:draft", 16)
    for row in out["sweep"]["rows"]:
        on, off = row["sd"], row["target_only"]
        ours = [on["tpot_ms"]["p50"], off["tpot_ms"]["p50"], on["ttft_ms"]["p90"], off["ttft_ms"]["p90"]]
        ours += [on["output_tokens_per_s"], off["output_tokens_per_s"]]
        for got, printed in zip(ours, _notebook_rows()[row["rate_per_s"]]):
            assert got == pytest.approx(printed, rel=0.01, abs=0.051), row["rate_per_s"]
    assert "notes" not in out  # the notebook's load stays inside the measured grids
    assert main([*ZOO, "--pair", "zoo", *NB09, "--max-rate", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["max_rate_per_s"]
    assert found["sd"] == pytest.approx(41.1, rel=0.01)
    assert found["target_only"] == pytest.approx(38.9, rel=0.01)


def test_a_cost_profile_brings_its_own_models(capsys):
    """No --pair: the zoo's models and 16 positions per image (it was LLaVA-1.5-7B's 576)."""
    assert main([*ZOO, "--scenario", "zoo-2img", "--images", "2", "--rate", "20", "--requests", "30"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("zoo:target / zoo:draft (model drafting) on 1 x measured profile zoo-cpu-batch")
    assert head.endswith("16 tokens per image")


def test_a_cost_profile_with_other_models_is_refused(capsys):
    assert main([*ZOO, "--scenario", "zoo-1img", "--pair", "llava-1.5-7b-68m"]) == 2
    assert "--cost-profile: profile 'zoo-cpu-batch' measured zoo:target / zoo:draft" in _one_line(capsys)


@pytest.mark.parametrize(
    ("flag", "value"), [("--tp", "2"), ("--runtime", "vllm"), ("--draft-image-tokens", "0")]
)
def test_roofline_options_are_refused_with_a_cost_profile(capsys, flag, value):
    assert main([*ZOO, "--scenario", "zoo-1img", flag, value]) == 2
    assert f"{flag}: applies to roofline pricing, not with --cost-profile" in _one_line(capsys)


def test_images_on_a_text_only_target_are_refused_not_free(capsys):
    qwen = ["serve", "--pair", "qwen2.5-coder-0.5b-1.5b", "--alpha", "0.6", "--requests", "20"]
    qwen += ["--no-progress"]
    assert main([*qwen, "--images", "1"]) == 2
    assert (
        "--images: requests carry up to 1 image(s), but qwen2.5-coder-1.5b has no vision tower"
        in _one_line(capsys)
    )
    assert main([*qwen, "--rate", "1"]) == 0  # no --images: none for a text-only target
    assert "+ 0 images" in capsys.readouterr().out


def test_context_past_the_grid_is_flagged_with_by_how_much(capsys):
    assert main([*ZOO, "--scenario", "zoo-1img", "--rate", "20", "--requests", "30"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"note: extrapolated past the measured grids: KV caches reach (\d+) positions, past the "
                  r"batched grids' widest (\d+) \(([\d.]+)x\)", out)  # fmt: skip
    assert m and int(m[1]) > int(m[2]) and float(m[3]) == pytest.approx(int(m[1]) / int(m[2]), abs=0.05)
    assert "prompts of 528 positions, past the prefill grid's 174 rows (3.0x)" in out


@pytest.mark.parametrize("role", ["target", "draft"])
def test_the_zoo_presets_are_the_shipped_weights_configs(role):
    """No hand-written config: specsim's zoo presets are the trained weights' own config.json (specsim may
    not import calibrate, so the config travels as data), named by the ids calibrate loads them by."""
    from specsim.hardware.model_resolution import load_model_spec
    from specsim.presets import preset_config, preset_meta

    weights = json.loads((ROOT / "calibrate" / "zoo" / "weights" / role / "config.json").read_text())
    assert preset_config(f"zoo-{role}") == weights and preset_meta(f"zoo-{role}")["ids"] == [f"zoo:{role}"]
    spec = load_model_spec(f"zoo:{role}")
    assert spec.vision.image_tokens == weights["image_seq_length"] == 16


def test_a_trace_with_images_on_a_text_only_target_is_refused(capsys, tmp_path):
    """As --images is: a text-only target prices no image tokens, so the trace's images vanished."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "images": 2}\n')
    argv = ["serve", "--alpha", "0.7", "--pair", "qwen2.5-coder-0.5b-1.5b", "--trace", str(trace)]
    assert main(argv) == 2
    err = _one_line(capsys)
    assert "--trace: requests carry up to 2 image(s), but qwen2.5-coder-1.5b has no vision" in err
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "images": 0}\n')
    assert main([*argv, "--no-progress"]) == 0


def test_jobs_without_rates_is_refused(capsys):
    """--jobs runs --rates' simulations in processes; one rate ran as without it, without a word."""
    assert main(["serve", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--jobs", "4"]) == 2
    assert "--jobs: runs the rates of --rates in processes; give --rates" in _one_line(capsys)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["serve", "--output-tokens", "0"], "argument --output-tokens: expected an integer in 1..16777216"),
        (["tune", "--output-tokens", "0"], "argument --output-tokens: expected an integer in 1..16777216"),
        (["serve", "--images", "1000"], "--prompt-tokens/--images/--output-tokens: 576768 positions in the"),
        (
            ["hardware", "--prompt-tokens", "0", "--output-tokens", "50"],
            "argument --prompt-tokens: expected an integer in 1..16777216 (prompt_tokens)",  # it said 0..
        ),
    ],
)
def test_an_error_names_the_option_it_is_about(capsys, argv, named):
    """They named requests.output_tokens, new_tokens, or a --kv-cache-tokens that was never given."""
    assert main([*argv[:1], "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", *argv[1:]]) == 2
    assert named in _one_line(capsys)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["recommend", "--engine", "vllm", "--pair", "llava-1.5-7b-68m", "--dtype", "nosuch"],
            "--dtype: expected",
        ),
        (["hardware", "--device", ""], "hardware: argument --device: expected a name or path, got ''"),
        (["serve", "--pair", "llava-1.5-7b-68m", "--device", ""], "serve: argument --device: expected"),
        (["serve", "--target", ""], "serve: argument --target: expected a name or path, got ''"),
        (["serve", "--pair", ""], "serve: argument --pair: expected a name or path"),  # ran the default pair
        (["tune", "--pair", "llava-1.5-7b-68m", "--target", ""], "tune: argument --target: expected a name"),
        (["recommend", "--engine", "vllm", "--draft-model", ""], "recommend: argument --draft-model"),
        (["serve", "--runtime", ""], "serve: argument --runtime: expected a name"),  # "'.' is a directory"
    ],
)
def test_a_bad_dtype_or_an_empty_device_is_named_by_its_flag(capsys, argv, named):
    """They read "model config llava-1.5-7b.json: dtype: ..." and "device file '.' is a directory"."""
    assert main([*argv, "--alpha", "0.7"]) == 2
    assert _one_line(capsys).startswith(f"specsim: error: {named}")


@pytest.mark.parametrize("command", ["hardware", "serve", "recommend", "tune"])
def test_image_size_on_a_text_only_target_is_refused(capsys, command):
    """--image-size sizes a vision tower's image tokens: on a text-only target it changed nothing."""
    argv = [command, "--pair", "qwen2.5-coder-0.5b-1.5b", "--alpha", "0.7", "--image-size", "640x480"]
    assert main([*argv, *(["--engine", "vllm"] if command == "recommend" else [])]) == 2
    assert _one_line(capsys).startswith(
        "specsim: error: --image-size: sizes a vision tower's image tokens, and qwen2.5-coder-1.5b has none"
    )


@pytest.mark.parametrize("command", ["hardware", "serve", "recommend", "tune"])
def test_image_size_on_a_fixed_size_tower_is_refused(capsys, command):
    """LLaVA-1.5 resizes every image to 336 px (576 tokens): --image-size changed nothing, without a word."""
    argv = [command, "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--image-size", "1920x1080"]
    assert main([*argv, *(["--engine", "vllm"] if command == "recommend" else [])]) == 2
    assert _one_line(capsys) == (
        "specsim: error: --image-size: llava-1.5-7b's vision tower resizes every image to one size "
        "(576 tokens per image), so a size changes nothing\n"
    )


@pytest.mark.parametrize("kind", ["ngram", "suffix"])
def test_draft_image_tokens_for_a_kind_without_a_draft_is_refused(capsys, kind):
    """A lookup has no draft prompt: the run was byte-identical without the flag."""
    argv = ["serve", "--target", "llava-1.5-7b", "--draft-kind", kind, "--alpha", "0.7", "--requests", "20"]
    assert main([*argv, "--draft-image-tokens", "0"]) == 2
    said = f"--draft-image-tokens: sizes the draft prompt's images, and kind {kind} drafts with no model"
    assert _one_line(capsys) == f"specsim: error: {said}\n"


def test_draft_image_tokens_without_images_is_refused(capsys):
    """It sizes the draft's image tokens: with --images 0 the run was as without it, without a word."""
    argv = ["serve", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--draft-image-tokens", "5"]
    assert main([*argv, "--images", "0"]) == 2
    err = _one_line(capsys)
    assert "--draft-image-tokens: sizes the draft prompt's images, and no request has one" in err
    assert main([*argv, "--images", "1", "--requests", "40", "--no-progress"]) == 0


def test_an_image_only_prompt_is_served(capsys):
    """--prompt-tokens 0 with an image is a request (the image's tokens are its prompt); 0 and no image is
    refused, one line."""
    argv = ["serve", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--requests", "20", "--no-progress"]
    assert main([*argv, "--prompt-tokens", "0", "--images", "1"]) == 0
    capsys.readouterr()
    assert main([*argv, "--prompt-tokens", "0", "--images", "0"]) == 2
    assert "--prompt-tokens/--images: every request needs at least one prompt token or image" in _one_line(
        capsys
    )


@pytest.mark.parametrize(("extra", "largest"), [([], 256), (["--max-num-seqs", "8"], 8)])
def test_an_sd_off_batch_no_step_reaches_is_refused(capsys, extra, largest):
    """Beyond --max-num-seqs no step decodes that many: it never turned SD off, and only the label changed."""
    argv = ["serve", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7", "--requests", "20", *extra]
    assert main([*argv, "--sd-off-from-batch", str(largest + 1)]) == 2
    said = f"--sd-off-from-batch: expected at most --max-num-seqs {largest} (no step decodes more), got"
    assert said in _one_line(capsys)
    assert main([*argv, "--sd-off-from-batch", str(largest), "--no-progress"]) == 0
