"""Vision towers read per family: parameters against the figures the models' cards and reports give, and image
tokens against each model's own preprocessing rule, computed by hand here."""

import pytest

from specsim.errors import SpecsimError, SpecsimWarning
from specsim.hardware.device import load_device
from specsim.hardware.image_tokens import (
    ImageSize,
    anyres_best_resolution,
    internvl_tiles,
    parse_image_size,
    qwen_resize,
)
from specsim.hardware.model import spec_from_config
from specsim.hardware.model_resolution import find_shipped, load_model_spec
from specsim.hardware.roofline import vision_ms
from specsim.hardware.runtime import load_runtime

# Published parameter counts (M) of each vision tower, with what the figure covers.
# CLIP ViT-L/14 at 336 px (LLaVA-1.5 and LLaVA-1.6 both use it): 304.29M image tower, OpenCLIP's model
#   profile, https://github.com/mlfoundations/open_clip/blob/main/docs/model_profile.csv (row ViT-L-14-336,
#   image_mparams; it counts embeddings and the 1024->768 head, which LLaVA does not use).
CLIP_L_336_M = 304.29
# InternViT-300M-448px (InternVL3-8B's tower is its V2_5 version, same config): "Params (M): 304",
#   https://huggingface.co/OpenGVLab/InternViT-300M-448px (model card, Model Stats).
INTERNVIT_300M_M = 304
# Qwen2-VL's ViT with its merger: "approximately 675 million parameters" (Wang et al. 2024, Qwen2-VL report,
#   arXiv 2409.12191, §2.1 and Table 1); Qwen2.5-VL keeps its 32 layers of width 1280 and an MLP of the same
#   size (SwiGLU 3 x 3420 ~ 2 x 5120), https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct.
QWEN_VIT_M = 675
# Qwen3-VL-8B: 8.77B parameters in all (https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct, safetensors) less
#   Qwen3-8B's 8.2B (https://huggingface.co/Qwen/Qwen3-8B, card: "Number of Parameters: 8.2B"), the same
#   language model: 0.57B for the SigLIP-2 So400m tower and its four mergers.
QWEN3_VL_VISION_M = 8770 - 8200
# Gemma 3: "Vision Encoder 417M" for the 4B, 12B and 27B models (Gemma Team 2025, Gemma 3 Technical Report,
#   arXiv 2503.19786, Table 1: the SigLIP encoder, 400M, with its projection).
GEMMA3_VISION_M = 417

CARDS = [
    ("llava-hf/llava-1.5-7b-hf", "tower_params", CLIP_L_336_M),
    ("llava-hf/llava-v1.6-mistral-7b-hf", "tower_params", CLIP_L_336_M),
    ("OpenGVLab/InternVL3-8B", "tower_params", INTERNVIT_300M_M),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "params", QWEN_VIT_M),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "params", QWEN_VIT_M),
    ("Qwen/Qwen3-VL-8B-Instruct", "params", QWEN3_VL_VISION_M),
    ("google/gemma-3-4b-it", "params", GEMMA3_VISION_M),
    ("google/gemma-3-27b-it", "params", GEMMA3_VISION_M),
]


@pytest.mark.parametrize("model_id, what, card_m", CARDS, ids=[c[0] for c in CARDS])
def test_tower_parameters_within_5_percent_of_the_cards(model_id, what, card_m):
    v = load_model_spec(model_id).vision
    assert getattr(v, what) / 1e6 == pytest.approx(card_m, rel=0.05)


def test_qwen2_5_vl_tower_by_hand():
    v = load_model_spec("Qwen/Qwen2.5-VL-7B-Instruct").vision
    # 32 layers: qkv + proj 4 x 1280², gated MLP 3 x 1280 x 3420; merger 5120² + 5120 x 3584
    assert (v.layers, v.hidden, v.gated_mlp) == (32, 1280, True)
    assert v.tower_params == 32 * (4 * 1280**2 + 3 * 1280 * 3420)
    assert v.projector_params == 5120 * 5120 + 5120 * 3584
    # window attention: 112-px windows of 14-px patches = 64 patches, full attention in layers 7, 15, 23, 31
    assert (v.full_attention_layers, v.window_tokens) == (4, 64)


def test_qwen3_vl_has_a_merger_per_deepstack_layer():
    v = load_model_spec("Qwen/Qwen3-VL-8B-Instruct").vision
    assert (v.layers, v.hidden, v.gated_mlp, v.full_attention_layers) == (27, 1152, False, None)
    assert v.projector_params == 4 * (4608 * 4608 + 4608 * 4096)  # main merger + deepstack at 8, 16, 24


