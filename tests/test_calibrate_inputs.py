"""calibrate commands: bad paths, devices, lengths and partial files fail (or restart) before any
measuring."""

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from calibrate.measure import acceptance_run as CA  # noqa: E402
from calibrate.measure import latency_plan as L  # noqa: E402
from calibrate.models import loading as M  # noqa: E402
from calibrate.run.timing import Timing  # noqa: E402
from calibrate.workload import run_setup as W  # noqa: E402
from calibrate.workload.prompt_sets import Prompt, load_prompts, open_images  # noqa: E402
from specsim.cli.main import main  # noqa: E402
from specsim.errors import SpecsimError, SpecsimWarning  # noqa: E402
from tests.test_models import TINY_LLAMA  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {**TINY_LLAMA, "num_hidden_layers": 1, "max_position_embeddings": 64}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.mark.parametrize(
    "out, expected",
    [
        ("{dir}", "is a directory"),
        ("", "expected a file path"),
        ("{file}/p.json", "is a file, not a folder"),
        ("/dev/null", "character device"),
    ],
)
def test_latency_out_is_checked_before_models_load(tmp_path, cfg, capsys, monkeypatch, out, expected):
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(
        W, "latency_models", lambda args: pytest.fail("models loaded before --out was checked")
    )
    out = out.format(dir=tmp_path, file=tmp_path / "file")
    assert main(["calibrate", "latency", "--target-config", cfg, "--draft-config", cfg, "--out", out]) == 2
    assert expected in _one_line(capsys)


