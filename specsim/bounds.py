"""Plausible ranges per unit: values outside them are rejected where they enter (files, arguments).

The ranges are wide (they bound no real system) but finite, so no ratio of two accepted values
(c = Tq/Tp, v = Tv/Tp, FLOP/byte, $/token) can overflow to inf or vanish to 0, and no loop or array
built from an accepted count can exhaust memory. One table, used by profile, device and model-config
loaders and the CLI's argument types; a list argument holds at most :data:`MAX_LIST_VALUES` values, a
hardware plan at most :data:`MAX_PLAN_ROWS` rows. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import argparse
import math

from specsim.errors import SpecsimError

MAX_GAMMA = 1024
MAX_LIST_VALUES = 1024
MAX_PLAN_ROWS = 65536

RANGES: dict[str, tuple[float, float]] = {
    "ms": (1e-6, 1e8),
    "tokens": (0, 2**24),
    "kv_tokens": (1, 2**40),  # a serving KV cache's positions (a cluster's worth)
    "output_tokens": (1, 2**24),  # a request decodes at least one token
    "prompt_tokens": (1, 2**24),  # a request has at least one prompt token
    "step_tokens": (1, 2**24),  # a step's token budget holds at least one token
    "gamma": (1, MAX_GAMMA),
    "tree_nodes": (1, 512),  # a token tree's draft nodes: the tree search's bound
    "batch": (1, 4096),
    "images": (0, 1024),
    "ratio": (1e-6, 1e6),
    "bytes_per_s": (1e6, 1e16),
    "flops_per_s": (1e6, 1e19),
    "ops_per_s": (1e6, 1e19),
    "bytes": (1e6, 1e16),
    "usd_per_hour": (0, 1e6),
    "threads": (1, 65536),
    "gpus": (1, 1024),
    "size": (1, 2**24),
    "repeats": (1, 100000),
    "seconds": (1e-3, 1e6),
    "minutes": (1e-3, 1e5),
    "seed": (0, 2**63 - 1),
    "temperature": (1e-3, 1e3),
    "rate_per_s": (1e-6, 1e6),
    "arrival_s": (0, 1e9),
    "burstiness": (1e-3, 1e3),
}


def _shown(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def range_text(unit: str, *, zero_ok: bool = False) -> str:
    """'1e-06..1e+08 ms' — the accepted range of ``unit`` for messages."""
    lo, hi = RANGES[unit]
    return f"{'0 or ' if zero_ok and lo > 0 else ''}{_shown(lo)}..{_shown(hi)} ({unit})"


def in_range(value: float, unit: str, *, zero_ok: bool = False) -> bool:
    """True when ``value`` is finite and inside the range of ``unit`` (or 0 when ``zero_ok``)."""
    lo, hi = RANGES[unit]
    return math.isfinite(value) and ((zero_ok and value == 0) or lo <= value <= hi)


def check_range(value: float, unit: str, where: str, *, zero_ok: bool = False) -> float:
    """``value`` if plausible for ``unit``; SpecsimError naming ``where``, the value and the range."""
    if not in_range(value, unit, zero_ok=zero_ok):
        raise SpecsimError(f"{where}: expected a value in {range_text(unit, zero_ok=zero_ok)}, got {value!r}")
    return value


def clip(text, limit: int = 60) -> str:
    """``text`` shortened to ``limit`` characters with '...' (for echoing user input in one-line errors)."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_arg(text: str) -> str:
    """An argparse ``type=``: a name or path, not blank (an empty one read as "not given" and ran the
    default without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name or path, got {text!r}")
    return text


def interval_arg(lo: float, hi: float, expected: str, *, lo_open: bool = False, hi_open: bool = False):
    """An argparse ``type=``: a finite number in [lo, hi] (an end excluded when open); the error says
    ``expected`` and echoes the bad text."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (lo < value if lo_open else lo <= value)
        if not (ok and (value < hi if hi_open else value <= hi)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {clip(text)!r}")
        return value

    parse.__name__ = expected
    return parse


def number_arg(unit: str, *, zero_ok: bool = False, integer: bool = False):
    """An argparse ``type=``: a finite number (an integer if ``integer``) in the range of ``unit``."""
    kind = "an integer" if integer else "a finite number"

    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {kind} in {range_text(unit, zero_ok=zero_ok)}, got {text!r}"
            ) from None
        if not in_range(value, unit, zero_ok=zero_ok):
            raise argparse.ArgumentTypeError(
                f"expected {kind} in {range_text(unit, zero_ok=zero_ok)}, got {text!r}"
            )
        return value

    parse.__name__ = f"{unit} {'integer' if integer else 'number'}"
    return parse
