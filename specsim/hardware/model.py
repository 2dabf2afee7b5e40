"""Model description for the roofline: sizes read from a HF ``config.json`` dict, pure JSON.

Handles decoder-only text configs (llama, mistral, qwen2, ...) and VLM configs (``text_config`` or
InternVL's ``llm_config``, plus a ``vision_config`` read by :mod:`specsim.hardware.vision_towers`). Keys a
config leaves out take the transformers defaults of its ``model_type`` (LLaVA configs on the Hub rely on
them). Names, folders and shipped ids are resolved by :mod:`specsim.hardware.model_resolution`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.config_fields import given, pos_int
from specsim.hardware.image_tokens import ImageSize
from specsim.hardware.mla import MLASpec, mla_from_config
from specsim.hardware.moe import MoESpec, moe_from_config
from specsim.hardware.vision_towers import VisionSpec, vision_spec
from specsim.hardware.weight_formats import config_dtype, dtype_bytes, kv_dtype_bytes, weight_format

# transformers' defaults for keys a config may omit (LlamaConfig, MistralConfig, Qwen2Config).
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "mistral": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
}


@dataclass(frozen=True)
class ModelSpec:
    """The sizes the roofline needs; ``dtype_bytes`` per weight, ``kv_bytes`` per KV-cache element (None:
    same)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype_bytes: float = 2
    kv_bytes: float | None = None
    gated_mlp: bool = True  # SwiGLU: 3 matrices (llama, qwen2); False: 2 (gpt2-like)
    tie_word_embeddings: bool = False
    vision: VisionSpec | None = None
    # weights every forward streams beyond its decoder layers and LM head (a draft head's fc over the
    # target's features and wider first projection: :mod:`specsim.hardware.draft_heads`)
    extra_weights: int = 0
    moe: MoESpec | None = None  # None: every layer's MLP is dense (``intermediate`` wide)
    window: int | None = None  # sliding-window attention: ``window_layers`` layers attend the last W
    window_layers: int = 0
    mla: MLASpec | None = None  # multi-head latent attention (kv_heads is then 1: one latent for all heads)
    max_positions: int | None = None  # the config's max_position_embeddings (None: not stated)
    dtype: str | None = None  # the weights' format by name ('bfloat16', 'float8'; None: given as bytes)

    def __post_init__(self) -> None:
        if self.moe is not None and not 0 <= self.moe.layers <= self.layers:
            raise SpecsimError(f"{self.name}: {self.moe.layers} MoE layers of {self.layers}")
        if not 0 <= self.window_layers <= self.layers:
            raise SpecsimError(f"{self.name}: {self.window_layers} sliding-window layers of {self.layers}")

    @property
    def layer_params(self) -> int:
        """Matmul weights of one dense decoder layer: Q, K, V, O projections and the MLP."""
        return self.attention_params + (3 if self.gated_mlp else 2) * self.hidden * self.intermediate

    @property
    def attention_params(self) -> int:
        """Q, K, V and O projections of one decoder layer (latent attention: :mod:`specsim.hardware.mla`)."""
        if self.mla is not None:
            return self.mla.attention_params(self.hidden, self.heads)
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * self.hidden * q_out + 2 * self.hidden * kv_out

    @property
    def attention_head_dim(self) -> float:
        """Per-head width of the attention kernels' FLOPs per cached position (4 · heads · d)."""
        return self.head_dim if self.mla is None else self.mla.attention_head_dim

    @property
    def decoder_params(self) -> int:
        """Matmul weights of all decoder layers (every expert of a mixture-of-experts model)."""
        return self._decoder_params(None if self.moe is None else self.moe.experts)

    @property
    def active_decoder_params(self) -> int:
        """Decoder weights one token multiplies: all of a dense model's; a MoE model's routed k experts."""
        return self._decoder_params(None if self.moe is None else self.moe.per_token)

    def streamed_decoder_params(self, rows):
        """Decoder weights a pass of ``rows`` tokens reads: a dense model's all; a MoE model's attention,
        router and shared expert plus the experts its tokens touch (:meth:`MoESpec.touched_experts`)."""
        return self._decoder_params(None if self.moe is None else self.moe.touched_experts(rows))

    def _decoder_params(self, experts):
        moe = self.moe
        if moe is None:
            return self.layers * self.layer_params
        routed = experts * moe.expert_params(self.hidden)
        per_moe_layer = self.attention_params + moe.fixed_params(self.hidden) + routed
        return (self.layers - moe.layers) * self.layer_params + moe.layers * per_moe_layer

    @property
    def mlp_width_per_token(self) -> float:
        """MLP intermediate elements one token computes per layer, averaged over the layers."""
        if self.moe is None:
            return self.intermediate
        moe = self.moe
        routed = moe.per_token * moe.expert_intermediate + moe.shared_intermediate
        return ((self.layers - moe.layers) * self.intermediate + moe.layers * routed) / self.layers

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def text_params(self) -> int:
        """Language-model parameters: layers + embedding (+ untied LM head); norms/biases ignored."""
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.decoder_params + self.embedding_params + head + self.extra_weights

    @property
    def active_params(self) -> int:
        """Parameters one token's forward multiplies (a MoE model's routed experts only), vision excluded."""
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.active_decoder_params + self.embedding_params + head + self.extra_weights

    @property
    def params(self) -> int:
        """All parameters, vision tower and projector included."""
        return self.text_params + (self.vision.params if self.vision else 0)

    def attended_positions(self, positions):
        """Cache positions one layer's attention reads (and its KV cache holds), averaged over the layers:
        all ``positions`` for a full-attention layer, at most ``window`` for a sliding-window one."""
        if self.window is None or not self.window_layers:
            return positions
        p = np.asarray(positions, dtype=float)
        full = self.layers - self.window_layers
        return (full * p + self.window_layers * np.minimum(p, self.window)) / self.layers

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one position adds: layers × KV heads × head dim × 2 (K and V) × dtype bytes (latent
        attention: layers × its latent and RoPE key × dtype bytes)."""
        if self.mla is not None:
            return self.layers * self.mla.cache_elements * self.kv_element_bytes
        return self.layers * self.kv_heads * self.head_dim * 2 * self.kv_element_bytes

    @property
    def kv_element_bytes(self) -> float:
        """Bytes per KV-cache element: ``kv_bytes`` if set, else the weights' (float16 or wider), and 2 under
        quantised weights: int8, fp8 and GGUF formats still cache fp16/bf16 (vLLM's ``kv_cache_dtype``
        "auto" is the activations' dtype; llama.cpp's ``--cache-type-k`` defaults to f16)."""
        if self.kv_bytes is not None:
            return self.kv_bytes
        return self.dtype_bytes if self.dtype_bytes >= 2 else 2

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights (vision tower included; routed experts at their own bytes where set)."""
        if self.moe is None or self.moe.expert_bytes is None:
            return self.params * self.dtype_bytes
        routed = self.moe.routed_params(self.hidden)
        return (self.params - routed) * self.dtype_bytes + routed * self.moe.expert_bytes

    def with_dtype(self, dtype: str | float, kv_dtype: str | None = None) -> ModelSpec:
        """A copy with weights (and, when given, the KV cache) in another dtype (name or bytes)."""
        kv = self.kv_bytes if kv_dtype is None else kv_dtype_bytes(kv_dtype)
        moe = None if self.moe is None else replace(self.moe, expert_bytes=None)  # --dtype sets every weight
        size, name = weight_format(dtype)
        return replace(self, dtype_bytes=size, kv_bytes=kv, moe=moe, dtype=name)


