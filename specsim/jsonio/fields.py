"""Field validators of every JSON contract: objects, keys, schema versions, numbers, strings, lists,
``{"value", "source"}`` entries; each error names the field and the bad value."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specsim.bounds import check_range
from specsim.errors import SpecsimError
from specsim.jsonio.reading import lone_surrogate, surrogate_problem


def check_schema_version(d: Any, expected: int, where: str) -> int:
    """``expected`` when ``d`` is an object whose ``schema_version`` is exactly that integer; SpecsimError
    otherwise (``true`` and ``1.0`` equal 1 in Python, but no writer of this format wrote them)."""
    version = d.get("schema_version") if isinstance(d, dict) else None
    if type(version) is not int or version != expected:
        if isinstance(d, dict):
            got = show(version) if "schema_version" in d else "an object without one"
        else:
            got = f"{type(d).__name__} {show(d)}"
        raise SpecsimError(f"{where}: expected an object with schema_version {expected}, got {got}")
    return version


def check_keys(d: dict, allowed: Iterable[str], where: str) -> None:
    """SpecsimError naming the first key of ``d`` that is not in ``allowed``."""
    allowed = set(allowed)
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SpecsimError(f"{where}: unknown field {unknown[0]!r} (expected one of {sorted(allowed)})")


def parse_file_data(data: Any, path: Path, what: str, parse):
    """``parse(data)`` of a file's JSON, its errors prefixed with ``<what> file <name>:``."""
    try:
        return parse(data)
    except SpecsimError as err:
        raise SpecsimError(f"{what} file {path.name}: {err}") from None


def sourced(q: Any, where: str, source_hint: str) -> tuple[Any, str]:
    """(value, source) of a ``{"value": ..., "source": "..."}`` entry; errors name the field, and
    ``source_hint`` says what a source is (a datasheet, a paper, a fit command)."""
    if not isinstance(q, dict) or "value" not in q:
        raise SpecsimError(f'{where}: expected {{"value": number, "source": "..."}}, got {q!r}')
    source = q.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SpecsimError(f"{where}.source: expected {source_hint}, got {source!r}")
    return q["value"], field_str(source, f"{where}.source")


def check_object(d: Any, allowed: Iterable[str], where: str, *, schema_version: int | None = None) -> dict:
    """``d`` when it is a JSON object with only ``allowed`` keys (and, when given, exactly that integer
    ``schema_version``); SpecsimError naming ``where`` and the bad key or value otherwise."""
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected a JSON object, got {type(d).__name__}")
    version = d.get("schema_version")
    # The version first: a file of another version is told so, not which of its fields this one lacks.
    if schema_version is not None and (type(version) is not int or version != schema_version):
        # true == 1 and 1.0 == 1 in Python, but no writer of these files wrote them.
        raise SpecsimError(f"{where}.schema_version: expected {schema_version}, got {version!r}")
    check_keys(d, allowed, where)
    return d


# --------------------------------------------------------------------------- field validators
# Shared by every JSON contract (profiles, cost models, devices): each names the field and the bad value.
def show(value: Any) -> str:
    """A short rendering of a bad value for an error message (at most 60 characters)."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def few(items, limit: int = 6) -> str:
    """The first ``limit`` of ``items`` comma-separated, and how many more (for errors that name what was
    found: ``a, b, c and 141 more``)."""
    items = [str(i) for i in items]
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def field_req(d: Any, key: str, where: str) -> Any:
    """``d[key]``; SpecsimError when ``d`` is not an object or the key is missing."""
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object, got {show(d)}")
    if key not in d:
        raise SpecsimError(f"{where}.{key}: missing")
    return d[key]


def field_num(
    value: Any,
    where: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    unit: str | None = None,
    zero_ok: bool = False,
) -> float:
    """A finite number within [lo, hi] (lo excluded when ``lo_open``) and, when ``unit`` is given,
    within that unit's plausible range (:mod:`specsim.bounds`; 0 also allowed when ``zero_ok``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecsimError(f"{where}: expected a finite number, got {show(value)}")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise SpecsimError(f"{where}: expected {'>' if lo_open else '>='} {lo}, got {show(value)}")
    if hi is not None and value > hi:
        raise SpecsimError(f"{where}: expected <= {hi}, got {show(value)}")
    if unit is not None:
        check_range(value, unit, where, zero_ok=zero_ok)
    return float(value)


def field_int(value: Any, where: str, *, lo: int | None = None, unit: str | None = None) -> int:
    """An integer (not a bool) >= lo and, when ``unit`` is given, within its range (:mod:`specsim.bounds`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecsimError(f"{where}: expected an integer, got {show(value)}")
    if lo is not None and value < lo:
        raise SpecsimError(f"{where}: expected an integer >= {lo}, got {show(value)}")
    if unit is not None:
        check_range(value, unit, where)
    return value


def field_str(value: Any, where: str, *, allow_empty: bool = False) -> str:
    """A (non-empty unless ``allow_empty``) string of valid Unicode text: a lone surrogate (a JSON
    ``\\ud800`` escape without its pair) could not be printed or written as UTF-8 later."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecsimError(f"{where}: expected a non-empty string, got {show(value)}")
    bad = lone_surrogate(value)
    if bad:
        raise SpecsimError(f"{where}: {surrogate_problem(value, bad)}")
    return value


def field_list(value: Any, where: str, *, nonempty: bool = True) -> list:
    """A (non-empty) JSON list."""
    if not isinstance(value, list) or (nonempty and not value):
        raise SpecsimError(f"{where}: expected a {'non-empty ' if nonempty else ''}list, got {show(value)}")
    return value


def field_nested(
    value: Any, shape: tuple[int, ...], where: str, parse, axes: tuple[str, ...], *, noun: str = "rows"
) -> tuple:
    """A nested JSON list of ``shape`` as nested tuples, each leaf through ``parse(leaf, where[i][j]..)``;
    level k holds one entry per ``axes[k]``, named in the error when a length is wrong (the outermost
    level's entries are ``noun``, the inner ones values)."""
    items = field_list(value, where)
    if len(items) != shape[0]:
        raise SpecsimError(f"{where}: expected {shape[0]} {noun} (one per {axes[0]}), got {len(items)}")
    if len(shape) == 1:
        return tuple(parse(v, f"{where}[{i}]") for i, v in enumerate(items))
    return tuple(
        field_nested(v, shape[1:], f"{where}[{i}]", parse, axes[1:], noun="values")
        for i, v in enumerate(items)
    )


def field_opt(d: dict, key: str, parse, where: str):
    """``parse(d[key], where.key)``, or None when the key is absent or null."""
    value = d.get(key)
    return None if value is None else parse(value, f"{where}.{key}")


def drop_none(d: dict) -> dict:
    """``d`` without its None values (optional fields are omitted from JSON)."""
    return {k: v for k, v in d.items() if v is not None}
