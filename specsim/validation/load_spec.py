"""The load a published serving benchmark ran under (a row's optional ``load``): enough to replay it in
``specsim serve``'s simulation (:mod:`specsim.validation.load_rows`).

A ``vllm bench serve`` run, for instance, sends ``requests`` prompts of ``prompt_tokens`` (mean) at
``rate_per_s`` (Poisson arrivals), at most ``max_concurrency`` in flight, each generating ``output_tokens``;
the server's KV cache holds ``sd_kv_cache_tokens`` tokens with speculative decoding (target and draft caches
together) and ``target_kv_cache_tokens`` without it (as its log prints them; None: the catalog device's
memory decides), and its scheduler takes ``max_num_batched_tokens`` per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, field_int, field_num, show

_KEYS = {
    "requests",
    "rate_per_s",
    "max_concurrency",
    "prompt_tokens",
    "output_tokens",
    "sd_kv_cache_tokens",
    "target_kv_cache_tokens",
    "max_num_batched_tokens",
    "where",
}


@dataclass(frozen=True)
class ServedLoad:
    """A published benchmark's load (module docstring); token counts are per request, rate in 1/s."""

    requests: int
    rate_per_s: float
    max_concurrency: int
    prompt_tokens: int
    output_tokens: int
    where: str
    sd_kv_cache_tokens: int | None = None
    target_kv_cache_tokens: int | None = None
    max_num_batched_tokens: int = 8192


def parse_load(d: Any, where: str) -> ServedLoad | None:
    """A row's ``load`` object (None when the row has none); errors name the field and the bad value."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise SpecsimError(f"{where}: expected an object describing the benchmark's load, got {show(d)}")
    check_keys(d, _KEYS, where)
    text = d.get("where")
    if not isinstance(text, str) or not text.strip():
        raise SpecsimError(f"{where}.where: expected where in the source the load is given, got {show(text)}")

    def count(key: str, optional: bool = False) -> int | None:
        if optional and d.get(key) is None:
            return None
        if key not in d:
            raise SpecsimError(f"{where}.{key}: missing")
        unit = "tokens" if "tokens" in key else "batch" if key == "max_concurrency" else "size"
        return field_int(d[key], f"{where}.{key}", lo=1, unit=unit)

    rate = d.get("rate_per_s")
    if rate is None:
        raise SpecsimError(f"{where}.rate_per_s: missing")
    return ServedLoad(
        requests=count("requests"),
        rate_per_s=field_num(rate, f"{where}.rate_per_s", lo=0, lo_open=True),
        max_concurrency=count("max_concurrency"),
        prompt_tokens=count("prompt_tokens"),
        output_tokens=count("output_tokens"),
        where=text,
        sd_kv_cache_tokens=count("sd_kv_cache_tokens", optional=True),
        target_kv_cache_tokens=count("target_kv_cache_tokens", optional=True),
        max_num_batched_tokens=count("max_num_batched_tokens", optional=True) or 8192,
    )
