"""Reading JSON files and checking object keys, with the one-line errors every loader in specsim gives."""

from __future__ import annotations

import json
import math
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


# --------------------------------------------------------------------------- field validators
# Shared by every JSON contract (profiles, cost models, devices): each names the field and the bad value.
def show(value: Any) -> str:
    """A short rendering of a bad value for an error message (at most 60 characters)."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_req(d: Any, key: str, where: str) -> Any:
    """``d[key]``; SpecsimError when ``d`` is not an object or the key is missing."""
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object, got {show(d)}")
    if key not in d:
        raise SpecsimError(f"{where}.{key}: missing")
    return d[key]


def field_num(value: Any, where: str, *, lo: float | None = None, hi: float | None = None,
              lo_open: bool = False) -> float:
    """A finite number within [lo, hi] (lo excluded when ``lo_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecsimError(f"{where}: expected a finite number, got {show(value)}")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise SpecsimError(f"{where}: expected {'>' if lo_open else '>='} {lo}, got {show(value)}")
    if hi is not None and value > hi:
        raise SpecsimError(f"{where}: expected <= {hi}, got {show(value)}")
    return float(value)


def field_int(value: Any, where: str, *, lo: int | None = None) -> int:
    """An integer (not a bool) >= lo."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecsimError(f"{where}: expected an integer, got {show(value)}")
    if lo is not None and value < lo:
        raise SpecsimError(f"{where}: expected an integer >= {lo}, got {show(value)}")
    return value


def field_str(value: Any, where: str, *, allow_empty: bool = False) -> str:
    """A (non-empty unless ``allow_empty``) string."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecsimError(f"{where}: expected a non-empty string, got {show(value)}")
    return value


def field_list(value: Any, where: str, *, nonempty: bool = True) -> list:
    """A (non-empty) JSON list."""
    if not isinstance(value, list) or (nonempty and not value):
        raise SpecsimError(f"{where}: expected a {'non-empty ' if nonempty else ''}list, got {show(value)}")
    return value


def field_opt(d: dict, key: str, parse, where: str):
    """``parse(d[key], where.key)``, or None when the key is absent or null."""
    value = d.get(key)
    return None if value is None else parse(value, f"{where}.{key}")


def drop_none(d: dict) -> dict:
    """``d`` without its None values (optional fields are omitted from JSON)."""
    return {k: v for k, v in d.items() if v is not None}
