"""Roofline latency of one forward pass (ms), vectorised over batch, context and new positions.

time = roof(C − Ca, M − Ma) + roof(Ca, Ma) + overhead + all-reduce (:mod:`.parallel`) + row arithmetic
roof(c, m) = max(c, m) + (1 − overlap) · min(c, m)
C = FLOPs / (peak · eff_compute(rows)), M = bytes / (bandwidth · eff_memory(rows)), rows = batch · new;
Ca, Ma: the same of the attention kernels alone. ``eff``: an :class:`Efficiency` or a runtime.
(Williams et al. 2009, "Roofline"; applied to LLM decoding as in Pope et al. 2022 and llm-analysis.)
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec, VisionSpec
from specsim.hardware.parallel import allreduce_ms, kv_shards
from specsim.jsonio import check_keys, check_schema_version

USABLE_MEMORY_FRACTION = 0.9  # leave room for the runtime, allocator slack and activations


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak reached and fixed per-pass overhead (ms); ``source`` says where they come from."""

    compute: float = 0.6
    memory: float = 0.8
    overhead_ms: float = 0.1
    overhead_ms_per_layer: float = 0.01
    source: str = (
        "default assumptions: 60% of dense peak FLOP/s (large GEMMs), 80% of peak bandwidth "
        "(decode kernels), 0.1 ms + 0.01 ms/layer per pass (fused kernels / CUDA graphs); not measured"
    )
    schema_version: int = 1

    def __post_init__(self) -> None:
        for key in ("compute", "memory"):
            value = getattr(self, key)
            if not (_is_num(value) and value > 0):
                raise SpecsimError(f"efficiency.{key}: expected a fraction of peak > 0, got {value!r}")
        for key in ("overhead_ms", "overhead_ms_per_layer"):
            value = getattr(self, key)
            if not (_is_num(value) and value >= 0):
                raise SpecsimError(f"efficiency.{key}: expected a time >= 0 ms, got {value!r}")

    # The roofline's interface, shared with Runtime: one memory and one compute fraction at any row count.
    overlap = 1.0
    attention_score_bytes = 0.0
    overhead_ms_per_block = 0.0
    overhead_ms_per_sequence_per_block = 0.0
    overhead_ms_per_allreduce = 0.0
    interconnect_efficiency = 0.7
    dequant_ms_per_layer = 0.0
    extra_draft_forwards_per_block = 0.0
    sampler_ms_per_token = rejection_ms_per_draft_token = lookup_ms_per_sequence = 0.0
    schedule_ms_per_step = schedule_ms_per_sequence = schedule_overlap = schedule_overlap_sd = 0.0
    schedule_overlap_sd_model = 0.0
    draft_floor_ms_per_forward = head_floor_ms_per_forward = 0.0
    draft_split = "single"
    gemv_max_rows = 1.0
    gemv_int32_ops_per_weight_per_row = 0.0
    host_overlap = 0.0
    overhead_ms_per_mask = 0.0
    masked_attention_factor = 1.0
    device_ms_per_layer = 0.0
    kv_concat_int32_ops_per_element = 0.0

    def memory_efficiency(self, rows) -> np.ndarray:
        return np.full(np.shape(rows), self.memory)

    def compute_efficiency_at(self, rows) -> np.ndarray:
        return np.full(np.shape(rows), self.compute)

    def pass_overhead_ms(self, layers: int) -> float:
        return self.overhead_ms + self.overhead_ms_per_layer * layers

    def to_json(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "compute": self.compute,
            "memory": self.memory,
            "overhead_ms": self.overhead_ms,
            "overhead_ms_per_layer": self.overhead_ms_per_layer,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: dict) -> Efficiency:
        check_schema_version(d, 1, "efficiency")
        check_keys(
            d,
            {"schema_version", "compute", "memory", "overhead_ms", "overhead_ms_per_layer", "source"},
            "efficiency",
        )
        return replace(cls(), **{k: v for k, v in d.items() if k != "schema_version"})


