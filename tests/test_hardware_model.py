"""Model descriptions from HF config dicts and calibrate presets (pure JSON, no transformers)."""

import json

import pytest

from specsim.errors import SpecsimError
from specsim.hardware.model import spec_from_config
from specsim.hardware.model_resolution import load_model_spec
from specsim.presets import pair_models as load_pair
from specsim.presets import preset_names

LLAVA = {
    "model_type": "llava",
    "image_seq_length": 576,
    "text_config": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32064,
    },
    "vision_config": {
        "model_type": "clip_vision_model",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "image_size": 336,
        "patch_size": 14,
    },
}
QWEN_1_5B = {
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def test_llava_7b_sizes():
    m = spec_from_config(LLAVA, "llava")
    assert m.layers == 32 and m.heads == m.kv_heads == 32 and m.head_dim == 128 and m.vocab == 32064
    assert m.text_params == pytest.approx(6.74e9, rel=0.005)  # Llama-2-7B (+64 vocab rows)
    assert m.vision.image_tokens == 576 and m.vision.patch_tokens == 577
    assert m.vision.params == pytest.approx(0.303e9 + 0.021e9, rel=0.01)  # CLIP ViT-L/14 + 2-layer projector
    assert m.params == pytest.approx(7.06e9, rel=0.01)  # llava-1.5-7b-hf: 7.06B
    assert m.dtype_bytes == 2


def test_llava_text_config_defaults_like_transformers():
    m = spec_from_config(
        {
            "model_type": "llava",
            "text_config": {"model_type": "llama"},
            "vision_config": {"image_size": 336, "patch_size": 14},
        },
        "minimal",
    )
    assert (m.layers, m.hidden, m.intermediate, m.vocab) == (32, 4096, 11008, 32000)
    assert m.vision.image_tokens == 576


def test_qwen_gqa_and_tied_embeddings():
    m = spec_from_config(QWEN_1_5B, "q")
    assert m.kv_heads == 2 and m.head_dim == 128 and m.tie_word_embeddings
    assert m.params == pytest.approx(1.54e9, rel=0.01)  # Qwen2.5-1.5B: 1.54B
    assert m.kv_bytes_per_token == 28 * 2 * 128 * 2 * 2
    assert m.with_dtype("float32").dtype_bytes == 4 and m.with_dtype(1).dtype_bytes == 1


def test_bad_configs_name_the_problem():
    with pytest.raises(SpecsimError, match="num_hidden_layers"):
        spec_from_config(
            {"model_type": "mystery", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}, "m"
        )
    with pytest.raises(SpecsimError, match="hidden_size.*expected an integer"):
        spec_from_config({**QWEN_1_5B, "hidden_size": -3}, "m")
    with pytest.raises(SpecsimError, match="dtype"):
        spec_from_config(QWEN_1_5B, "m", dtype="float12")


def test_load_from_path_and_unknown_name(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_1_5B, "_specsim": {"description": "x"}}))
    assert load_model_spec(str(path)).hidden == 1536
    assert load_model_spec(str(tmp_path)).name == tmp_path.name  # a model folder works too
    with pytest.raises(SpecsimError, match="unknown model 'no-such-model'"):
        load_model_spec("no-such-model")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SpecsimError, match="not valid JSON"):
        load_model_spec(str(tmp_path / "broken.json"))


@pytest.mark.skipif("llava-1.5-7b" not in preset_names(), reason="calibrate presets not installed")
def test_presets_match_published_sizes():
    t, d = load_pair("llava-1.5-7b-68m")
    assert load_model_spec(t).params == pytest.approx(7.06e9, rel=0.01)
    draft = load_model_spec(d)
    assert draft.layers == 2 and draft.text_params == pytest.approx(68e6, rel=0.05)
    t, d = load_pair("qwen2.5-coder-0.5b-1.5b")
    assert load_model_spec(t).params == pytest.approx(1.54e9, rel=0.01)
    assert load_model_spec(d).params == pytest.approx(0.49e9, rel=0.02)
    with pytest.raises(SpecsimError, match="unknown pair"):
        load_pair("nope")
