"""Prompt sets: a JSONL format, built-in offline sets, locally saved HF datasets, opening their images, and
encoding (a tokenizer's chat template, or UTF-8 bytes for an architecture without a tokenizer).

JSONL, one prompt per line with ``id``, ``prompt``, ``task``, ``images``, ``images_per_prompt``; only
``prompt`` is required. Image paths are relative to the file's folder and may not leave it unless
``allow_outside_images``; they are stored resolved. Built-in sets: ``calibrate/prompts/<name>.jsonl``.
Nothing is ever downloaded here. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specsim.bounds import check_range
from specsim.errors import SpecsimError
from specsim.jsonio import check_object, check_regular_file, parse_json, read_text

_FIELDS = {"id", "prompt", "task", "images", "images_per_prompt"}


@dataclass(frozen=True)
class Prompt:
    """One prompt: text, optional image paths, task label and the scenario's images per prompt."""

    id: str
    text: str
    task: str = ""
    images: tuple[str, ...] = ()
    images_per_prompt: int = 0

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "prompt": self.text,
            "task": self.task,
            "images": list(self.images),
            "images_per_prompt": self.images_per_prompt,
        }


def builtin_sets() -> list[str]:
    """Names of the built-in prompt sets."""
    folder = resources.files("calibrate") / "prompts"
    return sorted(p.name[:-6] for p in folder.iterdir() if p.name.endswith(".jsonl"))


def parse_prompt(
    d: dict, where: str, base: Path | None = None, default_id: str = "", *, allow_outside_images: bool = False
) -> Prompt:
    """One JSONL record → :class:`Prompt` (SpecsimError naming the field otherwise); image paths are
    checked against ``base`` (see the module docstring)."""
    check_object(d, _FIELDS, where)
    text = d.get("prompt")
    if not isinstance(text, str) or not text.strip():
        raise SpecsimError(f"{where}.prompt: expected a non-empty string, got {text!r:.60}")
    images = d.get("images", [])
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise SpecsimError(f"{where}.images: expected a list of paths, got {images!r:.60}")
    if base is not None:
        images = [
            image_path(i, base, f"{where}.images[{k}]", allow_outside_images) for k, i in enumerate(images)
        ]
    n_img = d.get("images_per_prompt", len(images))
    if isinstance(n_img, bool) or not isinstance(n_img, int) or n_img < 0:
        raise SpecsimError(f"{where}.images_per_prompt: expected an integer >= 0, got {n_img!r:.60}")
    check_range(n_img, "images", f"{where}.images_per_prompt")
    pid = d.get("id", default_id)
    return Prompt(
        id=str(pid), text=text, task=str(d.get("task", "")), images=tuple(images), images_per_prompt=n_img
    )


def image_path(image: str, base: Path, where: str, allow_outside: bool = False) -> str:
    """The resolved path of one prompt image: inside ``base`` unless ``allow_outside``, a regular file
    (a FIFO or device is refused by ``stat``, without opening it)."""
    if not image.strip():
        raise SpecsimError(f"{where}: expected an image path, got ''")
    if "\x00" in image:  # no file system path holds one (os.stat would raise ValueError)
        raise SpecsimError(f"{where}: {image!r} contains a NUL byte; expected an image path")
    if Path(image).is_absolute() and not allow_outside:
        raise SpecsimError(
            f"{where}: absolute path {image!r}; expected a path relative to the prompt file's folder "
            "(pass --allow-outside-images to allow it)"
        )
    real = Path(os.path.realpath(base / image))
    if not allow_outside and not real.is_relative_to(os.path.realpath(base)):
        raise SpecsimError(
            f"{where}: {image!r} resolves outside the prompt file's folder {str(base)!r} "
            "(pass --allow-outside-images to allow it)"
        )
    check_regular_file(real, f"{where}: image")
    return str(real)


def load_prompts(
    name_or_path: str, limit: int | None = None, *, allow_outside_images: bool = False
) -> list[Prompt]:
    """A built-in set by name or a JSONL file; the first ``limit`` prompts if given."""
    if name_or_path in builtin_sets():
        path = Path(str(resources.files("calibrate") / "prompts" / f"{name_or_path}.jsonl"))
    else:
        path = Path(name_or_path)
        if not os.path.lexists(path):
            raise SpecsimError(
                f"--prompts: prompt set {name_or_path!r} not found (expected a .jsonl file or one of: "
                f"{', '.join(builtin_sets())})"
            )
    text, base = read_text(path, "prompt set"), path.parent  # built-in sets keep their images beside them
    prompts = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = parse_json(line, f"{name_or_path} line {i}")
        prompts.append(
            parse_prompt(
                record,
                f"{name_or_path} line {i}",
                base,
                default_id=str(i),
                allow_outside_images=allow_outside_images,
            )
        )
    return _finish(prompts, name_or_path, limit)