def roof_ms(compute, memory, overlap: float):
    """The roofline of a pass from its compute and memory times (ms): the larger, plus the part of the smaller
    that does not overlap it (arrays, or floats without numpy's per-call cost)."""
    if isinstance(compute, float) and isinstance(memory, float):
        return max(compute, memory) + (1.0 - overlap) * min(compute, memory)
    return np.maximum(compute, memory) + (1.0 - overlap) * np.minimum(compute, memory)


def _is_num(value) -> bool:
    return (
        isinstance(value, (int, float, np.floating))
        and not isinstance(value, bool)
        and bool(np.isfinite(value))
    )


def _arr(x, name: str, lo: float) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < lo):
        raise SpecsimError(f"{name}: expected values >= {lo:g}, got {x!r}")
    return a


def _activation_elems(m: ModelSpec) -> int:
    """Elements read + written per token per layer by unfused ops (norms, residuals, matmul I/O)."""
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    return 8 * m.hidden + 2 * q + 2 * kv + (4 if m.gated_mlp else 2) * m.mlp_width_per_token


def forward_flops(m: ModelSpec, batch, context, new, logits=None) -> np.ndarray:
    """FLOPs of one pass (see module docstring); ``logits`` positions default to ``new``."""
    b, ctx, n = _arr(batch, "batch", 1), _arr(context, "context_tokens", 0), _arr(new, "new_tokens", 1)
    lg = n if logits is None else _arr(logits, "logit_tokens", 0)
    matmul = 2.0 * (m.active_decoder_params + m.extra_weights) * n + 2.0 * m.vocab * m.hidden * lg
    return b * matmul + attention_flops(m, b, ctx, n)


def attention_flops(m: ModelSpec, batch, context, new) -> np.ndarray:
    """FLOPs of a pass's attention kernels: batch · 4 · layers · heads · head_dim · (new · context +
    new(new+1)/2) (scores and their weighted sum, causal over the new positions)."""
    b, ctx, n = _arr(batch, "batch", 1), _arr(context, "context_tokens", 0), _arr(new, "new_tokens", 1)
    per_position = 4.0 * m.layers * m.heads * m.attention_head_dim
    return b * per_position * (n * m.attended_positions(ctx) + n * (n + 1) / 2)


def forward_bytes(m: ModelSpec, batch, context, new, logits=None, score_bytes: float = 0.0) -> np.ndarray:
    """Bytes moved to/from memory by one pass (see module docstring)."""
    b, ctx, n = _arr(batch, "batch", 1), _arr(context, "context_tokens", 0), _arr(new, "new_tokens", 1)
    lg = n if logits is None else _arr(logits, "logit_tokens", 0)
    weights = streamed_weight_bytes(m, b * n)
    kv = kv_pass_bytes(m, b, ctx, n)
    act_bytes = max(m.dtype_bytes, m.kv_element_bytes)  # quantised weights still compute in fp16/fp32
    act = b * n * m.layers * _activation_elems(m) * act_bytes
    scores = score_elements(m, b, ctx, n) * score_bytes
    return weights + kv + act + b * lg * m.vocab * 4.0 + scores


def streamed_weights(m: ModelSpec, rows=1.0):
    """Weights a pass of ``rows`` tokens (batch · new) reads: the decoder layers (a MoE model's touched
    experts only), the LM head (embedding rows are a gather) and any ``extra_weights`` (a draft head's fc)."""
    return m.streamed_decoder_params(rows) + m.vocab * m.hidden + m.extra_weights


def streamed_weight_bytes(m: ModelSpec, rows):
    """Bytes of :func:`streamed_weights`: the model's bytes per weight, routed experts at their own."""
    nbytes = streamed_weights(m, rows) * m.dtype_bytes
    if m.moe is None or m.moe.expert_bytes is None:
        return nbytes
    routed = m.moe.routed_params(m.hidden, m.moe.touched_experts(rows))
    return nbytes + routed * (m.moe.expert_bytes - m.dtype_bytes)