def _get(cfg: dict, key: str, defaults: dict, where: str, *alt: str) -> Any:
    for k in (key, *alt):
        if cfg.get(k) is not None:
            return cfg[k]
    if key in defaults:
        return defaults[key]
    raise SpecsimError(
        f"{where}: missing {key!r} (model_type {cfg.get('model_type')!r} has no default for it)"
    )


def _heads(cfg: dict, defaults: dict, where: str, hidden: int) -> tuple[int, int, int]:
    """(attention heads, KV heads, head dim): KV heads divide the heads (grouped-query attention shares
    each KV head among heads / kv_heads query heads); without ``head_dim``, the heads divide hidden_size."""
    heads = pos_int(
        _get(cfg, "num_attention_heads", defaults, where, "n_head"), f"{where}.num_attention_heads"
    )
    kv = given(cfg, where, "num_key_value_heads")
    shown = f"{kv}"
    if kv is None:
        kv = defaults.get("num_key_value_heads", heads)
        shown = f"{kv} (model_type {cfg.get('model_type')!r}'s default)"
    if kv > heads:
        raise SpecsimError(
            f"{where}.num_key_value_heads: expected at most num_attention_heads ({heads}), got {shown}"
        )
    if heads % kv:
        raise SpecsimError(
            f"{where}.num_key_value_heads: expected a divisor of num_attention_heads ({heads}), got {shown}"
        )
    head_dim = given(cfg, where, "head_dim")
    if head_dim is None:
        if hidden % heads:
            raise SpecsimError(
                f"{where}.num_attention_heads: expected a divisor of hidden_size ({hidden}) when the "
                f"config has no head_dim, got {heads}"
            )
        head_dim = hidden // heads
    return heads, kv, head_dim


