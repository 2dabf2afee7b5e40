"""How a bench script runs: bad input (an argparse error, a SpecsimError) is one line on stderr and exit
status 2, Ctrl-C is exit status 130, as for the ``specsim`` command (specsim/cli/main.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


class ScriptParser(argparse.ArgumentParser):
    """argparse whose error is one line, ``<script>: error: <message> (see --help)``, and exit status 2
    (no usage text)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def run_main(main: Callable[..., int | None], *args) -> int:
    """``main(*args)``'s exit status (None: 0). A SpecsimError becomes ``<script>: error: <message>`` on
    stderr and status 2; KeyboardInterrupt ``<script>: interrupted`` and 130."""
    script = Path(sys.argv[0]).name
    try:
        status = main(*args)
    except KeyboardInterrupt:
        print(f"{script}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        # specsim is looked up, not imported: a script may pick the checkout it imports it from (--root)
        errors = sys.modules.get("specsim.errors")
        if errors is None or not isinstance(err, errors.SpecsimError):
            raise
        print(f"{script}: error: {err}", file=sys.stderr)
        return 2
    return 0 if status is None else status
