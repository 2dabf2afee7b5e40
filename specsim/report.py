"""Plain-text tables and number formatting for the CLI (no dependencies)."""

from __future__ import annotations

from collections.abc import Sequence


def fmt(value, digits: int = 3, missing: str = "-") -> str:
    """A number with ``digits`` decimals, or ``missing`` for None."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "  ") -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def parse_int_list(text: str, *, name: str = "gamma") -> list[int]:
    """'5' -> [5]; '1-4' -> [1, 2, 3, 4]; '1,2,6' -> [1, 2, 6]; each an integer >= 1."""
    from specsim.errors import SpecsimError

    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), int(hi_s)
                if hi < lo:
                    raise ValueError
                values.extend(range(lo, hi + 1))
            else:
                values.append(int(part))
        except ValueError:
            raise SpecsimError(f"{name}: expected integers >= 1 like 5, 1-10 or 1,2,4; got {text!r}") from None
    if not values or min(values) < 1:
        raise SpecsimError(f"{name}: expected integers >= 1 like 5, 1-10 or 1,2,4; got {text!r}")
    return list(dict.fromkeys(values))
