"""A HF config's quantization_config names its weights' format (AWQ, GPTQ, FP8, bitsandbytes): the roofline
prices it, says so on stderr, and keeps the KV cache in torch_dtype; a format it cannot read is one line."""

from __future__ import annotations

import pytest

from specsim.errors import SpecsimError, SpecsimWarning
from specsim.hardware.model import spec_from_config

QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
            "torch_dtype": "float16"}  # fmt: skip


@pytest.mark.parametrize(
    "quant, weight_bytes",
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 0.5),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, 1.0),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, 1.0),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, 0.5),
    ],
)
def test_a_quantised_checkpoint_is_priced_in_its_format_with_a_16_bit_cache(quant, weight_bytes):
    with pytest.warns(SpecsimWarning, match=rf"weights priced as .* \({quant['quant_method']}, "):
        m = spec_from_config({**QWEN2_7B, "quantization_config": quant}, "m")
    assert (m.dtype_bytes, m.kv_element_bytes) == (weight_bytes, 2)
    assert m.weight_bytes == pytest.approx(m.params * weight_bytes)


def test_a_given_dtype_wins_and_an_unread_format_is_one_line():
    quantised = {**QWEN2_7B, "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert spec_from_config(quantised, "m", dtype="bfloat16").dtype_bytes == 2  # no warning: asked for
    with pytest.raises(
        SpecsimError, match=r"quant_method 'gptq' with bits 3 is not a format .* pass --dtype"
    ):
        spec_from_config({**QWEN2_7B, "quantization_config": {"quant_method": "gptq", "bits": 3}}, "m")
    assert spec_from_config(QWEN2_7B, "m").dtype_bytes == 2  # no quantization_config: torch_dtype


@pytest.mark.parametrize(
    "dtype, kv_bytes", [("int8", 2), ("q8_0", 2), ("float8", 2), ("int4", 2), ("bfloat16", 2), ("float32", 4)]
)
def test_a_given_weight_dtype_caches_in_16_bits_or_wider(dtype, kv_bytes):
    """--dtype int8 cached 1 byte per KV element and q8_0 1.0625 (a GGUF block's size), against the help's
    'float16 for quantised weights': B 93 fitted an H100 at 8k context where 46 do."""
    assert spec_from_config(QWEN2_7B, "m", dtype=dtype).kv_element_bytes == kv_bytes
