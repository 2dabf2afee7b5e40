"""How many of the project's functions a command runs from its handler to its printed output.

    python bench/path_count.py predict --gamma 5
    python bench/path_count.py predict --gamma 5 --profile zoo-cpu

Counts, with ``sys.setprofile``, the distinct specsim functions called while the command runs, from its
``cmd_*`` handler on, and prints them in call order. Left out: the parser's set-up, module and class
bodies, and loading the profile (``load_profile``: reading the JSON contract and validating it field by
field, the same for every command).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import specsim  # noqa: E402
from bench.script_main import run_main  # noqa: E402
from specsim.cli.main import main  # noqa: E402

ROOT = os.path.dirname(specsim.__file__)
SKIPPED = ("<module>", "<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def run(argv: list[str]) -> tuple[int, list[str]]:
    """``specsim ARGV``'s exit status and the distinct project functions it runs from its handler on, in
    first-call order."""
    seen: dict[str, None] = {}
    started, loading = [False], [0]

    def profile(frame, event, arg):
        code = frame.f_code
        if not code.co_filename.startswith(ROOT):
            return
        if code.co_name == "load_profile":
            loading[0] += 1 if event == "call" else -1 if event == "return" else 0
        if event != "call" or code.co_name in SKIPPED or loading[0]:
            return
        started[0] = started[0] or code.co_name.startswith("cmd_")
        if started[0] and not code.co_name[0].isupper():  # functions, not class bodies
            seen.setdefault(f"{os.path.relpath(code.co_filename, ROOT)}:{code.co_name}", None)

    sys.setprofile(profile)
    try:
        with open(os.devnull, "w") as sink:
            stdout, sys.stdout = sys.stdout, sink
            try:
                status = main(argv)
            finally:
                sys.stdout = stdout
    finally:
        sys.setprofile(None)
    return status, list(seen)


def count(argv: list[str]) -> int:
    """Print the functions ``specsim ARGV`` runs; its exit status (its error, if any, already printed)."""
    status, functions = run(argv)
    if status:
        return status
    print(f"specsim {' '.join(argv)}: {len(functions)} functions from the handler to the output")
    for name in functions:
        print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(count, sys.argv[1:]))
