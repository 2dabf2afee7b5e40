"""Whether a GPU's engines run a model's weight format, by NVIDIA compute capability (the catalog's
``compute_capability``; devices without one are not checked): bfloat16 from 8.0 (vLLM refuses it below; it
runs as float16 there, the same bytes), float8 weights from 7.5 (weight-only W8A16 below 8.9, vLLM's FP8
Marlin; refused below 7.5). Sources: ARCHITECTURE.md, Notes by module."""

from __future__ import annotations

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec

BF16_MIN = (8, 0)
FP8_WEIGHT_ONLY_MIN = (7, 5)
FP8_COMPUTE_MIN = (8, 9)


def _capability(dev: Device) -> tuple[int, int] | None:
    if dev.compute_capability is None:
        return None
    major, minor = dev.compute_capability.split(".")
    return int(major), int(minor)


def dtype_notes(models: dict[str, ModelSpec | None], devices: list[Device]) -> tuple[str, ...]:
    """Notes for formats a device runs otherwise than named (``models``: role -> spec, None for no model);
    SpecsimError for float8 weights on a device no FP8 kernel runs on."""
    notes = []
    for dev in devices:
        cc, at = _capability(dev), f"{dev.name}: compute capability {dev.compute_capability}"
        if cc is None:
            continue
        named = {role: m.dtype for role, m in models.items() if m is not None}
        fp8 = [role for role, d in named.items() if d == "float8"]
        if fp8 and cc < FP8_WEIGHT_ONLY_MIN:
            raise SpecsimError(
                f"{at} runs no FP8 kernel for the {fp8[0]}'s float8 weights (vLLM runs FP8 weights from 7.5, "
                "weight-only below 8.9); expected --dtype float16, int8 or int4 there"
            )
        if fp8 and cc < FP8_COMPUTE_MIN:
            notes.append(
                f"{at} has no FP8 matrix units (from 8.9): float8 weights ({' and '.join(fp8)}) run "
                "weight-only (W8A16, vLLM's FP8 Marlin), priced at 1 byte per weight and 16-bit compute"
            )
        bf16 = [role for role, d in named.items() if d == "bfloat16"]
        if bf16 and cc < BF16_MIN:
            notes.append(
                f"{at} has no bfloat16 (vLLM refuses it below 8.0): the {' and '.join(bf16)} weights in "
                "bfloat16 run in float16 there (--dtype float16), priced alike (2 bytes per weight)"
            )
    return tuple(notes)
