"""Model options shared by the commands that take ``--target``/``--draft`` (``hardware``, ``recommend``,
``serve``): their help text and ``--image-size``. Parsing only; the models are resolved by
:mod:`specsim.hardware.model_resolution`."""

from __future__ import annotations

import argparse

from specsim.hardware.image_tokens import DEFAULT_IMAGE_SIZE, ImageSize, parse_image_size

MODEL_HELP = (
    "a preset, a shipped HF id or alias (Qwen/Qwen2.5-VL-7B-Instruct, qwen2.5-vl-7b, llama-3.1-8b, ...; "
    "`specsim hardware --list`), a folder with config.json or a config JSON path"
)


def add_image_size(parser: argparse.ArgumentParser) -> None:
    """Add ``--image-size WIDTHxHEIGHT``."""
    parser.add_argument(
        "--image-size",
        default=None,
        metavar="WxH",
        help="image size in pixels for VLMs whose image tokens depend on it (Qwen-VL, LLaVA-NeXT any-res, "
        f"InternVL tiles; default {DEFAULT_IMAGE_SIZE}, a typical photo or screenshot)",
    )


def image_size(args: argparse.Namespace) -> ImageSize | None:
    """``--image-size`` parsed (None when not given)."""
    given = getattr(args, "image_size", None)
    return None if given is None else parse_image_size(given)
