"""The model and hardware options shared by ``hardware``, ``recommend`` and ``serve``: ``--pair``,
``--target``, ``--draft``, ``--image-size``, ``--device``, ``--runtime`` (:func:`add_model_options`), and
``--price`` (:func:`add_price_option`). Parsing only; models are resolved by
:mod:`specsim.hardware.model_resolution`, devices and runtimes by :mod:`specsim.hardware.plan_inputs`, prices
by :mod:`specsim.hardware.prices`."""

from __future__ import annotations

import argparse

from specsim.bounds import name_arg
from specsim.errors import SpecsimError
from specsim.hardware.device import DEVICE_DEFAULT
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


def add_model_options(
    parser,
    *,
    many_devices: bool = False,
    runtime_default: str = "vllm on GPUs",
    pair_default: str | None = "llava-1.5-7b-68m",
    device_given_only: bool = False,
) -> None:
    """Add the pair, models, image size, device and runtime options to ``parser`` (or an argument group):
    ``--device`` repeatable with ``many_devices`` (default: the whole GPU catalog), else one, h100-sxm
    (None with ``device_given_only``: the command tells a given one apart); ``runtime_default`` and
    ``pair_default`` (None: --pair or --target is needed) as the command has them."""
    from specsim.hardware.runtime import runtime_names
    from specsim.presets import pairs as preset_pairs

    pairs = ", ".join(sorted(preset_pairs()))
    parser.add_argument(
        "--pair",
        type=name_arg,
        default=None,
        help=f"preset pair: {pairs} (default: {pair_default})"
        if pair_default
        else f"preset pair: {pairs} (this or --target is needed)",
    )
    parser.add_argument("--target", type=name_arg, default=None, help=f"target: {MODEL_HELP}")
    parser.add_argument(
        "--draft",
        type=name_arg,
        default=None,
        help="draft model or head: same choices as --target (see --draft-kind)",
    )
    parser.add_argument(
        "--draft-kind",
        type=name_arg,
        default=None,
        metavar="KIND",
        help="how the draft side drafts: model (a separate draft model, default), eagle, eagle3 (a head at "
        "the target's width; --draft defaults to the head shipped for the target), mtp (one more layer of "
        "the target's), ngram or suffix (no model: a host lookup per sequence); `specsim hardware --list`",
    )
    add_image_size(parser)
    if many_devices:
        parser.add_argument(
            "--device",
            action="append",
            type=name_arg,
            default=None,
            help="catalog name or device JSON (repeatable; default: the whole GPU catalog; 'cpu' measures "
            "this machine)",
        )
    else:
        parser.add_argument(
            "--device",
            type=name_arg,
            default=None if device_given_only else DEVICE_DEFAULT,
            help=f"catalog name or device JSON (default {DEVICE_DEFAULT}; `specsim hardware --list-devices`)",
        )
    parser.add_argument(
        "--runtime",
        type=name_arg,
        default=None,
        metavar="NAME_OR_JSON",
        help=f"serving runtime: {', '.join(runtime_names())} or a runtime JSON "
        f"(default: {runtime_default}, torch-cpu on CPUs)",
    )


def add_price_option(parser) -> None:
    """Add ``--price DEVICE=USD`` (repeatable): a device-hour's price over its catalog file's."""
    parser.add_argument(
        "--price",
        action="append",
        default=None,
        metavar="DEVICE=USD",
        help="on-demand price of one device-hour in USD, e.g. l4=0.8 (repeatable; default: the catalog's "
        "cited price, where it has one); gives $/Mtok",
    )


def keep_option_defaults(parser: argparse.ArgumentParser) -> None:
    """Keep ``parser``'s options and their defaults on the parsed arguments, for :func:`refuse_unread`."""
    options = {a.dest: (a.option_strings, a.default) for a in parser._actions if a.dest != "help"}
    parser.set_defaults(option_defaults=options)


def refuse_unread(args: argparse.Namespace, reads: set[str], why: str) -> None:
    """SpecsimError for the first option given (not at its default) outside ``reads``, the dests a mode reads:
    ``why`` says why it would change nothing there."""
    for dest, (flags, default) in args.option_defaults.items():
        if flags and dest not in reads and getattr(args, dest) != default:
            raise SpecsimError(f"{flags[-1]}: {why}")
