"""The llama.cpp options of ``calibrate latency``, ``calibrate acceptance`` and ``check`` (argparse only), and
their checks before any binary runs."""

from __future__ import annotations

import argparse

from specsim.errors import SpecsimError

ENGINES = ("transformers", "llama.cpp")


def llama_cpp_args(p: argparse.ArgumentParser, flag: str) -> None:
    """``flag`` (``--engine`` or ``--runtime``), ``--llama-cpp``, ``--ngram`` and ``--renice``."""
    grp = p.add_argument_group("llama.cpp (an engine this project did not write)")
    grp.add_argument(
        flag,
        choices=ENGINES,
        default="transformers",
        help="who runs the models: this project's engines on transformers (default), or llama.cpp's own "
        "binaries (llama-bench, llama-batched-bench, llama-server) on GGUF files",
    )
    grp.add_argument(
        "--llama-cpp",
        metavar="DIR",
        default=None,
        help="folder of a llama.cpp build's binaries (default: llama-server on PATH; README, 'llama.cpp: "
        "calibrate and check an engine this project did not write', says how to build them)",
    )
    grp.add_argument(
        "--ngram",
        metavar="KIND",
        default=None,
        help="also an n-gram drafting kind, no draft model: ngram-simple:N,M (llama.cpp's --spec-type "
        "ngram-simple, lookup of N tokens, drafts of N..M); check: one request at a time, not with "
        "--serve-rates",
    )
    grp.add_argument(
        "--renice",
        type=_niceness,
        default=0,
        help="run the timed processes ahead of the host's other work at this nice value (e.g. -10; needs the "
        "right to renice; default 0: as is)",
    )


def _niceness(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -20 <= value <= 0:
        raise argparse.ArgumentTypeError(f"expected an integer in -20..0, got {text!r}")
    return value


# what llama.cpp's runs take and this project's engines do not: (dest, option, its default)
_LLAMA_CPP_ONLY = (("llama_cpp", "--llama-cpp", None), ("ngram", "--ngram", None), ("renice", "--renice", 0))


def refuse_llama_cpp_flags(args, flag: str) -> None:
    """SpecsimError for the first of :data:`_LLAMA_CPP_ONLY` given without ``flag`` llama.cpp: this project's
    engines would silently run without what it asks for (the mirror of :func:`refuse_transformers_flags`)."""
    for dest, option, default in _LLAMA_CPP_ONLY:
        if getattr(args, dest, default) != default:
            raise SpecsimError(
                f"{option}: applies with {flag} llama.cpp (this project's engines do not read it)"
            )


def checked_ngram(args):
    """The --ngram kind (None without it); SpecsimError naming the value."""
    if args.ngram is None:
        return None
    from specsim.draft_shapes.ngram_lookup import parse_ngram

    try:
        return parse_ngram(args.ngram)
    except SpecsimError as err:
        raise SpecsimError(f"--ngram {args.ngram!r}: {err}") from None


def check_threads(args) -> int:
    """--threads for llama.cpp: required (a fixed thread count is part of what is measured)."""
    from calibrate.models.loaded_model import warn_oversubscribed

    if args.threads is None:
        raise SpecsimError("--threads: llama.cpp needs a fixed thread count (e.g. --threads 2)")
    warn_oversubscribed(int(args.threads))
    return int(args.threads)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


# calibrate latency's options that llama.cpp's calibration does not read (values, then switches)
_LATENCY_VALUES = (
    "target_config draft_config captioner device_map max_memory verify_context batch_sizes tree_sizes tree "
    "caption_tokens warmup max_repeats rel_halfwidth max_seconds_per_point request_new_tokens "
    "request_target_tokens request_prompt_lengths request_rounds"
)
_LATENCY_SWITCHES = (
    "random_weights no_vision no_unpadded_step no_server_loop no_workload no_resume quiet json"  # it resumes
)

# what this project's engines take and llama.cpp's runs do not: (dest, option, its default)
_TRANSFORMERS_ONLY = {
    "check": (
        ("temperature", "--temperature", 0.0),
        ("seeds", "--seeds", None),
        ("batch", "--batch", None),
        ("tree", "--tree", None),
        ("policy", "--policy", None),
        ("synthetic_acceptance", "--synthetic-acceptance", None),
        ("remeasure_batched", "--remeasure-batched", False),
        ("method", "--method", None),
        ("captioner", "--captioner", None),
        ("caption_prefix", "--caption-prefix", None),
        ("device", "--device", "cpu"),
        ("dtype", "--dtype", "float32"),
        ("random_weights", "--random-weights", False),
    ),
    "latency": (
        *((d, _flag(d), None) for d in _LATENCY_VALUES.split()),
        *((d, _flag(d), False) for d in _LATENCY_SWITCHES.split()),
        ("seed", "--seed", 0),
        ("max_new_tokens", "--max-new-tokens", 64),
        ("device", "--device", "cpu"),
        ("dtype", "--dtype", "float32"),
    ),
    "acceptance": (
        ("top_k", "--top-k", 0),
        ("sample_paths", "--sample-paths", 0),
        ("seed", "--seed", None),
        ("temperature", "--temperature", 1.0),
        ("reference_gamma", "--reference-gamma", 5),
        ("captioner", "--captioner", None),
        ("caption_prefix", "--caption-prefix", None),
        ("restart", "--restart", False),
        ("json", "--json", False),
        ("device", "--device", "cpu"),
        ("dtype", "--dtype", "float32"),
        ("random_weights", "--random-weights", False),
    ),
}


def refuse_transformers_flags(args, command: str, where: str) -> None:
    """SpecsimError for the first flag given that only this project's engines run (``command``'s
    :data:`_TRANSFORMERS_ONLY`): with ``where`` (llama.cpp's runs) it would be ignored without a word."""
    for dest, option, default in _TRANSFORMERS_ONLY[command]:
        if getattr(args, dest, default) != default:
            raise SpecsimError(f"{option}: does not apply with {where} (this project's engines only)")
