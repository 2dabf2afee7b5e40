"""Vision towers read from a VLM's HF config: sizes, attention pattern and the positions an image fills.

One reader per family, picked by the config's top-level ``model_type``: LLaVA-1.5 (CLIP, fixed resize),
LLaVA-NeXT (any-res: a base view plus tiles), Qwen2-VL / Qwen2.5-VL / Qwen3-VL (dynamic resolution, windowed
attention, merged patches, DeepStack mergers), InternVL 2.5/3 (448-px tiles, pixel shuffle) and Gemma 3
(SigLIP at 896 px pooled to 256 tokens); another family read by LLaVA-1.5's rule gets a warning. Parameters
count the transformer layers and the projector/merger matmuls; embeddings, norms and biases are left out
(under 1 % of each tower). Image counts follow :mod:`specsim.hardware.image_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from specsim.errors import SpecsimError, warn
from specsim.hardware.image_tokens import (
    DEFAULT_IMAGE_SIZE,
    ImageSize,
    anyres_best_resolution,
    anyres_unpadded,
    internvl_tiles,
    qwen_resize,
)
from specsim.jsonio import field_int, show


@dataclass(frozen=True)
class VisionSpec:
    """A ViT image tower plus projector: runs once per image over ``views_per_image`` views of
    ``patch_tokens`` tokens; ``image_tokens`` enter the LM. ``image_size``: the image the counts are for
    (None: every image is resized to one size)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    patch_tokens: int  # tokens the tower processes per view (patches + CLS)
    image_tokens: int  # tokens per image handed to the language model
    projector_params: int
    views_per_image: int = 1
    gated_mlp: bool = False  # SwiGLU MLP (3 matrices, Qwen2.5-VL) instead of 2
    full_attention_layers: int | None = None  # None: every layer attends over the whole view
    window_tokens: int = 0  # tokens per attention window in the other layers
    image_size: ImageSize | None = None

    @property
    def layer_params(self) -> int:
        """One layer's matmul weights: attention 4h², MLP 2 (or 3, gated) h × intermediate."""
        return 4 * self.hidden**2 + (3 if self.gated_mlp else 2) * self.hidden * self.intermediate

    @property
    def tower_params(self) -> int:
        return self.layers * self.layer_params

    @property
    def params(self) -> int:
        """Tower + projector parameters (embeddings, norms and biases ignored)."""
        return self.tower_params + self.projector_params

    @property
    def tower_tokens(self) -> int:
        """Tokens the tower processes per image, all views together."""
        return self.views_per_image * self.patch_tokens

    @property
    def attention_flops(self) -> int:
        """Per image: 4·hidden·n·(keys per query) summed over layers, n the tokens of a view."""
        n = self.patch_tokens
        full = self.layers if self.full_attention_layers is None else self.full_attention_layers
        windowed = (self.layers - full) * min(self.window_tokens, n)
        return 4 * self.hidden * self.views_per_image * n * (full * n + windowed)


# transformers' CLIPVisionConfig defaults, for keys a LLaVA config leaves out.
_CLIP_DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "image_size": 224,
    "patch_size": 32,
}
# Pixel bounds of the hub's preprocessor_config.json, used when a config comes without one:
# Qwen/Qwen2.5-VL-7B-Instruct (min_pixels, max_pixels) and Qwen/Qwen3-VL-8B-Instruct (size.shortest_edge,
# size.longest_edge); Qwen2-VL's processor defaults.
_QWEN_PIXELS = {
    "qwen2_vl": (56 * 56, 28 * 28 * 1280),
    "qwen2_5_vl": (3136, 12845056),
    "qwen3_vl": (65536, 16777216),
    "qwen3_vl_moe": (65536, 16777216),
}
MAX_TILES = 1024  # InternVL tiles per image a config may allow (its models use 12, 40 at most at test time)
_KNOWN_CLIP_TOWERS = ("clip_vision_model", "siglip_vision_model")
# VLMs that resize every image to the tower's one size and hand all its patches to the LM (LLaVA-1.5's rule);
# any other model_type read by that rule (LLaVA-OneVision's any-res, Pixtral, Idefics3) gets a warning.
_FIXED_RESIZE = ("llava", "vipllava", "paligemma")
# transformers' defaults for the keys a Qwen vision_config leaves out (Qwen2VLVisionConfig,
# Qwen2_5_VLVisionConfig, Qwen3VLVisionConfig; hub configs of Qwen2.5-VL fine-tunes rely on them).
_QWEN_VISION_DEFAULTS = {
    "qwen2_vl": {
        "depth": 32,
        "embed_dim": 1280,
        "hidden_size": 3584,
        "mlp_ratio": 4,
        "num_heads": 16,
        "patch_size": 14,
        "spatial_merge_size": 2,
    },
    "qwen2_5_vl": {
        "depth": 32,
        "hidden_size": 3584,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
    "qwen3_vl": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "deepstack_visual_indexes": [8, 16, 24],
    },
}


