"""A model ready to time (:class:`LoadedModel`, made by :mod:`calibrate.models.loading`) and the random
inputs of its real shapes that timing feeds it: text ids clear of the image placeholders, KV caches of any
context (no prefill needed) and pixel values. Latency does not depend on the values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calibrate.models.placeholders import forbid_placeholders, placeholder_ids
from specsim.dtypes import canonical_dtype


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to time: ``kind`` is "causal" or "vlm", ``weights`` "real" or "random"."""

    model: Any
    tokenizer: Any | None
    name: str
    kind: str
    weights: str
    device: str
    dtype: str
    processor: Any | None = None  # image + text processor of a VLM loaded with real weights
    placement: str = ""  # module -> device summary when placed with a device map (calibrate.models.placement)

    def __post_init__(self):
        forbid_placeholders(self.model)  # a sampled image placeholder would break the next forward

    @property
    def text_config(self) -> Any:
        """The decoder (language-model) config: ``config.text_config`` for VLMs, the config otherwise."""
        return self.model.config.get_text_config(decoder=True)

    @property
    def vocab_size(self) -> int:
        """Rows of the output embedding (ids the model can emit)."""
        return int(self.text_config.vocab_size)


def torch_dtype(dtype: str):
    """The ``torch.dtype`` for a dtype name or alias."""
    import torch

    return getattr(torch, canonical_dtype(dtype))


def param_count(loaded: LoadedModel) -> int:
    """Number of parameters of the model."""
    return int(sum(p.numel() for p in loaded.model.parameters()))


# --------------------------------------------------------------------------- synthetic inputs for timing
def token_id_limit(loaded: LoadedModel) -> int:
    """Exclusive upper bound for random text ids: the vocabulary, minus special ids from the image token
    on."""
    ids = [i for i in placeholder_ids(loaded.model.config) if 0 < i < loaded.vocab_size]
    return min(ids, default=loaded.vocab_size)  # a stray image token would demand image features


def random_input_ids(loaded: LoadedModel, batch: int, tokens: int, generator) -> Any:
    """Random text ids [batch, tokens] on the model's device (latency does not depend on the values)."""
    import torch

    ids = torch.randint(0, token_id_limit(loaded), (batch, tokens), generator=generator)
    return ids.to(loaded.device)


def random_kv_cache(loaded: LoadedModel, batch: int, context_tokens: int, generator) -> Any:
    """A ``DynamicCache`` holding ``context_tokens`` positions of random keys/values per layer.

    Same shapes and dtype as the cache a real prefill leaves ([batch, kv_heads, context, head_dim]
    per layer), so a forward on top of it costs what it costs in the engine, without the prefill.
    """
    import torch
    from transformers import DynamicCache

    cfg = loaded.text_config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    shape = (batch, kv_heads, context_tokens, head_dim)
    dt = torch_dtype(loaded.dtype)
    layers = [
        (
            torch.randn(shape, generator=generator).to(loaded.device, dt),
            torch.randn(shape, generator=generator).to(loaded.device, dt),
        )
        for _ in range(int(cfg.num_hidden_layers))
    ]
    return DynamicCache(layers, config=loaded.model.config)


def image_token_count(config: Any) -> int:
    """Visual tokens one image occupies in a LLaVA-style prompt: (image_size / patch_size)², CLS dropped."""
    seq = getattr(config, "image_seq_length", None)
    vision = config.vision_config
    patches = (int(vision.image_size) // int(vision.patch_size)) ** 2
    if getattr(config, "vision_feature_select_strategy", "default") == "full":
        patches += 1
    return int(seq) if seq and int(seq) == patches else patches


def random_pixel_values(loaded: LoadedModel, images: int, generator) -> Any:
    """Random pixel values [images, channels, size, size] in the model's dtype and device."""
    import torch

    vision = loaded.model.config.vision_config
    shape = (images, int(getattr(vision, "num_channels", 3)), int(vision.image_size), int(vision.image_size))
    return torch.randn(shape, generator=generator).to(loaded.device, torch_dtype(loaded.dtype))