def gemv_rows_ms(m: ModelSpec, dev: Device, eff, batch, new, tp: int = 1):
    """Integer arithmetic of the rows past the first in a matrix-vector kernel that takes a few rows (ms).

    = (rows − 1) · weights / tp · ``gemv_int32_ops_per_weight_per_row`` / INT32 ops/s, for 1 < rows ≤
    ``gemv_max_rows`` (0 elsewhere). llama.cpp's mul_mat_vec_q reads each quantised weight block once and
    dot-products it with every row's q8_1 activations (unpack, dp4a, scale): the weight stream is shared, the
    integer work per row is not, so each row adds time in proportion to weights / the CUDA cores' INT32 rate.
    """
    rows = np.asarray(batch, dtype=float) * np.asarray(new, dtype=float)
    ops = eff.gemv_int32_ops_per_weight_per_row
    multi = (rows > 1) & (rows <= eff.gemv_max_rows)
    if ops == 0 or not np.any(multi):
        return np.zeros_like(rows)
    if dev.int32_ops_per_s is None:  # only a Runtime (it has a name) sets ops > 0
        raise SpecsimError(
            f"device {dev.name!r}: int32_ops_per_s is missing, and runtime {eff.name!r} prices "
            f"passes of 2 to {eff.gemv_max_rows:g} rows by it (expected the device file to give the "
            "CUDA cores' INT32 peak)"
        )
    weights = streamed_weights(m, rows)
    return np.where(multi, (rows - 1.0) * weights / tp * ops / dev.int32_ops_per_s * 1e3, 0.0)


def kv_pass_bytes(m: ModelSpec, batch, context, new) -> np.ndarray:
    """KV-cache bytes one pass reads and writes: batch · (context + new) positions."""
    positions = m.attended_positions(np.asarray(context, dtype=float) + new)
    return np.asarray(batch, dtype=float) * positions * m.kv_bytes_per_token


def sharded_bytes(m: ModelSpec, batch, context, new, logits=None, score_bytes: float = 0.0, tp: int = 1):
    """Bytes one GPU of a ``tp``-way shard moves in a pass: all over ``tp``, except the KV cache over
    :func:`~specsim.hardware.parallel.kv_shards` (replicated KV heads are read on every GPU that holds
    them)."""
    rows = np.asarray(batch, dtype=float) * np.asarray(new, dtype=float)
    whole = forward_bytes(m, batch, context, new, logits, score_bytes) / tp + busiest_expert_bytes(
        m, rows, tp
    )
    if kv_shards(m, tp) == tp:
        return whole
    return whole + sharded_kv_bytes(m, batch, context, new, tp) - kv_pass_bytes(m, batch, context, new) / tp


def busiest_expert_bytes(m: ModelSpec, rows, tp: int = 1):
    """Expert parallelism: the bytes of routed experts the busiest GPU reads in a pass of ``rows`` tokens
    beyond an even ``tp``-way split of the touched ones (0 without EP)."""
    if m.moe is None or not m.moe.expert_parallel or tp <= 1:
        return 0.0
    moe = m.moe
    busiest = moe.busiest_gpu_experts(rows, tp) - moe.touched_experts(rows) / tp
    return moe.routed_params(m.hidden, busiest) * (moe.expert_bytes or m.dtype_bytes)


def sharded_weight_bytes(m: ModelSpec, rows, tp: int = 1):
    """Weight bytes one GPU of a ``tp``-way shard streams in a pass of ``rows`` tokens: constant for a dense
    model; a MoE model's touched experts grow with the rows (:mod:`specsim.hardware.moe`)."""
    return streamed_weight_bytes(m, rows) / tp + busiest_expert_bytes(m, rows, tp)


def sharded_kv_bytes(m: ModelSpec, batch, context, new, tp: int = 1):
    """KV-cache bytes one GPU of a ``tp``-way shard reads and writes in a pass (its share of the KV heads)."""
    return kv_pass_bytes(m, batch, context, new) / kv_shards(m, tp)


def score_elements(m: ModelSpec, batch, context, new, tp: int = 1):
    """Attention score elements one GPU of a ``tp``-way shard materialises in a pass (runtimes whose
    attention writes them out pay ``attention_score_bytes`` each)."""
    b, ctx, n = (np.asarray(x, dtype=float) for x in (batch, context, new))
    return b * m.layers * m.heads * n * m.attended_positions(ctx + n) / tp


