"""A mixture-of-experts MLP for the roofline: which weights a token multiplies and which a pass reads.

Read from a HF config by :func:`specsim.hardware.model.spec_from_config`. A token multiplies its k routed
experts (of E) plus any shared expert; a pass of n tokens reads the experts at least one of them routes to,
E · (1 − (1 − k/E)^n) in expectation under independent uniform routing, so decode at batch 1 reads k
experts and a large batch or a verify pass reads nearly all E.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.config_fields import given, pos_int


@dataclass(frozen=True)
class MoESpec:
    """A mixture-of-experts MLP: ``experts`` routed experts of width ``expert_intermediate``, ``per_token`` of
    them per token, an always-on shared expert of width ``shared_intermediate`` (0: none), in ``layers`` of
    the decoder layers (the others keep the dense MLP); each expert a gated MLP (3 matrices)."""

    experts: int
    per_token: int
    expert_intermediate: int
    shared_intermediate: int
    layers: int
    expert_bytes: float | None = None  # bytes per routed-expert weight (None: the model's dtype_bytes)
    expert_parallel: bool = False  # experts spread whole over the GPUs (EP), not split across them (TP)

    def routed_params(self, hidden: int, experts=None):
        """The weights of ``experts`` routed experts (default: all E) in every MoE layer; ``experts`` may be
        an expectation (:meth:`touched_experts`) or an array of them."""
        return self.layers * (self.experts if experts is None else experts) * self.expert_params(hidden)

    def expert_params(self, hidden: int) -> int:
        return 3 * hidden * self.expert_intermediate

    def fixed_params(self, hidden: int) -> int:
        """Per MoE layer, what every token reads whatever its route: the router and the shared expert."""
        return hidden * self.experts + 3 * hidden * self.shared_intermediate

    def touch_probability(self, rows) -> np.ndarray:
        """The chance a pass of ``rows`` tokens routes to a given expert: 1 − (1 − k/E)^rows, routes taken as
        independent and uniform (each token picks k of E)."""
        return 1.0 - (1.0 - self.per_token / self.experts) ** np.asarray(rows, dtype=float)

    def touched_experts(self, rows) -> np.ndarray:
        """Expected distinct experts a pass of ``rows`` tokens reads per layer: E · p (1 row: k; many: E)."""
        return self.experts * self.touch_probability(rows)

    def busiest_gpu_experts(self, rows, gpus: int) -> np.ndarray:
        """Expert parallelism: the expected experts the busiest of ``gpus`` GPUs reads per layer, each GPU
        holding E/gpus whole experts, each touched with p (as if independently): E[max of ``gpus``
        Binomial(E/gpus, p)] = Σ_m (1 − F(m − 1)^gpus). Tensor parallelism reads E·p/gpus
        expert-equivalents a GPU; for DeepSeek-V3 decoding one token on 8 GPUs the busiest reads 2.5 times
        that."""
        from scipy.stats import binom  # here, not at import: every command loads this module

        p = self.touch_probability(rows)
        held = self.experts // gpus
        m = np.arange(1, held + 1).reshape((-1,) + (1,) * p.ndim)
        return np.sum(1.0 - binom.cdf(m - 1, held, p) ** gpus, axis=0)


# Config keys of a mixture-of-experts MLP, per role, in the spellings of the model types read here.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_MOE_TYPES = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_vl_moe_text",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
)


def moe_from_config(cfg: dict, where: str, layers: int, intermediate: int | None) -> MoESpec | None:
    """The MoE MLP of a text config (None: dense). Read for Mixtral and gpt-oss (every layer; experts
    ``intermediate_size`` wide), Qwen2-MoE (a shared expert), Qwen3-MoE / Qwen3-VL-MoE
    (``moe_intermediate_size``, ``mlp_only_layers``, ``decoder_sparse_step``) and DeepSeek-V2/V3
    (``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``); any other config with routed
    experts is refused, never priced as dense."""
    key = next((k for k in _EXPERT_KEYS if cfg.get(k) is not None), None)
    if key is None:
        return None
    model_type = cfg.get("model_type")
    if model_type not in _MOE_TYPES:
        raise SpecsimError(
            f"{where}: a mixture-of-experts config ({key} {cfg[key]!r}) of model_type {model_type!r}: "
            f"expected one of {list(_MOE_TYPES)} (the MoE layouts specsim reads)"
        )
    experts = pos_int(cfg[key], f"{where}.{key}")
    per_token = pos_int(cfg.get("num_experts_per_tok"), f"{where}.num_experts_per_tok")
    if per_token > experts:
        raise SpecsimError(
            f"{where}.num_experts_per_tok: expected at most {key} ({experts}), got {per_token}"
        )
    width = given(cfg, where, "moe_intermediate_size") or intermediate
    if width is None:
        raise SpecsimError(f"{where}: missing 'moe_intermediate_size' (the experts' width)")
    shared = given(cfg, where, "shared_expert_intermediate_size") or 0
    if cfg.get("n_shared_experts"):  # DeepSeek: n shared experts of the routed width
        shared = pos_int(cfg["n_shared_experts"], f"{where}.n_shared_experts") * width
    moe_layers = sparse_layers(cfg, where, layers)
    return MoESpec(experts, per_token, width, shared, moe_layers)


def sparse_layers(cfg: dict, where: str, layers: int) -> int:
    """How many layers route to experts: DeepSeek's from ``first_k_dense_replace`` on, every
    ``moe_layer_freq``-th (i >= k and i % freq == 0); Qwen's every ``decoder_sparse_step``-th ((i + 1) % step
    == 0) outside ``mlp_only_layers``; Mixtral's all."""
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:
        first, freq = cfg.get("first_k_dense_replace") or 0, given(cfg, where, "moe_layer_freq") or 1
        if not isinstance(first, int) or not 0 <= first <= layers:
            raise SpecsimError(f"{where}.first_k_dense_replace: expected 0..{layers}, got {first!r:.40}")
        return sum(1 for i in range(first, layers) if i % freq == 0)
    step = given(cfg, where, "decoder_sparse_step") or 1
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(not isinstance(i, int) or not 0 <= i < layers for i in dense):
        raise SpecsimError(
            f"{where}.mlp_only_layers: expected layer indices in 0..{layers - 1}, got {dense!r:.60}"
        )
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