def _size(cfg: dict, key: str, where: str, default: Any = None) -> int:
    """``cfg[key]`` (``default`` when absent or null) as an integer >= 1 named ``where.key``."""
    value = cfg.get(key)
    if value is None:
        value = default
    if isinstance(value, list) and value:  # HF InternVL writes [448, 448]
        value = value[0]
    if value is None:
        raise SpecsimError(f"{where}.{key}: missing (expected an integer >= 1)")
    return field_int(value, f"{where}.{key}", lo=1, unit="size")


def _clip_tower(vc: dict, where: str) -> tuple[int, int, int, int, int, int]:
    """(layers, hidden, intermediate, heads, image_size, patch_size) of a CLIP-like tower."""
    get = lambda k: _size(vc, k, where, _CLIP_DEFAULTS[k])  # noqa: E731
    hidden, image, patch = get("hidden_size"), get("image_size"), get("patch_size")
    if patch > image:
        raise SpecsimError(f"{where}.patch_size: expected at most image_size ({image}), got {patch}")
    return (
        get("num_hidden_layers"),
        hidden,
        get("intermediate_size"),
        get("num_attention_heads"),
        image,
        patch,
    )


def llava_tower(cfg: dict, lm_hidden: int, where: str) -> VisionSpec:
    """LLaVA-1.5: every image resized to ``image_size``; the default feature selection drops CLS (grid²
    tokens reach the LM, ``image_seq_length`` when given), the tower sees grid² + 1; a 2-layer MLP
    projector."""
    vc = cfg["vision_config"]
    tower = vc.get("model_type", "clip_vision_model")  # LlavaConfig's default tower
    if cfg.get("model_type") not in _FIXED_RESIZE or tower not in _KNOWN_CLIP_TOWERS:
        warn(
            f"{where}: model_type {cfg.get('model_type')!r} with vision tower {vc.get('model_type')!r} is "
            "read as a LLaVA-1.5-style CLIP tower (fixed resize, MLP projector); its size and image tokens "
            "may be wrong"
        )
    layers, hidden, inter, heads, image, patch = _clip_tower(vc, f"{where}.vision_config")
    grid = image // patch
    tokens = cfg.get("image_seq_length")
    tokens = grid * grid if tokens is None else tokens  # a 0 is refused below, not read as "not given"
    return VisionSpec(
        layers=layers,
        hidden=hidden,
        intermediate=inter,
        heads=heads,
        patch_tokens=grid * grid + 1,
        image_tokens=field_int(tokens, f"{where}.image_seq_length", lo=1, unit="size"),
        projector_params=hidden * lm_hidden + lm_hidden * lm_hidden,
    )


def gemma3_tower(cfg: dict, lm_hidden: int, where: str) -> VisionSpec:
    """Gemma 3: a SigLIP tower over the whole image resized to ``image_size`` (896 px: 64 × 64 patches, no
    CLS), average-pooled to ``mm_tokens_per_image`` tokens (256) and projected by one linear layer
    (Gemma3MultiModalProjector); pan-and-scan crops are off by default, so one view per image."""
    vc = cfg["vision_config"]
    layers, hidden, inter, heads, image, patch = _clip_tower(vc, f"{where}.vision_config")
    tokens = field_int(cfg.get("mm_tokens_per_image", 256), f"{where}.mm_tokens_per_image", lo=1, unit="size")
    grid = image // patch
    if tokens > grid * grid:
        raise SpecsimError(
            f"{where}.mm_tokens_per_image: expected at most the tower's {grid * grid} patches, got {tokens}"
        )
    return VisionSpec(layers, hidden, inter, heads, grid * grid, tokens, projector_params=hidden * lm_hidden)


