"""Reading sizes out of a HF config: present-and-positive integers, errors naming the key."""

from __future__ import annotations

from typing import Any

from specsim.bounds import check_range
from specsim.errors import SpecsimError


def pos_int(value: Any, where: str) -> int:
    """``value`` as an integer >= 1 within the size bounds; SpecsimError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecsimError(f"{where}: expected an integer >= 1, got {value!r}")
    return check_range(value, "size", where)


def given(cfg: dict, where: str, *keys: str) -> int | None:
    """The first of ``keys`` the config sets (null counts as unset), checked >= 1 under its own name; None
    when it sets none. A 0 is a value, not a missing key: it is refused, never replaced by a default."""
    for k in keys:
        if cfg.get(k) is not None:
            return pos_int(cfg[k], f"{where}.{k}")
    return None
