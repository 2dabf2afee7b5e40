"""The offline model zoo: task generator, tokenizer, LLaVA configs, FLOP ratio, a tiny training run."""

import json

import numpy as np
import pytest

from calibrate.zoo.scenes import ATTRIBUTES, Scene, change_scene, random_scene, render
from calibrate.zoo.task import (
    IMAGE_TOKEN,
    TASKS,
    Example,
    extract_facts,
    facts_correct,
    make_example,
    make_split,
    make_splits,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def splits():
    return make_splits(seed=0, n_train=300, n_validation=40, n_test=60)


@pytest.fixture(scope="module")
def processor(splits):
    from calibrate.zoo.task import corpus
    from calibrate.zoo.tokenizer import train_tokenizer, wrap
    from calibrate.zoo.zoo_models import make_processor

    return make_processor(wrap(train_tokenizer(corpus(splits["train"]))))


def _example(splits, task: str) -> Example:
    return next(e for e in splits["test"] if e.task == task)


def test_generator_is_deterministic_and_seed_dependent():
    a, b, c = (make_split("test", 25, seed=s) for s in (3, 3, 4))
    assert [e.to_json() for e in a] == [e.to_json() for e in b]
    assert all(x.tobytes() == y.tobytes() for ea, eb in zip(a, b) for x, y in zip(ea.images(), eb.images()))
    assert [e.answer for e in a] != [e.answer for e in c]
    assert [e.key() for e in a] != [e.key() for e in c]


def test_splits_are_disjoint_and_cover_all_scenarios(splits):
    keys = {name: {e.key() for e in exs} for name, exs in splits.items()}
    assert len(keys["train"]) == 300 and len(keys["validation"]) == 40 and len(keys["test"]) == 60
    assert not (keys["train"] & keys["test"]) and not (keys["train"] & keys["validation"])
    assert not (keys["validation"] & keys["test"])
    assert {e.task for e in splits["train"]} == set(TASKS)
    for e in splits["train"]:
        assert e.prompt.count(IMAGE_TOKEN) == len(e.scenes) == TASKS[e.task]
        assert e.prompt.startswith("USER:") and e.prompt.endswith("ASSISTANT:")
    # the test split does not depend on how much training data is drawn
    assert [e.key() for e in make_splits(0, 10, 40, 60)["test"]] == [e.key() for e in splits["test"]]


def test_fact_spans_are_exactly_the_fact_words(splits):
    for e in (x for xs in splits.values() for x in xs):
        assert extract_facts(e.answer) == e.fact_values()  # generic wording never uses a fact word
        assert all(e.answer[f.start - 1] in " (" for f in e.facts)  # facts are whole words
        assert facts_correct(e.answer, e)
        assert any(f.in_prompt for f in e.facts) == (e.task == "story")
    e = _example(splits, "vqa")
    wrong = e.answer.replace(e.fact_values()[1], "green" if e.fact_values()[1] != "green" else "red", 1)
    assert not facts_correct(wrong, e)


def test_story_captions_describe_frames_and_one_attribute_changes(splits):
    e = _example(splits, "story")
    for k, cap in enumerate(e.captions[:4]):
        assert f"Caption #{k + 1}: {cap}" in e.prompt
    assert e.captions[4] not in e.prompt.split("Caption #5:")[0] or e.captions[4] == e.captions[3]
    rng = np.random.default_rng(1)
    s = random_scene(rng)
    for attr in ATTRIBUTES:
        t = change_scene(s, attr, rng)
        changed = [a for a in ("colour", "shape", "count", "side") if getattr(s, a) != getattr(t, a)]
        assert len(changed) == 1
    assert render(s).size == (64, 64)


def _walks(splits):
    """(example, changed attributes, verdict fact values, all fact values) of the difference answers."""
    from calibrate.zoo.scenes import attribute_value

    for e in splits["train"]:
        if e.task in ("spot", "iedit", "story"):
            before, after = e.scenes[-2], e.scenes[-1]
            changed = [a for a in ATTRIBUTES if attribute_value(before, a) != attribute_value(after, a)]
            verdicts = [v for v, f in zip(e.fact_values(), e.facts) if f.kind == "change"]
            yield e, changed, verdicts, e.fact_values()


def test_difference_walk_names_the_changed_attribute(splits):
    """Spot, IEdit and story answers: four verdicts, a 'new <attr>' for the changed one, named again after."""
    tasks = set()
    for e, changed, verdicts, values in _walks(splits):
        assert len(changed) == 1 and len(verdicts) == 4 and set(verdicts) <= {"same", "new"}
        assert changed[0] in [values[i + 1] for i, v in enumerate(values) if v == "new"]
        named = [v for v, f in zip(values, e.facts) if f.kind == "attribute"]
        assert named[-1] == changed[0] and changed[0] in named[:-1]  # the summary repeats the walk's verdict
        tasks.add(e.task)
    assert tasks == {"spot", "iedit", "story"}


def test_difference_walk_has_exactly_one_new_verdict(splits):
    assert all(verdicts.count("new") == 1 for _, _, verdicts, _ in _walks(splits))


def test_example_json_round_trip(splits):
    for task in TASKS:
        e = _example(splits, task)
        d = json.loads(json.dumps(e.to_json()))
        assert Example.from_json(d) == e
        assert Scene.from_json(e.scenes[0].to_json()) == e.scenes[0]
    with pytest.raises(ValueError, match="task"):
        make_example("poem", np.random.default_rng(0))


def test_tokenizer_round_trip_and_special_tokens(processor, splits, tmp_path):
    from calibrate.zoo.tokenizer import IMAGE_ID, load_tokenizer, save_tokenizer

    tok = processor.tokenizer
    assert 300 < len(tok) <= 1024
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.convert_tokens_to_ids(IMAGE_TOKEN) == IMAGE_ID
    save_tokenizer(tok, tmp_path)
    loaded = load_tokenizer(tmp_path)
    texts = [e.prompt + e.answer for e in splits["test"][:20]] + ["USER: \n Describe\nthe picture."]
    for text in texts:
        ids = loaded(text).input_ids
        assert ids[0] == 1 and ids == tok(text).input_ids
        assert loaded.decode(ids[1:]) == text
    assert loaded(IMAGE_TOKEN * 3, add_special_tokens=False).input_ids == [IMAGE_ID] * 3


def test_flop_ratio_and_second_count():
    from calibrate.zoo.zoo_models import build_model, decoder_flops_per_token, zoo_config

    target, draft = (zoo_config(r, 700) for r in ("target", "draft"))
    for ctx in (0, 110, 450):  # no context, a 1-image and a 5-image request
        ratio = decoder_flops_per_token(target.text_config, ctx) / decoder_flops_per_token(
            draft.text_config, ctx
        )
        assert ratio >= 10, (ctx, ratio)
    # second implementation: 2 × (weights of every Linear in the decoder layers and lm head)
    model = build_model(draft)
    linear = (
        sum(
            m.weight.numel()
            for m in model.model.language_model.layers.modules()
            if isinstance(m, torch.nn.Linear)
        )
        + model.lm_head.weight.numel()
    )
    assert decoder_flops_per_token(draft.text_config) == 2 * linear


@pytest.mark.parametrize("task", ["describe", "story"])
def test_forward_with_one_and_five_images(processor, splits, task):
    from calibrate.zoo.data import encode_prompt
    from calibrate.zoo.zoo_models import IMAGE_TOKENS_PER_IMAGE, build_model, zoo_config

    e = _example(splits, task)
    inputs = processor(text=e.prompt, images=e.images(), return_tensors="pt")
    n_images = TASKS[task]
    assert int((inputs["input_ids"] == 3).sum()) == IMAGE_TOKENS_PER_IMAGE * n_images == 16 * n_images
    assert inputs["pixel_values"].shape == (n_images, 3, 64, 64)
    assert inputs["input_ids"][0].tolist() == encode_prompt(e.prompt, processor.tokenizer)
    for role in ("target", "draft"):
        model = build_model(zoo_config(role, len(processor.tokenizer)), seed=1).eval()
        with torch.no_grad():
            logits = model(**inputs).logits
        assert logits.shape == (1, inputs["input_ids"].shape[1], len(processor.tokenizer))
        assert torch.isfinite(logits).all()


def test_batches_respect_token_budget():
    from calibrate.zoo.data import batch_indices

    lengths = list(np.random.default_rng(0).integers(50, 450, size=200))
    it = batch_indices(lengths, 1024, np.random.default_rng(0))
    seen = []
    for _ in range(120):  # more than one pass over the data
        b = next(it)
        assert len(b) * max(lengths[i] for i in b) <= 1024 or len(b) == 1
        seen += b
    assert set(seen) == set(range(200))  # every sequence is used


def test_short_training_lowers_loss_and_saves_loadable_model(processor, splits, tmp_path):
    from calibrate.zoo.data import encode_examples
    from calibrate.zoo.train import TrainConfig, train_role, validation_loss
    from calibrate.zoo.zoo_models import build_model, load_zoo_model, save_zoo_model, zoo_config

    torch.set_num_threads(1)
    data = encode_examples(
        [e for e in splits["train"] if e.task in ("vqa", "describe")][:48], processor.tokenizer
    )
    model = build_model(zoo_config("target", len(processor.tokenizer), "tiny"), seed=0)
    before = validation_loss(model, data[:16], processor, 1024)
    cfg = TrainConfig(
        out=tmp_path, size="tiny", tokens_per_batch=1024, lr=3e-3, steps={"target": 25}, progress=False
    )
    log = train_role("target", model, data, data[:16], processor, cfg)
    assert log.steps == 25 and len(log.losses) == 25 and log.seconds > 0
    assert log.validation_loss < 0.7 * before
    save_zoo_model(model.eval(), processor, tmp_path / "target")
    assert (tmp_path / "target" / "model.safetensors").exists()
    loaded, proc = load_zoo_model(tmp_path / "target")
    e = splits["test"][0]
    inputs = proc(text=e.prompt, images=e.images(), return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(loaded(**inputs).logits, model(**inputs).logits, atol=1e-5)


def test_cli_end_to_end_tiny(tmp_path):
    from calibrate.zoo.train import main, parse_args

    torch.set_num_threads(1)
    out = tmp_path / "zoo"
    assert (
        main(
            [
                "--out",
                str(out),
                "--size",
                "tiny",
                "--threads",
                "1",
                "--n-train",
                "80",
                "--n-validation",
                "8",
                "--n-eval",
                "2",
                "--steps",
                "vision=2",
                "--steps",
                "target=2",
                "--steps",
                "draft=2",
                "--steps",
                "captioner=2",
                "--no-progress",
            ]
        )
        == 0
    )
    for role in ("target", "draft", "captioner"):
        assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= {
            p.name for p in (out / role).iterdir()
        }
    log = json.loads((out / "train_log.json").read_text())
    assert {r: m["steps"] for r, m in log["summary"]["models"].items()} == {
        "target": 2,
        "draft": 2,
        "captioner": 2,
    }
    assert (out / "loss_curves.png").stat().st_size > 1000
    card = (out / "MODEL_CARD.md").read_text()
    assert "text_only_accuracy" in log["summary"]["models"]["draft"]
    assert "| target |" in card and "--steps target=2" in card
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--steps", "teacher=3"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lr", "0"], "--lr: expected a positive number, got 0.0"),
        (["--target-lr", "-0.001"], "--target-lr: expected a positive number, got -0.001"),
        (["--minutes", "0"], "--minutes: expected a positive number, got 0.0"),
        (["--distill", "1.5"], "--distill: expected a weight in [0, 1], got 1.5"),
        (["--caption-warmup", "1"], "--caption-warmup: expected a fraction in [0, 1), got 1.0"),
    ],
)
def test_train_cli_rejects_bad_settings(args, message, capsys):
    from calibrate.zoo.train import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--out", "x", *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_target_trains_at_its_own_learning_rate(processor, splits, tmp_path):
    """``target_lr`` drives the target's updates, ``lr`` every other role's (same model, same batches)."""
    from calibrate.zoo.data import encode_examples
    from calibrate.zoo.train import TrainConfig, train_role
    from calibrate.zoo.zoo_models import build_model, zoo_config

    torch.set_num_threads(1)
    data = encode_examples([e for e in splits["train"] if e.task == "describe"][:8], processor.tokenizer)
    cfg = TrainConfig(
        out=tmp_path,
        size="tiny",
        tokens_per_batch=512,
        lr=1e-2,
        target_lr=1e-9,
        steps={"target": 2, "captioner": 2},
        progress=False,
    )
    moved = {}
    for role in ("target", "captioner"):
        model = build_model(zoo_config("target", len(processor.tokenizer), "tiny"), seed=0)
        before = model.lm_head.weight.detach().clone()
        train_role(role, model, data, data[:2], processor, cfg)
        moved[role] = float((model.lm_head.weight.detach() - before).abs().max())
    assert moved["target"] < 1e-6 and moved["captioner"] > 1e-4