@pytest.mark.parametrize(
    "device, expected",
    [
        ("mps", "device 'mps' is not available"),
        ("xpu", "is not a device specsim can time"),
        ("cuda:99", "cuda:99"),
        ("gpu!", "unknown device"),
    ],
)
def test_unusable_devices_are_one_line(tmp_path, cfg, capsys, monkeypatch, device, expected):
    if device == "mps" and M.mps_available():
        pytest.skip("this machine has MPS")
    monkeypatch.setattr(
        W, "latency_models", lambda args: pytest.fail("models loaded before --device was checked")
    )
    assert (
        main(
            [
                "calibrate",
                "latency",
                "--target-config",
                cfg,
                "--draft-config",
                cfg,
                "--device",
                device,
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 2
    )
    assert expected in _one_line(capsys)


@pytest.mark.parametrize(
    "extra, expected",
    [
        # read off the config before the models load
        (["--contexts", "8,100"], "--contexts: 100 tokens, past the target's 64 max positions"),
        (["--verify-context", "60", "--gammas", "1-8"], "--gammas: a block of gamma 8 at a 60-token context"),
        (["--contexts", "62"], "--gammas: a block of gamma 2 at a 62-token context needs 65 positions, past"),
        (["--prefill-tokens", "65"], "--prefill-tokens: 65 tokens, past the target's 64"),
        (["--gammas", "1-100000"], "argument --gammas: expected values <= 1024 (the cap on gamma)"),
        (["--batch-sizes", "1-10000000000"], "argument --batch-sizes: expected values <= 4096"),
        (["--contexts", "nan"], "argument --contexts: expected integers >= 1"),
        (["--seed", str(10**30)], "argument --seed: expected an integer in 0..9223372036854775807"),
        (["--max-seconds-per-point", "inf"], "argument --max-seconds-per-point: expected a finite number"),
    ],
)
def test_latency_plan_bounds(tmp_path, cfg, capsys, monkeypatch, extra, expected):
    monkeypatch.setattr(L, "calibrate_latency", lambda *a, **k: pytest.fail("measured an impossible plan"))
    options = {
        "--target-config": cfg,
        "--draft-config": cfg,
        "--out": str(tmp_path / "p.json"),
        "--contexts": "8,16",
        "--verify-context": "8",
        "--gammas": "1,2",
        "--prefill-tokens": "8",
    } | dict(zip(extra[::2], extra[1::2]))  # the case's values replace the base's (an option is given once)
    argv = ["calibrate", "latency", *(x for kv in options.items() for x in kv), "--quiet"]
    assert main(argv) == 2
    assert expected in _one_line(capsys)
    assert not (tmp_path / "p.json").exists()


def test_latency_refuses_a_plan_past_the_drafts_window_before_loading(tmp_path, cfg, capsys, monkeypatch):
    """The draft's window was not read before loading: a 32-position draft under a 64-position target."""
    monkeypatch.setattr(W, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(TINY | {"max_position_embeddings": 32}))
    argv = ["calibrate", "latency", "--target-config", cfg, "--draft-config", str(draft), "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "p.json"), "--contexts", "30", "--gammas", "2"]) == 2
    assert "--gammas: a block of gamma 2 at a 30-token context needs 33 positions, past the draft's 32" in (
        _one_line(capsys)
    )


def test_loaded_plan_past_a_window_names_the_model():
    """After loading, a plan sized from the workload (no flag to check before) is refused by the model."""
    from types import SimpleNamespace

    model = SimpleNamespace(name="tiny", text_config=SimpleNamespace(max_position_embeddings=64))
    plan = L.LatencyPlan(contexts_tokens=(8, 62), verify_context_tokens=8, gammas=(1, 2), prefill_tokens=(8,))
    with pytest.raises(Exception, match="the target 'tiny' has at most 64 positions .* needs 65 .without"):
        W.check_plan_positions({"target": model, "draft": model}, plan)
    with pytest.raises(Exception, match="needs 65$"):  # given contexts: no word about sizing them
        W.check_plan_positions({"target": model, "draft": model}, plan, contexts_given=True)


# --------------------------------------------------------------------------- partial files
def _fake_runner(unit, models_, plan):
    return {t.key: Timing(1.0, 0.1, 3, 0.01, (1.0, 1.0, 1.0)) for t in unit}


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe garbage",
        b'{"schema_version": 1, "identity": [1, 2], "timings": {}}',
        b'{"schema_version": 1, "identity": {}, "timings": {"k": null}}',
        b'{"schema_version": 1, "identity": {}, "timings": {"k": {"schema_version": 1, "median_ms": "x"}}}',
        b'{"schema_version": true, "identity": {}, "timings": {}}',
        b"[1, 2]",
    ],
)
def test_broken_latency_partial_is_reported_and_restarted(tmp_path, content):
    models = {
        "target": M.build_random_model(TINY, name="t"),
        "draft": M.build_random_model(TINY, seed=1, name="d"),
    }
    plan = L.LatencyPlan(
        contexts_tokens=(8,),
        verify_context_tokens=8,
        gammas=(1,),
        batch_sizes=(1,),
        prefill_tokens=(4,),
        vision=False,
    )
    partial = tmp_path / "p.json.partial"
    partial.write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = L.measure_latency(models, plan, partial=partial, progress=False, runner=_fake_runner)
    assert len(done) == len(L.plan_tasks(plan, models))
    messages = [str(w.message) for w in caught if w.category is SpecsimWarning]
    assert (
        len(messages) == 1 and "p.json.partial" in messages[0] and "measuring from the start" in messages[0]
    )
    assert L.partial_timings(json.loads(partial.read_text()), "x")  # overwritten with a valid file


@pytest.mark.parametrize(
    "traces",
    [
        [None],
        [[1]],
        ["x"],
        [{"method": "plain", "trace": {"match": [1]}}],
        [
            {
                "method": "plain",
                "trace": None,
                "output_tokens": [],
                "prompt_tokens": 1,
                "draft_prompt_tokens": 1,
            }
        ],
    ],
)
def test_corrupt_acceptance_partial_is_reported_and_ignored(tmp_path, traces):
    path = tmp_path / "p.json.partial.json"
    key = {"target": "t"}
    path.write_text(json.dumps({"schema_version": 1, "key": key, "traces": traces}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert CA._read_partial(path, key) == {}
    messages = [str(w.message) for w in caught if w.category is SpecsimWarning]
    assert len(messages) == 1 and "traces[0]" in messages[0] and "tracing every prompt again" in messages[0]


def test_acceptance_partial_with_non_object_key_is_reported(tmp_path):
    path = tmp_path / "p.json.partial.json"
    path.write_text(json.dumps({"schema_version": 1, "key": "oops", "traces": []}))
    with pytest.warns(SpecsimWarning, match=r"\.key: expected an object"):
        assert CA._read_partial(path, {"target": "t"}) == {}


def test_acceptance_partial_of_another_run_is_refused_not_deleted(tmp_path):
    """A valid partial of other models or settings was dropped silently and then overwritten (latency's is
    refused); hours of traces now stay until --restart or a delete."""
    path = tmp_path / "p.json.partial.json"
    path.write_text(
        json.dumps({"schema_version": 1, "key": {"target": "other-model", "dtype": "f"}, "traces": []})
    )
    with pytest.raises(
        Exception,
        match=r"were traced with \{'target': 'other-model'\} \(expected \{'target': 't'\}.*--restart",
    ):
        CA._read_partial(path, {"target": "t", "dtype": "f"})
    assert path.exists()


# --------------------------------------------------------------------------- prompts and images
def _image(path, size=(4, 4)):
    from PIL import Image

    Image.new("RGB", size, (10, 20, 30)).save(path)


def test_prompt_images_stay_inside_the_prompt_folder(tmp_path):
    folder = tmp_path / "set"
    (folder / "img").mkdir(parents=True)
    _image(folder / "img" / "a.png")
    _image(tmp_path / "outside.png")
    (folder / "img" / "link.png").symlink_to(tmp_path / "outside.png")
    cases = {
        "../outside.png": "resolves outside the prompt file's folder",
        str(tmp_path / "outside.png"): "absolute path",
        "img/link.png": "resolves outside",
        "img/missing.png": "does not exist",
        "img": "is a directory",
    }
    for image, expected in cases.items():
        (folder / "p.jsonl").write_text(json.dumps({"prompt": "x", "images": [image]}) + "\n")
        with pytest.raises(Exception) as err:
            load_prompts(str(folder / "p.jsonl"))
        assert expected in str(err.value) and "line 1.images[0]" in str(err.value)
    (folder / "p.jsonl").write_text(json.dumps({"prompt": "x", "images": ["../outside.png"]}) + "\n")
    assert load_prompts(str(folder / "p.jsonl"), allow_outside_images=True)[0].images == (
        str(tmp_path / "outside.png"),
    )


def test_latency_reads_allow_outside_images(tmp_path, capsys, monkeypatch):
    """The error told latency's users to pass --allow-outside-images, which latency did not take."""
    _image(tmp_path / "outside.png")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "p.jsonl").write_text(
        json.dumps({"prompt": "<image> x", "images": ["../outside.png"]})
    )
    monkeypatch.setattr(W, "latency_models", lambda *a, **k: pytest.fail("past the prompts: models load"))
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "l.json")]
    argv += ["--prompts", str(tmp_path / "set" / "p.jsonl")]
    assert main(argv) == 2
    assert "(pass --allow-outside-images to allow it)" in _one_line(capsys)
    with pytest.raises(pytest.fail.Exception, match="past the prompts"):
        main([*argv, "--allow-outside-images"])


