"""Weight and KV-cache formats: bytes per element by dtype name, and the format a HF config's weights are in.

A config's ``quantization_config`` (AWQ, GPTQ, FP8, bitsandbytes) names its weights' format; its
``torch_dtype`` is then the activations', not the weights'.
"""

from __future__ import annotations

from specsim.dtypes import DTYPE_ALIASES, dtype_name
from specsim.errors import SpecsimError, warn

# Bytes per weight. Quantised formats count their scales: GGUF Q8_0 stores 32 int8 + one fp16 scale per block
# (34 B / 32), Q4_0 16 B of nibbles + an fp16 scale (18 B / 32), Q4_K 144 B per 256 weights (4.5 bits); Q4_K_M
# keeps attn_v and half of ffn_down in Q6_K (6.5625 bits), about 4.85 bits per weight on a Llama model
# (ggml-quants.h block layouts). int4 g32 (gpt-fast): 4 bits + a bf16 scale and zero per 32 weights = 5 bits.
# MXFP4 (OCP Microscaling Formats v1.0): 32 FP4 (E2M1) values and one E8M0 scale per block = 17 B / 32.
# Keys are canonical names (specsim.dtypes); aliases such as bf16 resolve to them.
_DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8": 1,
    "int8": 1,
    "int4": 0.5,
    "int4-g32": 5 / 8,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_k_m": 4.85 / 8,
    "mxfp4": 17 / 32,
}
KV_DTYPES = ("float32", "float16", "bfloat16", "float8", "int8")
_NAMES = sorted(set(_DTYPE_BYTES) | {a for a, c in DTYPE_ALIASES.items() if c in _DTYPE_BYTES})
WEIGHT_DTYPES = tuple(_DTYPE_BYTES)  # the canonical names (the help's list; aliases are accepted too)


def dtype_bytes(name: str | float, where: str = "dtype") -> float:
    """Bytes per element of a dtype name (``bfloat16`` → 2, ``q4_0`` → 0.5625); a number passes through.
    Errors name ``where`` (e.g. ``--dtype``)."""
    return weight_format(name, where)[0]


def weight_format(name: str | float, where: str = "dtype") -> tuple[float, str | None]:
    """(bytes per element, canonical name; None for a number of bytes) of a dtype (:func:`dtype_bytes`)."""
    if isinstance(name, (int, float)) and not isinstance(name, bool):
        if not name > 0:
            raise SpecsimError(f"{where}: expected bytes per element > 0, got {name!r}")
        return name, None
    if not str(name).strip():
        raise SpecsimError(f"{where}: expected a dtype name (one of {_NAMES}), got {name!r}")
    key = dtype_name(name)
    if key not in _DTYPE_BYTES:
        raise SpecsimError(f"{where}: expected one of {_NAMES}, got {name!r}")
    return _DTYPE_BYTES[key], key


def kv_dtype_bytes(name: str, where: str = "kv dtype") -> float:
    """Bytes per KV-cache element; weight-only formats (int4, GGUF blocks) are not KV dtypes."""
    if not str(name).strip():
        raise SpecsimError(f"{where}: expected a dtype name (one of {list(KV_DTYPES)}), got {name!r}")
    if dtype_name(name) not in KV_DTYPES:
        raise SpecsimError(
            f"{where}: expected one of {list(KV_DTYPES)} (or an alias such as bf16), got {name!r}"
        )
    return dtype_bytes(name, where)


# quantization_config.quant_method -> dtype by bits (transformers' HfQuantizer names)
_QUANT_DTYPES = {
    "awq": {4: "int4", 8: "int8"},
    "gptq": {4: "int4", 8: "int8"},
    "fp8": {8: "float8"},
    "bitsandbytes": {4: "int4", 8: "int8"},
}


def config_dtype(cfg: dict, text_cfg: dict, name: str) -> tuple[str, str | None, str | None]:
    """(weights' dtype, KV cache's dtype or None: the weights', routed experts' dtype or None: the weights')
    of a HF config: its ``quantization_config``'s format (AWQ/GPTQ 4- or 8-bit, FP8, bitsandbytes) with the
    cache in ``torch_dtype``; MXFP4 (gpt-oss) on the experts alone; else ``torch_dtype`` (bfloat16 when it
    has none). A quantised format is one line on stderr: the LM head, the embedding and a vision tower stay
    in 16 bits there, priced here at its bytes."""
    activations = cfg.get("torch_dtype") or cfg.get("dtype") or text_cfg.get("torch_dtype") or "bfloat16"
    quant = cfg.get("quantization_config") or text_cfg.get("quantization_config")
    if not isinstance(quant, dict):
        return activations, None, None
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":  # gpt-oss: the MoE weights in MXFP4, attention, router and embeddings not converted
        warn(f"{name}: routed experts priced as mxfp4 (17 bytes per 32 weights, from quantization_config)")
        return activations, None, "mxfp4"
    bits = quant.get("bits", 8 if method == "fp8" else None)
    if method == "bitsandbytes":
        bits = 4 if quant.get("load_in_4bit") else 8 if quant.get("load_in_8bit") else None
    dtype = _QUANT_DTYPES.get(method, {}).get(bits)
    if dtype is None:
        raise SpecsimError(
            f"{name}.quantization_config: quant_method {method!r} with bits {bits!r} is not a format specsim "
            "reads (AWQ, GPTQ, FP8, bitsandbytes at 4 or 8 bits); pass --dtype"
        )
    warn(
        f"{name}: weights priced as {dtype} ({method}, {bits} bits, from quantization_config); the LM head, "
        "embeddings and any vision tower are 16-bit in such checkpoints (pass --dtype to price otherwise)"
    )
    return dtype, activations, None
