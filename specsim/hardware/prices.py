"""Prices of device-hours: ``--price DEVICE=USD`` over a catalog file's cited ``price_per_hour_usd``, and
dollars per million generated tokens from them (``$/Mtok`` in ``hardware`` and ``serve``).

$/Mtok = price per device-hour × devices / (3600 × tokens per second) × 1e6: what the tokens cost while
the devices are rented, idle time included (a served run's tokens/s counts its whole duration).
"""

from __future__ import annotations

from specsim.bounds import check_range, clip
from specsim.errors import SpecsimError


def parse_prices(texts) -> dict[str, float]:
    """``["h100=3.5", ...]`` -> {"h100-sxm": 3.5}: catalog names as ``--device`` reads them (any case, an
    alias); SpecsimError naming ``--price`` and the bad part, or a device priced twice however spelt."""
    from specsim.hardware.device import resolve_device_name

    prices: dict[str, float] = {}
    for text in texts or ():
        name, sep, value = str(text).partition("=")
        try:
            usd = float(value) if sep and name.strip() else None
        except ValueError:
            usd = None
        if usd is None:
            raise SpecsimError(f"--price: expected DEVICE=USD_PER_HOUR (e.g. l4=0.8), got {clip(text)!r}")
        key = resolve_device_name(name.strip()) or name.strip()
        if key in prices:
            raise SpecsimError(f"--price: device {key!r} given twice")
        prices[key] = check_range(usd, "usd_per_hour", f"--price {name.strip()}")
    return prices


def priced(devices: list, prices: dict[str, float]) -> list:
    """``devices`` with the prices given for them (a name not among them is refused: a typo would
    otherwise leave a device at its catalog price)."""
    names = [d.name for d in devices]
    unknown = [n for n in prices if n not in names]
    if unknown:
        raise SpecsimError(f"--price: device {unknown[0]!r} is not among the devices ({', '.join(names)})")
    return [d.with_price(prices[d.name], "--price") if d.name in prices else d for d in devices]


def usd_per_million_tokens(usd_per_hour: float | None, devices: int, tokens_per_s: float) -> float | None:
    """Dollars per million tokens generated at ``tokens_per_s`` on ``devices`` devices (None: no price)."""
    if usd_per_hour is None or not tokens_per_s > 0:
        return None
    return usd_per_hour * devices / (tokens_per_s * 3600.0) * 1e6