def quantized_layers(m: ModelSpec) -> int:
    """Decoder layers whose matmuls unpack quantized weights (all of them when weights are under 2 bytes)."""
    return m.layers if m.dtype_bytes < 2 else 0


def roofline_terms_ms(m: ModelSpec, dev: Device, eff, batch, context, new, logits=None, tp: int = 1):
    """(compute_ms, memory_ms) of one pass (per GPU of a ``tp``-way shard) before the max and the overhead."""
    flops = forward_flops(m, batch, context, new, logits) / tp
    nbytes = sharded_bytes(m, batch, context, new, logits, eff.attention_score_bytes, tp)
    return _times_ms(dev, eff, batch, new, flops, nbytes)


def _times_ms(dev: Device, eff, batch, new, flops, nbytes):
    """(compute_ms, memory_ms) of ``flops`` and ``nbytes`` at the efficiencies of batch · new rows."""
    rows = np.asarray(batch, dtype=float) * np.asarray(new, dtype=float)
    compute = flops / (dev.peak_flops_per_s * eff.compute_efficiency_at(rows)) * 1e3
    memory = nbytes / (dev.memory_bandwidth_bytes_per_s * eff.memory_efficiency(rows)) * 1e3
    return compute, memory


def attention_terms_ms(m: ModelSpec, dev: Device, eff, batch, context, new, tp: int = 1):
    """(compute_ms, memory_ms) of a pass's attention kernels alone (per GPU of a ``tp``-way shard): their
    FLOPs against the KV cache's bytes and any materialised scores; part of :func:`roofline_terms_ms`."""
    flops = attention_flops(m, batch, context, new) / tp
    nbytes = sharded_kv_bytes(m, batch, context, new, tp) + score_elements(m, batch, context, new, tp) * (
        eff.attention_score_bytes
    )
    return _times_ms(dev, eff, batch, new, flops, nbytes)


def forward_ms(m: ModelSpec, dev: Device, eff, batch, context, new, logits=None, tp: int = 1):
    """Time (ms) of one pass: roofline + overhead (+ all-reduces when ``tp`` > 1); broadcasts array
    arguments. The attention kernels and the rest (matmuls over the weights, norms, logits) run one after
    the other, so each has its own roof: the matmuls' FLOPs never hide under the KV cache's bytes. The host
    overhead adds to the device time, or overlaps it by ``host_overlap`` (:func:`roof_ms` of the two)."""
    compute, memory = roofline_terms_ms(m, dev, eff, batch, context, new, logits, tp)
    a_compute, a_memory = attention_terms_ms(m, dev, eff, batch, context, new, tp)
    slow = masked_attention_factor(eff, new)
    roof = roof_ms(compute - a_compute, memory - a_memory, eff.overlap) + roof_ms(
        a_compute * slow, a_memory * slow, eff.overlap
    )
    host = eff.pass_overhead_ms(m.layers) + mask_ms(eff, new)
    rest = (
        eff.dequant_ms_per_layer * quantized_layers(m),
        allreduce_ms(m, dev, eff, batch, new, tp),
        gemv_rows_ms(m, dev, eff, batch, new, tp),
        eager_device_ms(m, dev, eff, batch, context, new, tp),
    )
    if eff.host_overlap == 0:
        out = roof + host + rest[0] + rest[1] + rest[2] + rest[3]
    else:
        out = roof_ms(host, roof + rest[0] + rest[1] + rest[2] + rest[3], eff.host_overlap)
    return out if out.ndim else float(out)


def mask_ms(eff, new):
    """Host time of building a pass's causal mask: ``overhead_ms_per_mask`` where a sequence brings more than
    one new position (HF builds none for a one-position pass over its cache)."""
    return eff.overhead_ms_per_mask * (np.asarray(new, dtype=float) > 1)


def masked_attention_factor(eff, new):
    """How much longer than its roofline a pass's attention runs: ``masked_attention_factor`` where a
    sequence brings more than one new position (a causal mask takes SDPA off its unmasked kernel), else 1."""
    return np.where(np.asarray(new, dtype=float) > 1, eff.masked_attention_factor, 1.0)