def test_gemma3_pools_its_siglip_patches_to_256_tokens_and_windows_5_layers_in_6():
    """SigLIP at 896 px: 64 x 64 = 4096 patches through 27 layers, average-pooled to mm_tokens_per_image
    (256) and projected by one 1152 x 2560 linear layer; Gemma 3 4B's language model (Table 1: 3,209M
    non-embedding parameters) slides a 1024-token window on all but every 6th of its 34 layers."""
    m = load_model_spec("google/gemma-3-4b-it")
    v = m.vision
    assert (v.layers, v.patch_tokens, v.image_tokens, v.views_per_image) == (27, 4096, 256, 1)
    assert v.projector_params == 1152 * 2560
    assert m.decoder_params / 1e6 == pytest.approx(3209, rel=0.01)
    assert (m.window, m.window_layers) == (1024, 29)


# ---------------------------------------------------------------- image tokens, each model's rule by hand
def test_qwen2_5_vl_tokens_at_the_default_and_a_given_size():
    # 1024x768, factor 28: 768/28 = 27.4 -> 27 -> 756, 1024/28 = 36.6 -> 37 -> 1036 (783,216 px, in bounds);
    # 54 x 74 patches of 14 px = 3996 in the tower, merged 2x2: 27 x 37 = 999 tokens
    v = load_model_spec("qwen2.5-vl-7b").vision
    assert (v.image_tokens, v.tower_tokens, str(v.image_size)) == (999, 3996, "1024x768")
    # 1920x1080: 1080/28 = 38.6 -> 39, 1920/28 = 68.6 -> 69: 39 x 69 = 2691 tokens
    v = load_model_spec("qwen2.5-vl-7b", image_size=ImageSize(1920, 1080)).vision
    assert (v.image_tokens, v.patch_tokens) == (2691, 2691 * 4)


def test_qwen_resize_clamps_to_max_pixels():
    # Qwen2-VL's default max 28*28*1280 = 1,003,520 px: 1092 x 1932 is over; beta = sqrt(1920*1080/1003520)
    # = 1.43747; floor(1080/1.43747/28) = 26, floor(1920/1.43747/28) = 47 -> 728 x 1316
    assert qwen_resize(1080, 1920, 28, 56 * 56, 28 * 28 * 1280) == (728, 1316)


def test_qwen3_vl_tokens_and_its_min_pixels():
    # factor 32 (16-px patches, 2x2 merge): 1024x768 -> 32 x 24 = 768 tokens
    assert load_model_spec("Qwen/Qwen3-VL-8B-Instruct").vision.image_tokens == 768
    # 200x150 -> 192 x 160 = 30,720 px < 65,536 (its shortest_edge): beta = sqrt(65536/30000) = 1.47802,
    # ceil(150*1.47802/32) = 7, ceil(200*1.47802/32) = 10 -> 7 x 10 = 70 tokens
    v = load_model_spec("qwen3-vl-8b", image_size=ImageSize(200, 150)).vision
    assert v.image_tokens == 70


def test_llava_next_anyres_tokens():
    # 1024x768: best pinpoint 672x672 (keeps 672x504 of it), 2x2 tiles of 24x24 patches = 48x48; the image is
    # wider than the grid: rows round(768*48/1024) = 36, padding (48-36)//2 = 6 each side -> 36 x 48 = 1728
    # features + 36 newlines + the base view's 576 = 2340; the tower runs 1 + 4 views of 577
    v = load_model_spec("llava-hf/llava-v1.6-mistral-7b-hf").vision
    assert (v.image_tokens, v.views_per_image, v.tower_tokens) == (2340, 5, 5 * 577)
    # 336x672 (portrait): pinpoint 672x336 holds it whole (no waste): 2x1 tiles -> 48 x 24 = 1152 + 48 + 576
    v = load_model_spec("llava-1.6-mistral-7b", image_size=ImageSize(336, 672)).vision
    assert (v.image_tokens, v.views_per_image) == (1776, 3)
    assert anyres_best_resolution(672, 336, [[336, 672], [672, 336], [672, 672]]) == (672, 336)