def test_fifo_image_is_refused_without_opening(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "x", "images": ["pipe.png"]}) + "\n")
    with pytest.raises(Exception, match="is a FIFO"):
        load_prompts(str(tmp_path / "p.jsonl"))


def test_partial_key_does_not_depend_on_how_prompts_are_spelled(tmp_path, monkeypatch):
    _image(tmp_path / "a.png")
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "1", "prompt": "x", "images": ["a.png"]}) + "\n")
    monkeypatch.chdir(tmp_path)
    spellings = ["p.jsonl", "./p.jsonl", str(tmp_path / "p.jsonl"), f"../{tmp_path.name}/p.jsonl"]
    assert len({CA._digest(load_prompts(s)) for s in spellings}) == 1


def test_decompression_bomb_is_one_line(tmp_path, monkeypatch):
    from PIL import Image

    _image(tmp_path / "big.png", (64, 64))
    prompt = Prompt(id="p", text="x", images=(str(tmp_path / "big.png"),))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 4096 pixels: past 2x the limit, Pillow's error
    with pytest.raises(Exception, match="too large to decode safely.*decompression bomb"):
        open_images(prompt)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)  # between 1x and 2x: Pillow only warns
    with pytest.raises(Exception, match="decompression bomb"):
        open_images(prompt)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10**6)
    assert open_images(prompt)[0].size == (64, 64)


def test_prompt_longer_than_the_model_is_an_error(tmp_path, cfg, capsys):
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "long", "prompt": "y" * 60}) + "\n")
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                "--target",
                cfg,
                "--draft",
                cfg,
                "--prompts",
                str(tmp_path / "p.jsonl"),
                "--max-new-tokens",
                "8",
                "--no-progress",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 2
    )
    assert "prompt 'long': 60 prompt tokens + --max-new-tokens 8 = 68 positions" in _one_line(capsys)
    assert not (tmp_path / "p.json").exists()


