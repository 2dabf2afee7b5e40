"""Plain-text tables and number formatting for the CLI (no dependencies)."""

from __future__ import annotations

from collections.abc import Sequence

from specsim.bounds import clip  # noqa: F401  (re-exported: where commands import it from)


def fmt(value, digits: int = 3, missing: str = "-") -> str:
    """A number with ``digits`` decimals, or ``missing`` for None."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "  ") -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right-aligned."""
    widths = [
        max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
        for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _int_list(text: str, unit: str, zero_ok: bool = False) -> list[int]:
    """Values of '5', '1-4' or '1,2,6' within the range of ``unit`` (0 too when ``zero_ok``); ValueError with
    the reason otherwise."""
    from specsim.bounds import MAX_LIST_VALUES, RANGES

    hi_cap, lo_cap = int(RANGES[unit][1]), 0 if zero_ok else 1
    usage = f"expected integers >= {lo_cap} like 5, {lo_cap}-10 or {lo_cap},2,4; got {clip(text)!r}"
    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            lo, hi = (int(p) for p in part.split("-", 1)) if "-" in part[1:] else (int(part), int(part))
        except ValueError:
            raise ValueError(usage) from None
        if lo < lo_cap or hi < lo:
            raise ValueError(usage)
        if hi > hi_cap:
            raise ValueError(f"expected values <= {hi_cap} (the cap on {unit}), got {clip(text)!r}")
        if len(values) + hi - lo + 1 > MAX_LIST_VALUES:
            raise ValueError(f"expected at most {MAX_LIST_VALUES} values, got more from {clip(text)!r}")
        values.extend(range(lo, hi + 1))
    return list(dict.fromkeys(values))


def parse_int_list(
    text: str, *, name: str = "gamma", unit: str = "gamma", zero_ok: bool = False
) -> list[int]:
    """'5' -> [5]; '1-4' -> [1, 2, 3, 4]; '1,2,6' -> [1, 2, 6]: integers >= 1 (>= 0 when ``zero_ok``), in
    the order given, repeats dropped; each at most the cap of ``unit`` and at most MAX_LIST_VALUES values
    (:mod:`specsim.bounds`). SpecsimError naming ``name`` otherwise."""
    from specsim.errors import SpecsimError

    try:
        return _int_list(text, unit, zero_ok)
    except ValueError as err:
        raise SpecsimError(f"{name}: {err}") from None


def parse_int_lists(texts, default, *, name: str, unit: str) -> list[int]:
    """The sorted union of :func:`parse_int_list` over ``texts`` (a repeatable option); ``default`` when
    none was given."""
    if not texts:
        return list(default)
    return sorted({x for text in texts for x in parse_int_list(text, name=name, unit=unit)})


def int_list_arg(unit: str):
    """An argparse ``type=`` for :func:`parse_int_list` (argparse names the option in its message)."""
    import argparse

    def parse(text: str) -> list[int]:
        try:
            return _int_list(text, unit)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = f"{unit} list"
    return parse


def parse_int(text: str, *, name: str, unit: str) -> int:
    """One integer >= 1 within the cap of ``unit`` (:mod:`specsim.bounds`); SpecsimError naming ``name``."""
    from specsim.bounds import RANGES
    from specsim.errors import SpecsimError

    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise SpecsimError(f"{name}: expected an integer >= 1, got {clip(text)!r}")
    if value > RANGES[unit][1]:
        raise SpecsimError(
            f"{name}: expected at most {int(RANGES[unit][1])} (the cap on {unit}), got {clip(text)!r}"
        )
    return value