def _window(cfg: dict, where: str, layers: int) -> tuple[int | None, int]:
    """(window, layers that use it) of a config's sliding-window attention; (None, 0) without one. Layers:
    ``layer_types``' 'sliding_attention' entries where the config lists them; else Gemma-2 every other layer,
    Gemma-3 all but every ``sliding_window_pattern``-th (default 6); Qwen2-family windows only with
    ``use_sliding_window`` (from ``max_window_layers`` on); any other model type (Mistral, Phi-3) every
    layer."""
    window = given(cfg, where, "sliding_window")
    model_type = str(cfg.get("model_type", ""))
    if window is None or cfg.get("use_sliding_window") is False:
        return None, 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return window, sum(1 for t in types if t == "sliding_attention")
    if model_type.startswith("gemma2"):
        return window, (layers + 1) // 2  # even layers slide (Gemma2DecoderLayer: not layer_idx % 2)
    if model_type.startswith("gemma3"):
        pattern = given(cfg, where, "sliding_window_pattern") or 6
        return window, layers - layers // pattern
    if "use_sliding_window" in cfg:  # Qwen2-family: layers from max_window_layers on use the window
        first = given(cfg, where, "max_window_layers") or 0
        return window, max(layers - first, 0)
    return window, layers


def _text_spec(cfg: dict, name: str, where: str) -> dict[str, Any]:
    model_type = cfg.get("model_type", "")
    if not isinstance(model_type, str):
        raise SpecsimError(f"{where}.model_type: expected a string, got {model_type!r:.60}")
    defaults = _TEXT_DEFAULTS.get(model_type, {})
    hidden = pos_int(_get(cfg, "hidden_size", defaults, where, "n_embd", "d_model"), f"{where}.hidden_size")
    heads, kv, head_dim = _heads(cfg, defaults, where, hidden)
    inter = given(cfg, where, "intermediate_size", "n_inner")
    layers = _get(cfg, "num_hidden_layers", defaults, where, "n_layer")
    layers = pos_int(layers, f"{where}.num_hidden_layers")
    mla = mla_from_config(cfg, where)
    if mla is not None:  # one latent for all heads; head_dim: the query/key width
        kv, head_dim = 1, mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return {
        "layers": layers,
        "mla": mla,
        "moe": moe_from_config(cfg, where, layers, inter),
        **dict(zip(("window", "window_layers"), _window(cfg, where, layers))),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        "intermediate": inter or defaults.get("intermediate_size") or 4 * hidden,
        "vocab": pos_int(_get(cfg, "vocab_size", defaults, where), f"{where}.vocab_size"),
        "gated_mlp": cfg.get("model_type") not in ("gpt2", "opt", "gpt_neox"),
        "max_positions": given(cfg, where, "max_position_embeddings", "n_positions"),
        "tie_word_embeddings": bool(
            cfg.get("tie_word_embeddings", defaults.get("tie_word_embeddings", True))
        ),
    }