def byte_ids(text: str, vocab: int):
    """Architecture-only models have no tokenizer: ids = UTF-8 bytes mod vocab (timing is what matters)."""
    import torch

    return torch.tensor([[b % vocab for b in text.encode("utf-8")] or [0]], dtype=torch.long)


def open_images(prompt) -> list:
    """The prompt's images as RGB (paths were checked at load: inside the folder, regular files)."""
    return [_read_image(prompt, path, lambda img: img.convert("RGB")) for path in prompt.images]


def _read_image(prompt, path: str, use):
    """``use(image)`` of one of the prompt's images; SpecsimError naming the prompt and the path when Pillow
    cannot read it. Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS) is an error, not a warning."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                return use(img)
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
        raise SpecsimError(
            f"prompt {prompt.id!r}: image {path!r} is too large to decode safely ({err}); a decompression "
            "bomb?"
        ) from None
    except (OSError, ValueError, SyntaxError) as err:
        raise SpecsimError(
            f"prompt {prompt.id!r}: cannot read image {path!r} ({err.__class__.__name__})"
        ) from None


def check_image_counts(prompts) -> None:
    """SpecsimError, before any model loads, when a prompt declares ``images_per_prompt`` other than the
    images it carries (its scenario group and captions follow the images), has another number of
    ``<image>`` placeholders than images, or has an image Pillow cannot identify."""
    from calibrate.drafting.contexts import check_placeholders

    for p in prompts:
        if p.images_per_prompt != len(p.images):
            raise SpecsimError(
                f"prompt {p.id!r}: images_per_prompt: expected {len(p.images)} (the prompt's images), "
                f"got {p.images_per_prompt}"
            )
        check_placeholders(p.text, len(p.images), p.id)  # as make_request would, after loading
        for path in p.images:
            _read_image(p, path, lambda img: img.verify())  # the header and structure, not the pixels


def _finish(prompts: list[Prompt], name: str, limit: int | None) -> list[Prompt]:
    if limit is not None:
        if limit < 1:
            raise SpecsimError(f"limit: expected an integer >= 1, got {limit}")
        prompts = prompts[:limit]
    if not prompts:
        raise SpecsimError(f"prompt set {name!r} is empty (expected at least one prompt)")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise SpecsimError(f"prompt set {name!r}: duplicate id {dup!r}")
    return prompts


def load_local_dataset(
    path: str,
    *,
    text_field: str,
    task: str = "",
    image_field: str | None = None,
    split: str | None = None,
    limit: int | None = None,
) -> list[Prompt]:
    """Prompts from an HF ``datasets`` dataset already on disk (``save_to_disk`` folder); never downloads.

    Images in ``image_field`` stay in memory-less form: only string paths are kept, so a dataset with
    embedded PIL images must be exported to files first.
    """
    try:
        import datasets
    except ModuleNotFoundError:
        raise SpecsimError(
            "loading an HF dataset needs the 'datasets' package (pip install datasets)"
        ) from None
    if not Path(path).is_dir():
        raise SpecsimError(
            f"dataset {path!r}: expected a local folder written by save_to_disk (nothing is downloaded)"
        )
    ds = datasets.load_from_disk(path)
    if split is not None:
        ds = ds[split]
    prompts = []
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        if text_field not in row:
            raise SpecsimError(f"dataset {path!r}: no field {text_field!r} (has: {', '.join(row)})")
        images = row.get(image_field) if image_field else []
        images = [images] if isinstance(images, str) else [i for i in (images or []) if isinstance(i, str)]
        prompts.append(
            Prompt(
                id=str(i),
                text=str(row[text_field]),
                task=task,
                images=tuple(images),
                images_per_prompt=len(images),
            )
        )
    return _finish(prompts, path, None)


def encode(tokenizer, prompt: Prompt, *, chat: bool = True):
    """Token ids [1, S] of a text prompt, through the tokenizer's chat template when it has one."""
    import torch

    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt.text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    else:
        ids = tokenizer(prompt.text)["input_ids"]
    if len(ids) == 0:
        raise SpecsimError(f"prompt {prompt.id!r}: encodes to zero tokens")
    return torch.tensor([list(ids)], dtype=torch.long)
