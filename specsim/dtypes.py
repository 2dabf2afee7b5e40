"""Dtype names: the one alias table (``fp16`` → ``float16``, ...) that the roofline's byte sizes
(:mod:`specsim.hardware.model`) and calibrate's model loaders share."""

from __future__ import annotations

from specsim.errors import SpecsimError

DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8",
}
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")  # what models are loaded and timed in


def dtype_name(name: str) -> str:
    """Canonical name of a dtype: lower case, ``torch.`` dropped, aliases resolved ('BF16' → 'bfloat16')."""
    key = str(name).lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(key, key)


def canonical_dtype(dtype: str) -> str:
    """'float32' | 'float16' | 'bfloat16' from a name or alias; SpecsimError otherwise."""
    key = dtype_name(dtype)
    if key not in FLOAT_DTYPES:
        raise SpecsimError(f"unknown dtype {dtype!r} (expected one of: {', '.join(FLOAT_DTYPES)})")
    return key