# HF model types with no causal decoder to speculate on (transformers' encoder and encoder-decoder configs)
NOT_DECODERS = frozenset(
    "bart mbart t5 mt5 umt5 pegasus marian whisper speech_to_text seamless_m4t encoder-decoder bert roberta "
    "xlm-roberta deberta deberta-v2 distilbert electra albert modernbert vit clip clip_vision_model siglip "
    "siglip_vision_model wav2vec2 hubert".split()
)


def spec_from_config(
    cfg: dict,
    name: str = "model",
    *,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    image_size: ImageSize | None = None,
    processor: dict | None = None,
) -> ModelSpec:
    """ModelSpec from a HF config dict (text or VLM); ``dtype``/``kv_dtype`` override the config's;
    ``image_size`` and ``processor`` (preprocessor_config.json values) size a dynamic-resolution tower's
    tokens (:func:`~specsim.hardware.vision_towers.vision_spec`)."""
    if not isinstance(cfg, dict):
        raise SpecsimError(f"{name}: expected a config JSON object, got {type(cfg).__name__}")
    if not isinstance(cfg.get("model_type"), str) or not cfg["model_type"]:
        raise SpecsimError(
            f"{name}.model_type: missing (expected the HF config's model_type, e.g. 'llama', "
            "'qwen2', 'llava'; specsim does not guess an architecture)"
        )
    if cfg["model_type"].lower() in NOT_DECODERS:
        raise SpecsimError(
            f"{name}.model_type: {cfg['model_type']!r} is an encoder or an encoder-decoder; specsim prices "
            "decoder-only language models (and VLMs around one)"
        )
    key = next((k for k in ("text_config", "llm_config") if isinstance(cfg.get(k), dict)), None)
    text_cfg = cfg[key] if key else cfg
    if key and "model_type" not in text_cfg:
        text_cfg = {**text_cfg, "model_type": "llama"}  # LlavaConfig's default text backbone
    fields = _text_spec(text_cfg, name, f"{name}" + (f".{key}" if key else ""))
    vision = None
    if "vision_config" in cfg and cfg["vision_config"] is not None:
        vision = vision_spec(cfg, fields["hidden"], name, image_size, processor)
    dt = dtype  # a given dtype is used as given: '' is refused by dtype_bytes, not read as "the config's"
    if dt is None:
        dt, cache, experts = config_dtype(cfg, text_cfg, name)
        kv_dtype = cache if kv_dtype is None else kv_dtype
        if experts is not None and fields["moe"] is not None:
            fields["moe"] = replace(fields["moe"], expert_bytes=dtype_bytes(experts))
        elif experts is not None:  # no routed experts: the format is every weight's
            dt = experts
    kv = None if kv_dtype is None else kv_dtype_bytes(kv_dtype)
    size, named = weight_format(dt)
    return ModelSpec(name=name, dtype_bytes=size, kv_bytes=kv, vision=vision, dtype=named, **fields)


def check_positions(spec: ModelSpec, positions: int, flag: str, what: str = "tokens in the KV cache") -> None:
    """SpecsimError naming ``flag`` when ``positions`` exceed the model's window (its config's
    max_position_embeddings; not checked where the config does not state one)."""
    if spec.max_positions is not None and positions > spec.max_positions:
        raise SpecsimError(
            f"{flag}: {positions} {what}, beyond {spec.name}'s {spec.max_positions} positions "
            "(max_position_embeddings)"
        )


def check_block_positions(
    spec: ModelSpec, context: int, gamma: int, flag: str, *, gamma_flag="--gamma-max", new_tokens: int = 0
) -> None:
    """SpecsimError naming ``flag`` when a γ block after ``context`` cached tokens (and ``new_tokens``
    decoded) is beyond the window: the verify pass writes γ + 1 positions, so all of them must fit."""
    at = f"context {context}" + (f" + {new_tokens} new tokens" if new_tokens else "")
    what = f"positions for a γ {gamma} block at {at} (+ γ + 1)"
    try:
        check_positions(spec, context + new_tokens + gamma + 1, flag, what)
    except SpecsimError as e:
        raise SpecsimError(f"{e}; give a smaller {flag} or {gamma_flag}") from None
