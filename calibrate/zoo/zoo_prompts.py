"""The built-in ``zoo`` prompt set: held-out zoo requests with 1, 2 and 5 images, as JSONL + PNG files.

``python -m calibrate.zoo.zoo_prompts`` writes ``calibrate/prompts/zoo.jsonl`` and its images
(``calibrate/prompts/zoo/<id>-<k>.png``) from the zoo's test split (seed 0), ``per_scenario`` requests
per images-per-prompt group, interleaved 1/2/5 so ``--limit 3k`` keeps k of each. Prompt ids are the
test-split uids, so :func:`examples_by_id` recovers answers and image-fact spans for analysis.
A test checks the committed files equal this generator's output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from calibrate.zoo.task import Example, make_splits

PER_SCENARIO = 12
SEED = 0
N_TEST = 200  # the zoo's test split size (calibrate.zoo.train default); the set takes its first requests


def _test_split(seed: int) -> list[Example]:
    return make_splits(seed, n_train=0, n_validation=0, n_test=N_TEST)["test"]


def select_examples(per_scenario: int = PER_SCENARIO, seed: int = SEED) -> list[Example]:
    """The first ``per_scenario`` test requests with 1, 2 and 5 images, interleaved 1, 2, 5, 1, 2, 5, ..."""
    test = _test_split(seed)
    groups = {n: [e for e in test if e.images_per_prompt == n][:per_scenario] for n in (1, 2, 5)}
    short = {n: len(g) for n, g in groups.items() if len(g) < per_scenario}
    if short:
        raise ValueError(
            f"per_scenario: the test split has only {short} requests in some groups, expected {per_scenario}"
        )
    return [groups[n][i] for i in range(per_scenario) for n in (1, 2, 5)]


def examples_by_id(seed: int = SEED) -> dict[str, Example]:
    """Test-split examples by uid (the ``zoo`` prompt ids)."""
    return {e.uid: e for e in _test_split(seed)}


def records(examples: list[Example], image_folder: str = "zoo") -> list[dict]:
    """JSONL records (``calibrate.workload.prompt_sets`` format) with image paths relative to the JSONL
    file."""
    return [
        {
            "id": e.uid,
            "prompt": e.prompt,
            "task": e.task,
            "images_per_prompt": e.images_per_prompt,
            "images": [f"{image_folder}/{e.uid}-{k}.png" for k in range(e.images_per_prompt)],
        }
        for e in examples
    ]


def write_prompt_set(folder: Path, per_scenario: int = PER_SCENARIO, seed: int = SEED) -> Path:
    """Write ``zoo.jsonl`` and ``zoo/*.png`` into ``folder``; returns the JSONL path."""
    from specsim.jsonio import write_text_atomic

    examples = select_examples(per_scenario, seed)
    images = folder / "zoo"
    images.mkdir(parents=True, exist_ok=True)
    for old in images.glob("*.png"):  # images of an earlier generator version must not linger
        old.unlink()
    for e in examples:
        for k, img in enumerate(e.images()):
            img.save(images / f"{e.uid}-{k}.png", optimize=True)
    path = folder / "zoo.jsonl"
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in records(examples)))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m calibrate.zoo.zoo_prompts", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "prompts",
        help="folder for zoo.jsonl and zoo/ (default: the package's calibrate/prompts)",
    )
    p.add_argument("--per-scenario", type=int, default=PER_SCENARIO, help="requests per 1/2/5-image group")
    a = p.parse_args(argv)
    print(write_prompt_set(a.out, a.per_scenario))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
