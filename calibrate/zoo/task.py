"""The zoo's synthetic multimodal task: 1-, 2- and 5-image requests in IbED's (Lee et al. 2024) Appendix C
templates.

Tasks: ``describe``/``vqa`` (1 image), ``spot``/``iedit`` (2 images, one attribute differs), ``story``
(5 frames, PororoSV template). Answers mix image facts (colour, shape, count, side, changed attribute) with
generic wording that never uses a fact word; each :class:`Example` records its fact spans, so acceptance on
image-dependent tokens can be measured, and :func:`extract_facts` recovers the facts from any text.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

# The zoo's captioner is trained on caption drafting's default prompt, so it runs there as shipped.
from calibrate.drafting.contexts import CAPTION_PROMPT
from calibrate.zoo.scenes import (
    ATTRIBUTES,
    COLOURS,
    COUNT_WORDS,
    SHAPES,
    SIDES,
    Scene,
    attribute_value,
    caption,
    change_scene,
    random_scene,
    render,
    shape_noun,
)

SCHEMA_VERSION = 1
IMAGE_TOKEN = "<image>"
SPLITS: tuple[str, ...] = ("train", "validation", "test")
TASKS: dict[str, int] = {"describe": 1, "vqa": 1, "spot": 2, "iedit": 2, "story": 5}  # task -> images
TASK_WEIGHTS: dict[str, float] = {"describe": 0.15, "vqa": 0.2, "spot": 0.2, "iedit": 0.15, "story": 0.3}
_VQA = (
    f"USER: {IMAGE_TOKEN} For the following question, provide a detailed explanation of your reasoning "
    "leading to the answer. {question} ASSISTANT:"
)
_PROMPTS = {
    "describe": f"USER: {IMAGE_TOKEN} Describe the picture in a few sentences. ASSISTANT:",
    "spot": f"USER: Explain the disparities between the first and second image. {IMAGE_TOKEN} {IMAGE_TOKEN} "
    "Difference: ASSISTANT:",
    "iedit": "USER: Please provide instructions for editing the source image to match the target image. "
    f"Source Image: {IMAGE_TOKEN} Target Image: {IMAGE_TOKEN} Instruction: ASSISTANT:",
}
_QUESTIONS = {
    "number": "How many shapes are in the picture?",
    "colour": "What colour are the shapes in the picture?",
    "shape": "Which kind of shapes are drawn in the picture?",
    "position": "On which side of the picture are the shapes?",
}
_SPLIT_STREAM = {"train": 0, "validation": 1, "test": 2}
SAME, NEW = "same", "new"  # verdicts of the difference walk: image-dependent, so fact words too
_FACT_WORDS = (
    set(COLOURS)
    | set(SHAPES)
    | {s + "s" for s in SHAPES}
    | set(COUNT_WORDS)
    | set(SIDES)
    | set(ATTRIBUTES)
    | {SAME, NEW}
)
FACT_RE = re.compile(r"\b(" + "|".join(sorted(_FACT_WORDS, key=len, reverse=True)) + r")\b")


@dataclass(frozen=True)
class FactSpan:
    """Answer characters [start, end) state an image fact of ``kind``; ``in_prompt``: value also in the
    prompt."""

    start: int
    end: int
    kind: str
    in_prompt: bool = False


@dataclass(frozen=True)
class Example:
    """One request: prompt with ``<image>`` placeholders, its scenes (one per image), answer and fact
    spans."""

    uid: str
    split: str
    task: str
    prompt: str
    answer: str
    scenes: tuple[Scene, ...]
    facts: tuple[FactSpan, ...]

    @property
    def images_per_prompt(self) -> int:
        return len(self.scenes)

    @property
    def captions(self) -> tuple[str, ...]:
        """One-line caption per image (for caption drafting)."""
        return tuple(caption(s) for s in self.scenes)

    def images(self) -> list:
        """The rendered 64×64 RGB PIL images, in placeholder order."""
        return [render(s) for s in self.scenes]

    def fact_values(self) -> tuple[str, ...]:
        """The fact words of the answer, in order."""
        return tuple(self.answer[f.start : f.end] for f in self.facts)

    def key(self) -> str:
        """Content hash of prompt, answer and image pixels (splits are disjoint on it)."""
        h = hashlib.sha1((self.prompt + "\x00" + self.answer).encode())
        for img in self.images():
            h.update(img.tobytes())
        return h.hexdigest()

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "uid": self.uid,
            "split": self.split,
            "task": self.task,
            "prompt": self.prompt,
            "answer": self.answer,
            "scenes": [s.to_json() for s in self.scenes],
            "facts": [[f.start, f.end, f.kind, f.in_prompt] for f in self.facts],
        }

    @classmethod
    def from_json(cls, d: dict) -> Example:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"example.schema_version: expected {SCHEMA_VERSION}, got {d.get('schema_version')!r}"
            )
        return cls(
            uid=d["uid"],
            split=d["split"],
            task=d["task"],
            prompt=d["prompt"],
            answer=d["answer"],
            scenes=tuple(Scene.from_json(s) for s in d["scenes"]),
            facts=tuple(FactSpan(int(a), int(b), str(k), bool(p)) for a, b, k, p in d["facts"]),
        )


class _Answer:
    """Builds an answer from generic text and fact pieces, recording fact spans."""

    def __init__(self) -> None:
        self.text = ""
        self.facts: list[FactSpan] = []

    def say(self, text: str) -> _Answer:
        self.text += text
        return self

    def fact(self, value: str, kind: str, in_prompt: bool = False) -> _Answer:
        self.facts.append(FactSpan(len(self.text), len(self.text) + len(value), kind, in_prompt))
        self.text += value
        return self

    def scene(self, s: Scene, known: Scene | None = None) -> _Answer:
        """'N C S on the SIDE' with four facts; ``known``: a scene whose values the prompt already states."""
        same = lambda a: known is not None and attribute_value(known, a) == attribute_value(s, a)
        self.fact(COUNT_WORDS[s.count - 1], "number", same("number")).say(" ")
        self.fact(s.colour, "colour", same("colour")).say(" ")
        self.fact(shape_noun(s.shape, s.count), "shape", same("shape")).say(" on the ")
        return self.fact(s.side, "position", same("position"))


def _spoken(s: Scene, attribute: str) -> str:
    """The word an answer states for ``attribute``: :func:`attribute_value`, but the shape as its noun
    ('circles' for several)."""
    return shape_noun(s.shape, s.count) if attribute == "shape" else attribute_value(s, attribute)


def _pick(rng: np.random.Generator, variants: tuple[str, ...], probs: tuple[float, ...]) -> str:
    """A generic-wording variant; skewed probabilities give the greedy models a clear mode."""
    return variants[int(rng.choice(len(variants), p=probs))]


def _describe(rng: np.random.Generator) -> tuple[str, list[Scene], _Answer]:
    s = random_scene(rng)
    a = _Answer().say(" " + _pick(rng, ("The picture shows ", "In this picture I can see "), (0.7, 0.3)))
    a.scene(s).say(". Everything is placed on that side of the picture. ")
    a.say(
        _pick(
            rng,
            ("The background is plain and nothing else is drawn.", "The rest of the picture is empty."),
            (0.65, 0.35),
        )
    )
    return _PROMPTS["describe"], [s], a


def _vqa(rng: np.random.Generator) -> tuple[str, list[Scene], _Answer]:
    s = random_scene(rng)
    attr = ATTRIBUTES[int(rng.integers(len(ATTRIBUTES)))]
    a = _Answer().say(
        " "
        + _pick(
            rng,
            (
                "To answer this, I look carefully at the picture.",
                "Let me look at the picture first.",
                "I will reason step by step.",
            ),
            (0.6, 0.3, 0.1),
        )
    )
    a.say(" I can see ").scene(s).say(". So the answer is ")
    a.say("the " if attr == "position" else "").fact(_spoken(s, attr), attr).say(".")
    return _VQA.format(question=_QUESTIONS[attr]), [s], a


# Neutral labels for the attribute-by-attribute walk, in walk order (the order scenes are described in);
# the attribute names themselves are fact words.
_WALK_LABELS: dict[str, str] = {"number": "count", "colour": "hue", "shape": "form", "position": "side"}


def _walk(a: _Answer, before: Scene, after: Scene, before_known: bool = False) -> _Answer:
    """'the count goes from two to two (same), the hue from red to blue (new colour), ...'.

    Each attribute's old and new value side by side, followed at once by the verdict: deciding it is a
    comparison of the two neighbouring words, and the later "which attribute changed" copies the one
    ``new <attribute>`` of the walk (a tiny decoder fails to compare all four pairs in one step: measured
    46% when the answer named the changed attribute first, 52% with the pairs but no verdicts).
    ``before_known``: ``before``'s values are already in the prompt (story captions), as are equal new values.
    The verdict compares attribute values, not the spoken words: "from circle to circles" is the same shape.
    """
    for k, (attr, label) in enumerate(_WALK_LABELS.items()):
        old, new = _spoken(before, attr), _spoken(after, attr)
        a.say(
            ("the " if k == 0 else (" and the " if k == 3 else ", the "))
            + label
            + (" goes" if k == 0 else "")
            + " from "
        )
        a.fact(old, attr, before_known).say(" to ").fact(new, attr, before_known and new == old).say(" (")
        if attribute_value(before, attr) == attribute_value(after, attr):
            a.fact(SAME, "change").say(")")
        else:
            a.fact(NEW, "change").say(" ").fact(attr, "attribute").say(")")
    return a


def _difference(rng: np.random.Generator, task: str) -> tuple[str, list[Scene], _Answer]:
    s1 = random_scene(rng)
    attr = ATTRIBUTES[int(rng.integers(len(ATTRIBUTES)))]
    s2 = change_scene(s1, attr, rng)
    old, new = attribute_value(s1, attr), attribute_value(s2, attr)
    a = _Answer()
    if task == "spot":
        _walk(a.say(" From the first image to the second, "), s1, s2)
        a.say(". So only the ").fact(attr, "attribute").say(" is different. ")
        a.say(
            _pick(
                rng,
                ("Everything else stays as it was.", "Nothing else changes between the images."),
                (0.7, 0.3),
            )
        )
    else:
        _walk(a.say(" From source to target, "), s1, s2)
        a.say(". So change the ").fact(attr, "attribute").say(" from ").fact(old, attr).say(" to ").fact(
            new, attr
        )
        a.say(". Keep everything else as it is.")
    return _PROMPTS[task], [s1, s2], a


def _story(rng: np.random.Generator) -> tuple[str, list[Scene], _Answer]:
    frames = [random_scene(rng)]
    attrs = []
    for _ in range(4):
        attrs.append(ATTRIBUTES[int(rng.integers(len(ATTRIBUTES)))])
        frames.append(change_scene(frames[-1], attrs[-1], rng))
    parts = [
        "USER: Given the progression of the story with the first few images, can you write a fitting end "
        "considering the last image?"
    ]
    parts += [f"{IMAGE_TOKEN} Caption #{k + 1}: {caption(f)}" for k, f in enumerate(frames[:4])]
    prompt = " ".join(parts) + f" {IMAGE_TOKEN} Caption #5: ASSISTANT:"
    last, before, attr = frames[4], frames[3], attrs[3]
    a = _walk(_Answer().say(" From the fourth picture to the fifth, "), before, last, before_known=True)
    a.say(". So only the ").fact(attr, "attribute").say(" changed. ")
    a.say(_pick(rng, ("And that is how the story ends.", "That is the end of the little story."), (0.7, 0.3)))
    return prompt, frames, a


def make_example(task: str, rng: np.random.Generator, *, uid: str = "", split: str = "") -> Example:
    """One example of ``task`` (one of :data:`TASKS`) drawn from ``rng``."""
    if task not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    builders = {"describe": _describe, "vqa": _vqa, "story": _story}
    prompt, scenes, a = _difference(rng, task) if task in ("spot", "iedit") else builders[task](rng)
    return Example(
        uid=uid,
        split=split,
        task=task,
        prompt=prompt,
        answer=a.text,
        scenes=tuple(scenes),
        facts=tuple(a.facts),
    )


def make_split(
    split: str,
    n: int,
    seed: int = 0,
    *,
    exclude: frozenset[str] = frozenset(),
    tasks: tuple[str, ...] | None = None,
) -> list[Example]:
    """``n`` examples of ``split`` (tasks drawn by :data:`TASK_WEIGHTS`), skipping content keys in
    ``exclude``."""
    if split not in _SPLIT_STREAM:
        raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
    names = tuple(tasks or TASK_WEIGHTS)
    probs = np.array([TASK_WEIGHTS[t] for t in names])
    rng = np.random.default_rng([seed, _SPLIT_STREAM[split]])
    out: list[Example] = []
    seen = set(exclude)
    while len(out) < n:
        ex = make_example(
            names[int(rng.choice(len(names), p=probs / probs.sum()))],
            rng,
            uid=f"{split}-{len(out):05d}",
            split=split,
        )
        key = ex.key()
        if key not in seen:  # duplicates inside or across splits are redrawn: splits stay disjoint
            seen.add(key)
            out.append(ex)
    return out


def make_splits(
    seed: int = 0, n_train: int = 2000, n_validation: int = 100, n_test: int = 200
) -> dict[str, list[Example]]:
    """Disjoint train/validation/test splits; test and validation do not depend on ``n_train``."""
    test = make_split("test", n_test, seed)
    val = make_split("validation", n_validation, seed, exclude=frozenset(e.key() for e in test))
    held = frozenset(e.key() for e in test + val)
    return {"train": make_split("train", n_train, seed, exclude=held), "validation": val, "test": test}


def extract_facts(text: str) -> tuple[str, ...]:
    """Fact words stated in ``text`` (colours, shapes, counts, sides, attribute names), in order."""
    return tuple(FACT_RE.findall(text))


def facts_correct(generated: str, example: Example) -> bool:
    """True when ``generated`` states exactly the example's image facts, in the same order."""
    return extract_facts(generated) == example.fact_values()


def text_only_prompt(prompt: str) -> str:
    """IbED's text-only drafting input: each ``<image>`` placeholder becomes a newline."""
    return prompt.replace(IMAGE_TOKEN, "\n")


def caption_example(scene: Scene) -> tuple[str, str]:
    """(prompt, answer) for the captioner: one image, answer = ' ' + caption."""
    return CAPTION_PROMPT, " " + caption(scene)


def corpus(examples: list[Example]) -> list[str]:
    """All text of ``examples`` (prompts, answers, captions) for tokenizer training."""
    out = []
    for e in examples:
        out += [e.prompt, e.answer, *(" " + c for c in e.captions)]
    return out + [CAPTION_PROMPT]