def llava_next_tower(cfg: dict, lm_hidden: int, image: ImageSize, where: str) -> VisionSpec:
    """LLaVA-1.6/NeXT any-res: the base view plus the tiles of the best ``image_grid_pinpoints`` resolution;
    the LM gets the base's grid² tokens, the tiles' unpadded features and one newline per row."""
    base = llava_tower({**cfg, "model_type": "llava", "image_seq_length": None}, lm_hidden, where)
    vc = cfg["vision_config"]
    crop = _size(vc, "image_size", f"{where}.vision_config", _CLIP_DEFAULTS["image_size"])
    patch = _size(vc, "patch_size", f"{where}.vision_config", _CLIP_DEFAULTS["patch_size"])
    pinpoints = cfg.get("image_grid_pinpoints") or [[crop, crop]]
    if not _is_pinpoints(pinpoints, crop):
        raise SpecsimError(
            f"{where}.image_grid_pinpoints: expected [[height, width], ...] in pixels, multiples of "
            f"{crop}, got {show(pinpoints)}"
        )
    best_h, best_w = anyres_best_resolution(image.height_px, image.width_px, pinpoints)
    scale_h, scale_w = best_h // crop, best_w // crop
    grid = crop // patch
    unpadded, newlines = anyres_unpadded(image.height_px, image.width_px, grid, grid, scale_h, scale_w)
    selects_cls = cfg.get("vision_feature_select_strategy") == "full"
    return replace(
        base,
        views_per_image=1 + scale_h * scale_w,
        image_tokens=unpadded + newlines + grid * grid + int(selects_cls),
        image_size=image,
    )


def _is_pinpoints(pinpoints: Any, crop: int) -> bool:
    return isinstance(pinpoints, list) and all(
        isinstance(p, list)
        and len(p) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= crop and x % crop == 0 for x in p)
        for p in pinpoints
    )


def _qwen_pixels(model_type: str, processor: dict) -> tuple[int, int]:
    size = processor.get("size") if isinstance(processor.get("size"), dict) else {}
    lo, hi = _QWEN_PIXELS[model_type]
    lo = field_int(
        processor.get("min_pixels") or size.get("shortest_edge") or lo, "preprocessor.min_pixels", lo=1
    )
    hi = field_int(
        processor.get("max_pixels") or size.get("longest_edge") or hi, "preprocessor.max_pixels", lo=lo
    )
    return lo, hi


def _layer_list(vc: dict, key: str, layers: int, at: str) -> list[int]:
    value = vc.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value
    ):
        raise SpecsimError(f"{at}.{key}: expected a list of layer indexes < {layers}, got {show(value)}")
    return value