def kv_elements(m: ModelSpec, batch, context, new, tp: int = 1):
    """K/V elements of a pass's cache after it (batch · (context + new) positions) on one GPU of ``tp``."""
    return kv_pass_bytes(m, batch, context, new) / m.kv_element_bytes / kv_shards(m, tp)


def eager_device_ms(m: ModelSpec, dev: Device, eff, batch, context, new, tp: int = 1):
    """Device time of an eager pass beyond its roofline (ms): ``device_ms_per_layer`` · layers (each kernel's
    launch gap) + :func:`kv_concat_ms`; 0 for runtimes that set neither."""
    return eff.device_ms_per_layer * m.layers + kv_concat_ms(m, dev, eff, batch, context, new, tp)


def kv_concat_ms(m: ModelSpec, dev: Device, eff, batch, context, new, tp: int = 1):
    """DynamicCache's concatenation (ms): every pass ``torch.cat`` copies each layer's cache and the new K/V
    into a new tensor, :func:`kv_elements` at ``kv_concat_int32_ops_per_element`` integer operations each
    (the strided copy's index arithmetic) over the device's INT32 rate; 0 for a cache written in place."""
    ops = eff.kv_concat_int32_ops_per_element
    elements = kv_elements(m, batch, context, new, tp)
    if ops == 0:
        return np.zeros_like(elements)
    if dev.int32_ops_per_s is None:
        raise SpecsimError(
            f"device {dev.name!r}: int32_ops_per_s is missing, and runtime {eff.name!r} prices its cache "
            "concatenation by it (expected the device file to give the CUDA cores' INT32 peak)"
        )
    return elements * ops / dev.int32_ops_per_s * 1e3


def decode_ms(m: ModelSpec, dev: Device, eff, context, batch=1, tp: int = 1):
    """Tp (or Tq): one new position per sequence with ``context`` cached positions (ms)."""
    return forward_ms(m, dev, eff, batch, context, 1, tp=tp)


def verify_ms(m: ModelSpec, dev: Device, eff, gamma, context, batch=1, tp: int = 1):
    """Tv(γ): γ+1 new positions (pending token + γ drafts), logits at all of them (ms)."""
    g = _arr(gamma, "gamma", 1)
    return forward_ms(m, dev, eff, batch, context, g + 1, tp=tp)


def prefill_ms(m: ModelSpec, dev: Device, eff, prompt_tokens, batch=1):
    """Prefill of ``prompt_tokens`` into an empty cache, logits for the last position only (ms)."""
    return forward_ms(m, dev, eff, batch, 0, prompt_tokens, logits=1)


def vision_ms(v: VisionSpec, dtype_bytes: float, dev: Device, eff, images=1):
    """Vision tower + projector over ``images`` images (ms): same roofline, tokens = the tower's per image
    (every view), attention per view (windowed layers see a window)."""
    n = _arr(images, "images", 0)
    tokens = v.tower_tokens
    flops = n * (
        2.0 * v.tower_params * tokens + float(v.attention_flops) + 2.0 * v.projector_params * v.image_tokens
    )
    act = n * tokens * v.layers * (10 * v.hidden + 4 * v.intermediate) * dtype_bytes
    nbytes = v.params * dtype_bytes + act
    rows = n * tokens
    t = np.maximum(
        flops / (dev.peak_flops_per_s * eff.compute_efficiency_at(np.maximum(rows, 1))),
        nbytes / (dev.memory_bandwidth_bytes_per_s * eff.memory_efficiency(np.maximum(rows, 1))),
    )
    host, device = eff.pass_overhead_ms(v.layers), t * 1e3 + eff.device_ms_per_layer * v.layers
    both = roof_ms(host, device, eff.host_overlap) if eff.host_overlap else device + host
    out = np.where(n > 0, both, 0.0)
    return out if out.ndim else float(out)


def compute_bound(
    m: ModelSpec, dev: Device, eff, batch, context, new, logits=None, tp: int = 1
) -> np.ndarray:
    """True where the compute term of the roofline exceeds the memory term."""
    compute, memory = roofline_terms_ms(m, dev, eff, batch, context, new, logits, tp)
    return compute > memory