def test_acceptance_out_checked_first(tmp_path, cfg, capsys, monkeypatch):
    monkeypatch.setattr(W, "load_setup", lambda args: pytest.fail("set up before --out was checked"))
    assert main(["calibrate", "acceptance", "--target", cfg, "--draft", cfg, "--out", str(tmp_path)]) == 2
    assert "--out" in _one_line(capsys)


def test_a_config_transformers_refuses_is_one_line(tmp_path, capsys):
    """transformers 5 refuses some configs with huggingface_hub's StrictDataclass errors (not a ValueError):
    a hidden size of -5 gave two tracebacks and exit 1."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": -5}))
    argv = ["calibrate", "latency", "--target-config", str(path), "--draft-config", "zoo:draft"]
    assert main([*argv, "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--target-config" in err and "bad.hidden_size: expected an integer >= 1, got -5" in err
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(SpecsimError, match=r"cannot build a transformers config \(The hidden size \(-5\)"):
        M.build_random_model({"model_type": "llama", "hidden_size": -5})  # transformers' refusal: one line


@pytest.mark.parametrize(
    ("side", "key", "value", "said"),
    [
        ("draft", "num_key_value_heads", 3, "num_key_value_heads: expected at most num_attention_heads (2)"),
        ("target", "num_hidden_layers", -1, "num_hidden_layers: expected an integer >= 1, got -1"),
        ("draft", "num_hidden_layers", 0, "num_hidden_layers: expected an integer >= 1, got 0"),
    ],
)
def test_a_bad_random_config_is_named_before_any_model_builds(tmp_path, capsys, monkeypatch, side, key, value,
                                                              said):  # fmt: skip
    """KV heads 3 of 2 gave a tensor-shape traceback (exit 1) once the models were built, and left
    OUT.partial; 0 layers named no key."""
    monkeypatch.setattr(W, "latency_models", lambda *a, **k: pytest.fail("models loaded"))
    with open(os.path.join(ROOT, "specsim", "presets", f"zoo-{side}.json"), encoding="utf-8") as fh:
        preset = json.load(fh)
    preset["text_config"][key] = value
    path = tmp_path / f"bad-{side}.json"
    path.write_text(json.dumps(preset))
    sides = {"target": "zoo-target", "draft": "zoo-draft"} | {side: str(path)}
    argv = ["calibrate", "latency", "--target-config", sides["target"], "--draft-config", sides["draft"]]
    assert main([*argv, "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"specsim: error: --{side}-config {path}: bad-{side}.text_config.{said}")
    assert not list(tmp_path.glob("p.json*"))


@pytest.mark.parametrize("command", [["latency", "--quiet"], ["acceptance", "--method", "M"]])
def test_an_existing_out_that_is_no_profile_is_refused_before_measuring(tmp_path, capsys, command):
    """The file is merged into at the end: a broken one was found after the whole measurement (the zoo's
    latency: about 5 minutes; hours on large models)."""
    out = tmp_path / "broken.json"
    out.write_text("{broken")
    assert main(["calibrate", command[0], "--preset", "zoo", "--out", str(out), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "--out: the existing file cannot be added to: " in err and err.count("\n") == 1
    assert out.read_text() == "{broken" and not list(tmp_path.glob("*.partial*"))


def test_a_zero_request_flag_is_checked_not_read_as_missing(tmp_path, capsys):
    """--request-new-tokens 0 silently became the default 24 (0 == False in `value in (None, False)`)."""
    argv = ["calibrate", "latency", "--preset", "zoo", "--out", str(tmp_path / "p.json"), "--quiet"]
    assert main([*argv, "--request-batches", "1", "--request-new-tokens", "0"]) == 2
    assert "--request-new-tokens: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert main([*argv, "--request-new-tokens", "0"]) == 2  # and, as any --request-* flag, needs its sweep
    assert "--request-new-tokens: applies with --request-batches only" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, images, said",
    [
        ("<image> x", ["a.png", "a.png"], "1 <image> placeholders but 2 images"),
        ("<image> <image> x", ["a.png"], "2 <image> placeholders but 1 images"),
        ("x", ["a.png"], "0 <image> placeholders but 1 images"),
        ("<image> x", ["bad.png"], "cannot read image"),
    ],
)
@pytest.mark.parametrize("command", ["check", "acceptance"])
def test_prompt_images_are_checked_before_models_load(
    tmp_path, capsys, monkeypatch, text, images, said, command
):
    """Placeholders that do not match the images, or an image Pillow cannot read, were refused by
    make_request and open_images only after both models had loaded."""
    _image(tmp_path / "a.png")
    (tmp_path / "bad.png").write_text("not an image")
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "x", "prompt": text, "images": images}) + "\n")
    monkeypatch.setattr(M, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    prompts = ["--preset", "zoo", "--prompts", str(tmp_path / "p.jsonl"), "--method", "M"]
    if command == "check":
        argv = ["check", "--profile", "zoo-cpu", "--no-write", "--gamma", "2", *prompts]
        argv += ["--synthetic-acceptance", "tau:2@2"]
    else:
        argv = ["calibrate", "acceptance", "--out", str(tmp_path / "acc.json"), *prompts]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: prompt 'x': ") and said in err and err.count("\n") == 1


def test_acceptance_refuses_new_tokens_past_the_targets_window_before_loading(tmp_path, capsys, monkeypatch):
    """The zoo target has 1024 positions: 5000 new tokens were refused after both models loaded."""
    monkeypatch.setattr(M, "load_pair", lambda *a, **k: pytest.fail("models loaded"))
    argv = ["calibrate", "acceptance", "--preset", "zoo", "--out", str(tmp_path / "a.json"), "--method", "M"]
    assert main([*argv, "--limit", "1", "--max-new-tokens", "5000"]) == 2
    err = capsys.readouterr().err
    assert "--max-new-tokens: 5000 new tokens after a prompt, but the target has at most 1024" in err


@pytest.mark.parametrize(
    "models, said",
    [
        (
            ["--target", "zoo:target", "--target-config", "zoo-target", "--draft", "zoo:draft"],
            "--target-config: give",
        ),
        (
            ["--preset", "zoo", "--draft", "zoo:draft", "--draft-config", "zoo-draft"],
            "--draft-config: give either",
        ),
        (
            ["--target", "zoo:target", "--draft", "zoo:draft", "--random-weights"],
            "--random-weights: builds a",
        ),
        (
            ["--preset", "zoo", "--target-config", "zoo-target", "--random-weights"],
            "--random-weights: builds a",
        ),
        (
            ["--target", "zoo:target", "--draft", "zoo:draft", "--caption-tokens", "5"],
            "--caption-tokens: sizes",
        ),
        (
            ["--preset", "zoo", "--cache-dir", "/nowhere/x"],
            "--cache-dir: caches the reference pair's downloads",
        ),
    ],
)
def test_latency_refuses_model_flags_it_would_not_read(tmp_path, capsys, monkeypatch, models, said):
    """--target-config silently won over --target, and --random-weights beside per-side models was unread."""
    monkeypatch.setattr(M, "model_from_spec", lambda *a, **k: pytest.fail("a model loaded"))
    assert main(["calibrate", "latency", *models, "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    assert said in _one_line(capsys)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("runtime", ["torch", "llama.cpp"])
def test_threads_past_the_cpus_warn(monkeypatch, runtime):
    """--threads 64 on 2 CPUs was taken silently: its timings are of threads taking turns."""
    from types import SimpleNamespace

    from calibrate.cli.llama_cpp_options import check_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with pytest.warns(
        SpecsimWarning, match=r"^--threads 64: more threads than the 2 CPUs this process may use"
    ):
        M.set_threads(64) if runtime == "torch" else check_threads(SimpleNamespace(threads=64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpecsimWarning)
        M.set_threads(2) if runtime == "torch" else check_threads(SimpleNamespace(threads=2))


def test_latency_batch_sizes_help_states_each_pair_kinds_default(capsys):
    """The help said 'default 1,2,3,4'; a text pair's plan times the draft at batch 1 only."""
    from types import SimpleNamespace

    with pytest.raises(SystemExit):
        main(["calibrate", "latency", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: 1,2,3,4 for a VLM pair" in text and "1 for a text pair" in text
    assert L.default_plan(SimpleNamespace(kind="text")).batch_sizes == (1,)


@pytest.mark.parametrize("command", ["acceptance", "check"])
def test_an_empty_scenario_is_refused(tmp_path, capsys, command):
    """--scenario '' was read as not given: the entries were named after the prompt set, without a word."""
    out = ["calibrate", "acceptance", "--out", str(tmp_path / "a.json")]
    argv = out if command == "acceptance" else ["check"]
    assert main([*argv, "--preset", "zoo", "--scenario", ""]) == 2
    assert "argument --scenario: expected a name or path, got ''" in _one_line(capsys)
