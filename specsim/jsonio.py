"""Reading JSON files and checking object keys, with the one-line errors every loader in specsim gives."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specsim.errors import SpecsimError


def read_json(path: str | Path, what: str) -> Any:
    """Parse the JSON file at ``path``; ``what`` names it in errors (e.g. "profile", "device file")."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecsimError(f"cannot read {what} {str(path)!r}: {err.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecsimError(f"{what} {str(path)!r} is not valid JSON (line {err.lineno}, column {err.colno}: "
                           f"{err.msg}); truncated or malformed file?") from None


def check_keys(d: dict, allowed: Iterable[str], where: str) -> None:
    """SpecsimError naming the first key of ``d`` that is not in ``allowed``."""
    allowed = set(allowed)
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SpecsimError(f"{where}: unknown field {unknown[0]!r} (expected one of {sorted(allowed)})")