def test_internvl_tiles_and_pixel_shuffle():
    # 1024x768 is 4:3: the 4x3 grid matches exactly (12 tiles, the most allowed) + a thumbnail = 13 views,
    # each 32x32 patches (+ CLS) in InternViT, 16x16 = 256 tokens after the 0.5 pixel shuffle
    v = load_model_spec("OpenGVLab/InternVL3-8B").vision
    assert (v.views_per_image, v.image_tokens, v.tower_tokens) == (13, 13 * 256, 13 * 1025)
    # 448x448: one tile, no thumbnail; 896x896: 2x2 (the image covers over half of it) + thumbnail
    assert load_model_spec("internvl3-8b", image_size=ImageSize(448, 448)).vision.image_tokens == 256
    assert load_model_spec("internvl3-8b", image_size=ImageSize(896, 896)).vision.image_tokens == 5 * 256
    assert internvl_tiles(896, 896, 448, 1, 12) == (2, 2)


def test_llava_1_5_does_not_depend_on_the_image_size():
    for size in (None, ImageSize(1920, 1080)):
        v = load_model_spec("llava-hf/llava-1.5-7b-hf", image_size=size).vision
        assert (v.image_tokens, v.patch_tokens, v.image_size) == (576, 577, None)


# ---------------------------------------------------------------- hand-written configs and the roofline
def _hand_written_qwen2_5_vl() -> dict:
    """A Qwen2.5-VL config as users write it (the hub's keys, no preprocessor)."""
    return dict(find_shipped("qwen2.5-vl-7b")[1].config)


def test_hand_written_qwen2_5_vl_is_not_read_as_a_clip_tower():
    m = spec_from_config(_hand_written_qwen2_5_vl(), "mine")
    assert m.vision.layers == 32 and m.vision.params / 1e6 == pytest.approx(675, rel=0.05)
    assert m.vision.image_tokens == 999  # not 256: from the image size and spatial_merge_size


def test_keys_a_qwen_vision_config_leaves_out_take_transformers_defaults():
    # some hub fine-tunes of Qwen2.5-VL-7B write only these vision keys; Qwen2_5_VLVisionConfig fills the rest
    cfg = {**_hand_written_qwen2_5_vl(), "vision_config": {"hidden_size": 1280, "model_type": "qwen2_5_vl"}}
    v = spec_from_config(cfg, "m").vision
    assert (v.layers, v.intermediate, v.full_attention_layers, v.window_tokens) == (32, 3420, 4, 64)
    assert v.params == load_model_spec("qwen2.5-vl-7b").vision.params


def test_unknown_vision_family_warns_instead_of_guessing_silently():
    cfg = {**_hand_written_qwen2_5_vl(), "model_type": "mystery_vl"}
    with pytest.warns(SpecsimWarning, match="read as a LLaVA-1.5-style CLIP tower"):
        spec_from_config(cfg, "m")
    # a known tower in another family's model (LLaVA-OneVision tiles its SigLIP views: not one 729-token view)
    siglip = {"model_type": "siglip_vision_model", "image_size": 384, "patch_size": 14}
    onevision = {**cfg, "model_type": "llava_onevision", "vision_config": siglip}
    with pytest.warns(SpecsimWarning, match="'llava_onevision' with vision tower 'siglip_vision_model'"):
        spec_from_config(onevision, "m")


def test_bad_tower_fields_name_the_field():
    cfg = _hand_written_qwen2_5_vl()
    with pytest.raises(SpecsimError, match=r"vision_config\.fullatt_block_indexes"):
        vision = {**cfg["vision_config"], "fullatt_block_indexes": [99]}
        spec_from_config({**cfg, "vision_config": vision}, "m")
    internvl = find_shipped("internvl3-8b")[1].config
    with pytest.raises(SpecsimError, match="downsample_ratio"):
        spec_from_config({**internvl, "downsample_ratio": 0.3}, "m")
    with pytest.raises(SpecsimError, match="--image-size: expected WIDTHxHEIGHT"):
        parse_image_size("1024")


def test_vision_ms_windows_cut_attention_and_llava_keeps_its_formula():
    dev, rt = load_device("h100-sxm"), load_runtime("vllm")
    v = load_model_spec("qwen2.5-vl-7b", image_size=ImageSize(1920, 1080)).vision
    n = v.patch_tokens
    assert v.attention_flops == 4 * 1280 * n * (4 * n + 28 * 64)
    full = type(v)(**{**v.__dict__, "full_attention_layers": None})
    assert vision_ms(v, 2, dev, rt) < vision_ms(full, 2, dev, rt)
    c = load_model_spec("llava-1.5-7b").vision
    assert c.attention_flops == 4 * c.layers * c.hidden * 577**2  # every layer over the whole view
