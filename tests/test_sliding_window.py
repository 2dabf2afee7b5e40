"""Sliding-window attention in the roofline: which layers a config windows (Mistral, Gemma-2, Gemma-3,
``layer_types``, Qwen2's ``use_sliding_window``) and the cache positions a pass reads, by hand."""

from __future__ import annotations

import pytest

from specsim.hardware.model import spec_from_config
from specsim.hardware.parallel import per_gpu_resident_bytes
from specsim.hardware.roofline import attention_flops, kv_pass_bytes

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100}  # fmt: skip


@pytest.mark.parametrize(
    "extra, window, layers",
    [
        ({"model_type": "mistral", "sliding_window": 4096}, 4096, 6),  # Mistral-7B-v0.1: every layer
        ({"model_type": "mistral", "sliding_window": None}, None, 0),  # later Mistral configs: none
        ({"model_type": "gemma2", "sliding_window": 4096}, 4096, 3),  # every other layer
        # Gemma-3: every 6th layer global (google/gemma-3-4b-it: 34 layers, pattern 6, window 1024 -> 29)
        ({"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6}, 1024, 5),
        ({"model_type": "gemma3_text", "sliding_window": 512, "num_hidden_layers": 34}, 512, 29),
        ({"model_type": "qwen2", "sliding_window": 32768, "use_sliding_window": False}, None, 0),
        (
            {
                "model_type": "qwen2",
                "sliding_window": 4096,
                "use_sliding_window": True,
                "max_window_layers": 4,
            },
            4096,
            2,
        ),  # fmt: skip
        (
            {
                "model_type": "llama",
                "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 3,
            },
            128,
            3,
        ),  # fmt: skip
    ],
)
def test_which_layers_a_config_windows(extra, window, layers):
    m = spec_from_config(BASE | extra, "m")
    assert (m.window, m.window_layers) == (window, layers)


def test_a_window_caps_the_positions_a_pass_reads_by_hand():
    """6 layers, 3 of them windowed at 128: at 1000 cached positions + 1 new, the cache read is
    (3 · 1001 + 3 · 128) / 6 = 564.5 positions a layer; under the window, every position."""
    types = ["sliding_attention", "full_attention"] * 3
    m = spec_from_config(BASE | {"model_type": "llama", "sliding_window": 128, "layer_types": types}, "m")
    full = spec_from_config(BASE | {"model_type": "llama"}, "m")
    per_position = full.kv_bytes_per_token
    assert kv_pass_bytes(m, 2, 1000, 1) == pytest.approx(2 * 564.5 * per_position)
    assert kv_pass_bytes(m, 2, 100, 1) == pytest.approx(kv_pass_bytes(full, 2, 100, 1))
    assert per_gpu_resident_bytes(m, None, 4, 1000, 1, None) == pytest.approx(
        m.weight_bytes + 4 * (3 * 1000 + 3 * 128) / 6 * per_position
    )
    # attention: the new token scores (3 · 1000 + 3 · 128) / 6 = 564 cached positions a layer, plus itself
    assert attention_flops(m, 1, 1000, 1) == pytest.approx(4.0 * 6 * 4 * 16 * (564 + 1))
