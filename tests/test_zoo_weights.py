"""The shipped zoo weights: load offline, answer held-out requests exactly, caption, and the model card's
claims."""

import json

import pytest
import torch

from calibrate.zoo import weights_dir
from calibrate.zoo.evaluate import generate
from calibrate.zoo.task import CAPTION_PROMPT, facts_correct, text_only_prompt
from calibrate.zoo.zoo_models import decoder_flops_per_token, load_zoo_model
from calibrate.zoo.zoo_prompts import select_examples

EXPECTED = {  # greedy answers of the shipped target (seed 0) to the first 1-, 2- and 5-image zoo prompts
    "test-00000": " The picture shows two yellow circles on the right. Everything is placed on that side "
    "of the picture. The background is plain and nothing else is drawn.",
    "test-00001": " From the first image to the second, the count goes from four to four (same), the hue "
    "from yellow to yellow (same), the form from squares to squares (same) and the side from right to "
    "left (new position). So only the position is different. Everything else stays as it was.",
    "test-00004": " From the fourth picture to the fifth, the count goes from four to four (same), the "
    "hue from yellow to yellow (same), the form from circles to circles (same) and the side from left "
    "to top (new position). So only the position changed. And that is how the story ends.",
}


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return load_zoo_model(weights_dir("target"))


def test_target_answers_held_out_requests_exactly(target):
    model, proc = target
    examples = select_examples()[:3]
    assert [e.images_per_prompt for e in examples] == [1, 2, 5]
    for e in examples:
        got = generate(model, proc, e.prompt, e.images())
        assert got == EXPECTED[e.uid]
        assert facts_correct(got, e)
        # Without its images the same model cannot state the facts: the image matters.
        assert not facts_correct(generate(model, proc, text_only_prompt(e.prompt), None), e)


def test_captioner_and_draft_load_and_the_draft_is_over_ten_times_cheaper(target):
    cap, cproc = load_zoo_model(weights_dir("captioner"))
    e = select_examples()[0]
    assert generate(cap, cproc, CAPTION_PROMPT, e.images(), 16).strip() == e.captions[0]
    draft, _ = load_zoo_model(weights_dir("draft"))
    ratio = decoder_flops_per_token(target[0].config.text_config) / decoder_flops_per_token(
        draft.config.text_config
    )
    assert ratio >= 10


def test_model_card_matches_the_training_log():
    folder = weights_dir("target").parent
    log = json.loads((folder / "train_log.json").read_text())["summary"]
    card = (folder / "MODEL_CARD.md").read_text()
    for role, m in log["models"].items():
        assert f"| {role} |" in card and f"**{m['accuracy']['all']:.0%}**" in card
    draft = log["models"]["draft"]
    assert (
        draft["text_only_accuracy"]["all"]
        < draft["accuracy"]["all"]
        < log["models"]["target"]["accuracy"]["all"]
    )
    # Quality bars of the zoo: the target states the image facts in >= 90% of held-out answers, and the
    # draft is clearly worse than the target but clearly better than text-only guessing.
    assert (
        log["models"]["target"]["accuracy"]["all"] >= 0.9 and log["models"]["target"]["evaluated_on"] >= 100
    )
    assert 0.2 <= draft["accuracy"]["all"] <= log["models"]["target"]["accuracy"]["all"] - 0.2
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 25e6


def test_zoo_preset_smoke_calibration(tmp_path):
    from specsim.cli.main import main
    from specsim.profiles import load_profile

    out = tmp_path / "zoo.json"
    assert (
        main(
            [
                "calibrate",
                "acceptance",
                "--preset",
                "zoo",
                "--limit",
                "3",
                "--max-new-tokens",
                "24",
                "--threads",
                "1",
                "--no-progress",
                "--method",
                "M",
                "--method",
                "T",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    entries = load_profile(str(out)).acceptance
    rate = {
        m: sum(sum(t.match) for e in entries if e.method == m for t in e.traces)
        / sum(len(t.match) for e in entries if e.method == m for t in e.traces)
        for m in ("M", "T")
    }
    assert {e.scenario for e in entries} == {"zoo-1img", "zoo-2img", "zoo-5img"}
    assert rate["M"] > rate["T"]  # the trained draft reads the images