def qwen_tower(cfg: dict, image: ImageSize, processor: dict, where: str) -> VisionSpec:
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL: the image resized to multiples of patch × merge, one token per
    patch in the tower, merge² patches per LM token; Qwen2.5-VL attends in windows except in
    ``fullatt_block_indexes``; Qwen3-VL adds a merger per ``deepstack_visual_indexes`` entry."""
    kind = cfg["model_type"]
    at = f"{where}.vision_config"
    given = {k: v for k, v in cfg["vision_config"].items() if v is not None}
    vc = {**_QWEN_VISION_DEFAULTS[kind.removesuffix("_moe")], **given}
    qwen2 = kind == "qwen2_vl"  # Qwen2-VL: embed_dim is the tower's width, hidden_size the merger's output
    hidden = _size(vc, "embed_dim" if qwen2 else "hidden_size", at)
    inter = hidden * _size(vc, "mlp_ratio", at) if qwen2 else _size(vc, "intermediate_size", at)
    out = _size(vc, "hidden_size" if qwen2 else "out_hidden_size", at)
    patch, merge, layers = (
        _size(vc, "patch_size", at),
        _size(vc, "spatial_merge_size", at),
        _size(vc, "depth", at),
    )
    h, w = qwen_resize(image.height_px, image.width_px, patch * merge, *_qwen_pixels(kind, processor))
    patches = (h // patch) * (w // patch)
    full, window = None, 0
    if kind == "qwen2_5_vl":
        full = len(set(_layer_list(vc, "fullatt_block_indexes", layers, at)))
        window = (_size(vc, "window_size", at) // patch) ** 2
    mergers = 1 + len(_layer_list(vc, "deepstack_visual_indexes", layers, at))
    wide = hidden * merge * merge
    return VisionSpec(
        layers=layers,
        hidden=hidden,
        intermediate=inter,
        heads=_size(vc, "num_heads", at),
        patch_tokens=patches,
        image_tokens=patches // (merge * merge),
        projector_params=mergers * (wide * wide + wide * out),
        gated_mlp=kind == "qwen2_5_vl",
        full_attention_layers=full,
        window_tokens=window,
        image_size=image,
    )


def internvl_tower(cfg: dict, lm_hidden: int, image: ImageSize, processor: dict, where: str) -> VisionSpec:
    """InternVL 2.5/3: up to ``max_dynamic_patch`` 448-px tiles (plus a thumbnail when there are several),
    InternViT over each (patches + CLS), pixel shuffle by ``downsample_ratio`` (0.5: 256 tokens per tile),
    then LayerNorm + a 2-layer MLP."""
    vc, at = cfg["vision_config"], f"{where}.vision_config"
    tile = _size(cfg, "force_image_size", where, _size(vc, "image_size", at, 448))
    patch = _size(vc, "patch_size", at, 14)
    ratio = cfg.get("downsample_ratio", 0.5)
    if (
        isinstance(ratio, bool)
        or not isinstance(ratio, (int, float))
        or not 0 < ratio <= 1
        or (1 / ratio) % 1
    ):
        raise SpecsimError(
            f"{where}.downsample_ratio: expected 1/k for an integer k (e.g. 0.5), got {show(ratio)}"
        )
    shuffle = int(round(1 / ratio))
    lo = _size(cfg, "min_dynamic_patch", where, processor.get("min_patches", 1))
    hi = _size(cfg, "max_dynamic_patch", where, processor.get("max_patches", 12))
    if not lo <= hi <= MAX_TILES:
        raise SpecsimError(
            f"{where}.max_dynamic_patch: expected min_dynamic_patch ({lo}) .. {MAX_TILES} tiles, got {hi}"
        )
    cols, rows = internvl_tiles(image.height_px, image.width_px, tile, lo, hi)
    tiles = cols * rows
    views = tiles + int(tiles > 1 and cfg.get("use_thumbnail", True))
    grid = tile // patch
    hidden = _size(vc, "hidden_size", at)
    wide = hidden * shuffle * shuffle
    return VisionSpec(
        layers=_size(vc, "num_hidden_layers", at),
        hidden=hidden,
        intermediate=_size(vc, "intermediate_size", at),
        heads=_size(vc, "num_attention_heads", at),
        patch_tokens=grid * grid + 1,
        image_tokens=views * (grid // shuffle) ** 2,
        projector_params=wide * lm_hidden + lm_hidden * lm_hidden,
        views_per_image=views,
        image_size=image,
    )


def vision_spec(
    cfg: dict, lm_hidden: int, where: str, image: ImageSize | None = None, processor: dict | None = None
) -> VisionSpec:
    """The tower of a VLM config (``vision_config`` present), for ``image`` (default
    :data:`DEFAULT_IMAGE_SIZE`) where its token count depends on the size; ``processor``: the model's
    preprocessor_config.json values, when known."""
    if not isinstance(cfg["vision_config"], dict):
        raise SpecsimError(f"{where}.vision_config: expected an object, got {show(cfg['vision_config'])}")
    kind, image, processor = cfg.get("model_type"), image or DEFAULT_IMAGE_SIZE, processor or {}
    if kind in _QWEN_PIXELS:
        return qwen_tower(cfg, image, processor, where)
    if kind == "llava_next":
        return llava_next_tower(cfg, lm_hidden, image, where)
    if kind in ("internvl_chat", "internvl"):
        return internvl_tower(cfg, lm_hidden, image, processor, where)
    if kind == "gemma3":
        return gemma3_tower(cfg, lm_hidden, where)
    return llava_tower(cfg, lm_hidden, where)
