"""Command-line options shared by ``specsim calibrate acceptance`` and ``specsim check`` (argparse only).

They are read back by :func:`calibrate.workload.run_setup.load_setup`.
"""

from __future__ import annotations

import argparse

from specsim.bounds import number_arg
from specsim.report import parse_int_list


def method_args(p: argparse.ArgumentParser) -> None:
    """--method, --captioner, --caption-prefix."""
    p.add_argument(
        "--method",
        action="append",
        default=None,
        metavar="METHOD",
        help="drafting method, repeatable: plain (text pairs; the default), M (multimodal), T (text-only), "
        "C (caption), F (target-features), Z (zero rows at the image tokens: llama.cpp's draft on image "
        "input), P<n> (pooled to n tokens per image), ensembles such as "
        "MT, MC, MTC, MTCP4, and adaptive:MTC",
    )
    p.add_argument("--captioner", default=None, help="captioner VLM for C (default: the preset's captioner)")
    p.add_argument(
        "--caption-prefix", default=None, help="text before each caption for C (default 'Image: ')"
    )


def model_args(p: argparse.ArgumentParser) -> None:
    """Models, prompts, lengths, device, dtype, threads and the progress switch."""
    p.add_argument(
        "--preset", help="pair name from specsim/presets/pairs.json (e.g. qwen2.5-coder-0.5b-1.5b)"
    )
    p.add_argument("--target", help="target: HF id, local folder, .gguf file or config JSON (with --draft)")
    p.add_argument("--draft", help="draft model spec (with --target)")
    p.add_argument("--random-weights", action="store_true", help="architecture only (random weights)")
    p.add_argument(
        "--prompts",
        default=None,
        help="built-in prompt set or JSONL file (default: the preset's prompt set, else reference)",
    )
    p.add_argument(
        "--allow-outside-images",
        action="store_true",
        help="let prompt images lie outside the prompt file's folder (absolute paths, '..', symlinks out)",
    )
    p.add_argument(
        "--limit", type=number_arg("size", integer=True), default=None, help="use only the first N prompts"
    )
    p.add_argument(
        "--max-new-tokens",
        type=number_arg("output_tokens", integer=True),
        default=64,
        help="new tokens per prompt (default 64)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--threads", type=number_arg("threads", integer=True), default=None, help="torch CPU threads"
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="quiet: no progress bars (ours, nor transformers' weight loading and GGUF conversion, nor "
        "huggingface_hub's downloads), and the libraries' warnings while loading folded into one "
        "'specsim: warning:' line",
    )


class IntList(argparse.Action):
    """A list flag ('1,2,6', '1-4') parsed as argparse reads it (``unit``: the cap, :mod:`specsim.bounds`); a
    bad value is the SpecsimError that names the flag, one line, as :func:`specsim.report.parse_int_list`
    words it."""

    def __init__(self, *args, unit: str = "gamma", **kwargs):
        super().__init__(*args, **kwargs)
        self.unit = unit

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, parse_int_list(values, name=self.option_strings[0], unit=self.unit))
