"""Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): what its projections weigh and what it caches.

DeepSeek-AI (2024), DeepSeek-V2, §2.1: keys and values are rebuilt per head from one compressed latent of
``kv_lora_rank`` elements, and a decoupled RoPE key of ``qk_rope_head_dim`` is shared by the heads; the cache
holds only those kv_lora_rank + qk_rope_head_dim elements per layer and position, one copy for all heads
(replicated, not split, over tensor-parallel GPUs). Decoding runs it absorbed (FlashMLA, vLLM, SGLang): each
head scores the latent and its RoPE part and sums latent values, 2 · (2 · kv_lora_rank + qk_rope_head_dim)
FLOPs per head and cached position.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.hardware.config_fields import pos_int


@dataclass(frozen=True)
class MLASpec:
    """The ranks and head widths of a latent-attention layer (its HF config keys); ``q_lora_rank`` None:
    queries projected directly (DeepSeek-V2-Lite)."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def attention_params(self, hidden: int, heads: int) -> int:
        """Q (through its low-rank pair when q_lora_rank is set), the latent and RoPE key, K/V up, O."""
        q_width = heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        q = hidden * q_width if self.q_lora_rank is None else self.q_lora_rank * (hidden + q_width)
        kv_down = hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_down + kv_up + heads * self.v_head_dim * hidden

    @property
    def cache_elements(self) -> int:
        """Elements one layer caches per position: the latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def attention_head_dim(self) -> float:
        """The head width d for which the roofline's 4 · heads · d FLOPs per cached position equal the
        absorbed form's 2 · heads · (2 · kv_lora_rank + qk_rope_head_dim)."""
        return (2 * self.kv_lora_rank + self.qk_rope_head_dim) / 2


_MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_from_config(cfg: dict, where: str) -> MLASpec | None:
    """Latent attention's ranks and head widths (DeepSeek-V2/V3 configs); None without ``kv_lora_rank``."""
    if cfg.get("kv_lora_rank") is None:
        return None
    dims = [pos_int(cfg.get(k), f"{where}.{k}") for k in _MLA_KEYS]
    q_rank = None if cfg.get("q_lora_rank") is None else pos_int(cfg["q_lora_rank"], f"{where}.q_lora_rank")
    return MLASpec(q_rank, *dims)
