"""Command line: ``specsim predict|sweep|profiles`` here; other subcommands plug in from their modules.

A plug-in module exposes ``register(subparsers, calibrate_subparsers)``; every parser it adds sets
``func=callable(args) -> int``. Plug-ins must not import torch at module level (``specsim --help``
has to work without it). Any :class:`SpecsimError`, and any argparse error, becomes one line on
stderr and exit status 2; a :class:`SpecsimWarning` is one ``specsim: warning:`` line.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from specsim.errors import SpecsimError, SpecsimWarning

# Modules that add subcommands; a missing one is skipped so each can land on its own.
_PLUGINS = (
    "specsim.commands",
    "specsim.hardware.cli",
    "specsim.hardware.cli_validate",
    "specsim.cli_import",
    "specsim.cli_recommend",
    "calibrate.cli_latency",
    "calibrate.cli_acceptance",
    "calibrate.cli_check",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a SpecsimError (one line, exit 2) instead of usage text plus a message."""

    def error(self, message: str):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        raise SpecsimError(f"{sub}{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    """The full argparse tree, plug-ins included."""
    parser = OneLineParser(
        prog="specsim",
        description=(
            "Predict speculative-decoding speedups for (multimodal) LLMs from a profile. "
            "speedup = tau / (gamma*c + v): tau = tokens per block (bonus included), "
            "c = Tq/Tp draft/target per-token time, v = Tv(gamma)/Tp verify/decode time."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    calib = sub.add_parser("calibrate", help="measure a profile on this machine (needs the calibrate extra)")
    calib_sub = calib.add_subparsers(dest="calibrate_command", metavar="WHAT")
    calib.set_defaults(func=lambda args: _usage(calib))
    for name in _PLUGINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):
                continue
            raise
        module.register(sub, calib_sub)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, SpecsimWarning):
        print(f"specsim: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specsim`` console script; returns the exit status."""
    parser = build_parser()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", SpecsimWarning)
            warnings.showwarning = _show_warning
            args = parser.parse_args(argv)
            if not getattr(args, "func", None):
                return _usage(parser)
            return int(args.func(args) or 0)
    except SpecsimError as err:
        print(f"specsim: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
