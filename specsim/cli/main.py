"""Command line: the ``specsim`` parser, with every command found through entry points.

Each command lives in a ``cmd_<command>.py`` module named in the ``specsim.commands`` entry-point group
(pyproject.toml); its ``register(subparsers)`` adds its parsers, each setting ``func=cmd_*(args) -> int``.
This module names no command module, so the measuring half plugs in without specsim importing it.
Any :class:`SpecsimError`, and any argparse error, becomes one line on stderr and exit status 2.
More: ARCHITECTURE.md, Notes by module (and Commands, for the command → file table).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from specsim import __version__
from specsim.errors import SpecsimError, SpecsimWarning

COMMAND_GROUP = "specsim.commands"
# Top-level packages of the calibrate extra (pyproject.toml) that the measuring commands import lazily.
_CALIBRATE_EXTRA = {
    "torch",
    "transformers",
    "gguf",
    "accelerate",
    "tqdm",
    "PIL",
    "safetensors",
    "tokenizers",
    "sentencepiece",
    "google",
}
CALIBRATE_PREFIX = "calibrate."


def source_tree_entry_points(installed: set[str], root: Path | None = None) -> list[EntryPoint]:
    """The ``specsim.commands`` entries of the source checkout's pyproject.toml (``root``: the folder above
    this package) that ``installed`` does not name; none outside a checkout or before Python 3.11."""
    path = (root or Path(__file__).resolve().parents[2]) / "pyproject.toml"
    try:
        import tomllib

        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (ImportError, OSError, ValueError):
        return []
    if project.get("name") != "specsim-mllm":
        return []
    listed = project.get("entry-points", {}).get(COMMAND_GROUP, {})
    return [EntryPoint(n, v, COMMAND_GROUP) for n, v in listed.items() if n not in installed]


def command_entry_points() -> list:
    """The ``specsim.commands`` entry points; SpecsimError when there are none (not installed)."""
    # Registration order is the order in pyproject.toml (the order of `specsim --help`), calibrate last.
    found = list(entry_points(group=COMMAND_GROUP))
    found += source_tree_entry_points({ep.name for ep in found}) if found else []
    eps = sorted(found, key=lambda ep: ep.name.startswith(CALIBRATE_PREFIX))
    if not eps:
        raise SpecsimError(
            "no commands found: specsim is not installed as a package (expected "
            "`pip install -e .` in the repository, which registers the 'specsim.commands' "
            "entry points)"
        )
    return eps


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a SpecsimError (one line, exit 2) instead of usage text plus a message."""

    def error(self, message: str):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        raise SpecsimError(f"{sub}{message} (see --help)")

    def parse_known_args(self, args=None, namespace=None):
        # each parse (a subcommand's included: its options all follow its name) counts its options afresh
        _GIVEN.clear()
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    """The full argparse tree, plug-ins included."""
    parser = OneLineParser(
        prog="specsim",
        description=(
            "Predict speculative-decoding speedups for (multimodal) LLMs from a profile. "
            "speedup = tau / (gamma*c + v + o): tau = tokens per block (bonus included), "
            "c = Tq/Tp draft/target per-token time, v = Tv(gamma)/Tp verify/decode time, o = the engine's "
            "overhead per block / Tp."
        ),
    )
    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    calib = sub.add_parser("calibrate", help="measure a profile on this machine (needs the calibrate extra)")
    calib_sub = calib.add_subparsers(dest="calibrate_command", metavar="WHAT")
    calib.set_defaults(func=lambda args: _usage(calib))
    for ep in command_entry_points():
        try:
            register = ep.load()
        except ModuleNotFoundError as err:
            # A half whose package is absent (e.g. a wheel without calibrate) just has no commands.
            if err.name and ep.value.startswith(err.name):
                continue
            raise
        register(calib_sub if ep.name.startswith(CALIBRATE_PREFIX) else sub)
    _given_once(parser)
    return parser


# Options that collect (repeatable by design) or print and exit; every other option takes one value.
_REPEATABLE = (
    argparse._AppendAction,
    argparse._AppendConstAction,
    argparse._CountAction,
    argparse._ExtendAction,
    argparse._HelpAction,
    argparse._VersionAction,
    argparse._SubParsersAction,
)
_GIVEN: set[int] = set()  # the single-value options met in the parse under way (OneLineParser resets it)
_ONCE: dict[type, type] = {}


def _once_class(base: type) -> type:
    """``base`` refusing a second call in one parse (argparse calls an action each time its option is met,
    abbreviated or ``--opt=value`` alike): the last one would win without a word."""
    if base not in _ONCE:

        def __call__(self, parser, namespace, values, option_string=None):
            if id(self) in _GIVEN:
                raise SpecsimError(f"{option_string}: given twice (expected it once)")
            _GIVEN.add(id(self))
            base.__call__(self, parser, namespace, values, option_string)

        _ONCE[base] = type(f"Once{base.__name__}", (base,), {"__call__": __call__})
    return _ONCE[base]


def _given_once(parser: argparse.ArgumentParser) -> None:
    """Every single-value option of ``parser`` and of its subcommands refuses to be given twice."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _given_once(sub)
        elif action.option_strings and not isinstance(action, _REPEATABLE):
            action.__class__ = _once_class(type(action))


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
    stdout = sys.stdout
    guard = sys.stdout = _GuardedStdout(stdout) if stdout is not None else None
    try:
        status = _run(argv)
        if guard is not None:
            guard.flush()  # a full device behind stdout fails here, while it can still be reported
        return status
    except _StdoutError as failed:
        _discard_stdout(stdout)
        if isinstance(failed.err, BrokenPipeError):  # the reader went away (`| head`): not an error
            return 0
        reason = failed.err.strerror or str(failed.err)
        print(f"specsim: error: cannot write to standard output ({reason})", file=sys.stderr)
        return 2
    except BrokenPipeError:  # written around the guard (not done today): still not an error
        _discard_stdout(stdout)
        return 0
    finally:
        if sys.stdout is guard:
            sys.stdout = stdout


def _run(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
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
    except ModuleNotFoundError as err:
        # Measuring commands import torch and transformers only when they run (the calibrate extra).
        if (err.name or "").split(".")[0] not in _CALIBRATE_EXTRA:
            raise
        print(
            f"specsim: error: this command needs the calibrate extra ({err.name} is not installed): "
            "python -m pip install torch==2.13.0 && python -m pip install -e '.[calibrate]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("specsim: interrupted", file=sys.stderr)
        return 130


class _StdoutError(Exception):
    """An OSError raised while writing stdout (:class:`_GuardedStdout`), so that :func:`main` reports
    stdout's failures, and only those, as such."""

    def __init__(self, err: OSError):
        super().__init__(str(err))
        self.err = err


class _GuardedStdout:
    """``sys.stdout`` while a command runs: writes and flushes go to the real stream, and an OSError from
    them (a full device, a closed pipe) comes out as :class:`_StdoutError`; anything else is delegated."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            raise _StdoutError(err) from err

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            raise _StdoutError(err) from err

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _discard_stdout(stream) -> None:
    """Point the process's stdout at /dev/null, so the interpreter's last flush of what stdout still
    buffers neither fails nor prints "Exception ignored" (Python's recipe for SIGPIPE); only for the
    real stdout (not a test's capture)."""
    if stream is None or stream is not sys.__stdout__:
        return
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
