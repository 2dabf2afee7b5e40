"""Multi-GPU models: tensor parallelism's all-reduces (Megatron-LM layout) and the layer split's memory.

Tensor parallel (Shoeybi et al. 2019): a pass does 2 · layers all-reduces of batch · new · hidden elements,
each a ring all-reduce (Patarasuk & Yuan 2009) over the link ``Device.link_bytes_per_s``:
    time_ms = 2 (tp − 1) / tp · message_bytes / (link_bytes_per_s · efficiency) · 1e3 + latency_ms
Weights, FLOPs and memory traffic divide by ``tp``. A layer split (llama.cpp's ``--split-mode layer``) runs
whole layers one GPU after another: a pass costs what it costs on one GPU, and only memory divides.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec

ACTIVATION_BYTES = 2  # all-reduced activations travel in bf16/fp16 whatever the weight format
# How a runtime spreads one model over GPUs: "tensor" (Megatron sharding) or "layer" (whole layers per GPU).
SPLIT_MODES = ("tensor", "layer")


def check_split_mode(split: str, where: str = "split mode") -> str:
    """``split`` when it is one of :data:`SPLIT_MODES`."""
    if split not in SPLIT_MODES:
        raise SpecsimError(f"{where}: expected one of {list(SPLIT_MODES)}, got {split!r}")
    return split


def timing_gpus(gpus: int, split: str) -> int:
    """GPUs a pass's time divides over: all ``gpus`` under a tensor split, one under a layer split."""
    return int(gpus) if check_split_mode(split) == "tensor" else 1


def check_splittable(m: ModelSpec, gpus: int, split: str, what: str = "model") -> None:
    """A tensor split needs whole heads per GPU (:func:`check_shardable`); a layer split a layer per GPU."""
    if check_split_mode(split) == "tensor":
        check_shardable(m, gpus, what)
    elif gpus > m.layers:
        raise SpecsimError(
            f"layer split over {gpus} GPUs: {what} {m.name!r} has {m.layers} layers (expected at "
            f"most {m.layers} GPUs)"
        )


def layer_share(m: ModelSpec, gpus: int) -> float:
    """Share of a layer-split model on its most loaded GPU: ceil(layers / gpus) / layers (embeddings and the
    LM head taken as spread with the layers)."""
    return -(-m.layers // int(gpus)) / m.layers


def check_tp(tp: int, dev: Device | None = None) -> int:
    """A tensor-parallel degree >= 1; > 1 needs a device with an interconnect bandwidth."""
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise SpecsimError(f"tensor parallel degree: expected an integer >= 1, got {tp!r}")
    if tp > 1 and dev is not None and dev.interconnect_bytes_per_s is None:
        raise SpecsimError(
            f"device {dev.name!r} has no interconnect_bandwidth_bytes_per_s, so tensor parallel "
            f"degree {tp} cannot be priced (expected tp = 1 or a device file with that field)"
        )
    if tp > 1 and dev is not None and dev.link_bytes_per_s(tp) is None:
        raise SpecsimError(
            f"device {dev.name!r} joins {dev.interconnect_gpus} GPUs over its interconnect and has no "
            f"scale_out_bandwidth_bytes_per_s, so tensor parallel degree {tp} cannot be priced "
            f"(expected tp <= {dev.interconnect_gpus} or a device file with that field)"
        )
    return int(tp)


def check_shardable(m: ModelSpec, tp: int, what: str = "model") -> None:
    """Whole heads per GPU: ``tp`` divides the attention heads, and the KV heads divide by or into ``tp``."""
    if m.heads % tp:
        raise SpecsimError(
            f"tensor parallel degree {tp}: {what} {m.name!r} has {m.heads} attention heads, which "
            f"{tp} GPUs cannot share whole (expected a divisor of {m.heads})"
        )
    if m.kv_heads % tp and tp % m.kv_heads:
        raise SpecsimError(
            f"tensor parallel degree {tp}: {what} {m.name!r} has {m.kv_heads} KV heads (expected tp "
            f"to divide them or be a multiple of them)"
        )


def kv_shards(m: ModelSpec, tp: int) -> int:
    """How many ways the KV cache splits over ``tp`` GPUs: tp, or kv_heads when heads are replicated."""
    return min(int(tp), m.kv_heads)


def allreduces_per_pass(m: ModelSpec) -> int:
    """All-reduces in one forward: one after attention and one after the MLP in every layer."""
    return 2 * m.layers


def allreduce_message_bytes(m: ModelSpec, batch, new) -> np.ndarray:
    """Bytes of one all-reduce message: batch · new · hidden activations."""
    return np.asarray(batch, dtype=float) * np.asarray(new, dtype=float) * m.hidden * ACTIVATION_BYTES


def allreduce_link_bytes(m: ModelSpec, batch, new, tp: int) -> np.ndarray:
    """Bytes each GPU sends over its link in one pass (ring): 2 (tp−1)/tp · message · all-reduces."""
    return 2.0 * (tp - 1) / tp * allreduce_message_bytes(m, batch, new) * allreduces_per_pass(m)


def allreduce_ms(m: ModelSpec, dev: Device, eff, batch, new, tp: int) -> np.ndarray:
    """Time (ms) of a pass's all-reduces; 0 at tp = 1."""
    if tp == 1:
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(new)).shape)
    link = dev.link_bytes_per_s(tp) * eff.interconnect_efficiency
    latency = eff.overhead_ms_per_allreduce * allreduces_per_pass(m)
    return allreduce_link_bytes(m, batch, new, tp) / link * 1e3 + latency


def _shares(m: ModelSpec, gpus: int, split: str) -> tuple[float, float]:
    """(weights, KV cache) shares of ``m`` on its most loaded GPU (1, 1 on one GPU under either split)."""
    if check_split_mode(split) == "layer":
        return layer_share(m, gpus), layer_share(m, gpus)
    return 1.0 / gpus, 1.0 / kv_shards(m, gpus)


def per_gpu_resident_bytes(
    target: ModelSpec,
    draft: ModelSpec,
    batch,
    context,
    tp: int,
    draft_tp: int = 1,
    *,
    draft_context=None,
    shared_weights: bool = False,
    split: str = "tensor",
) -> np.ndarray:
    """Bytes on the most loaded GPU: the target spread over ``tp`` GPUs and the draft over ``draft_tp`` (1:
    whole on GPU 0; None: no draft model), both by ``split`` (tensor: weights over the GPUs, KV over
    :func:`kv_shards`; layer: both by :func:`layer_share`); ``shared_weights``: self-speculation, no draft
    weights."""
    b, ctx = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    d_ctx = ctx if draft_context is None else np.asarray(draft_context, dtype=float)
    (tw, tk) = _shares(target, tp, split)
    t_ctx = target.attended_positions(ctx)  # a sliding-window layer holds at most its window
    target_bytes = target.weight_bytes * tw + b * t_ctx * target.kv_bytes_per_token * tk
    if draft is None:  # a lookup drafting kind: no draft model
        return target_bytes
    (dw, dk) = _shares(draft, draft_tp, split)
    draft_weights = 0.0 if shared_weights else draft.weight_bytes * dw
    return target_bytes + draft_weights + b * draft.attended_positions(d_ctx) * draft.kv_bytes_per_token * dk


def largest_fitting_batch(
    target: ModelSpec,
    draft: ModelSpec,
    memory_bytes: float,
    context,
    tp: int,
    draft_tp: int = 1,
    *,
    draft_context=None,
    shared_weights: bool = False,
    split: str = "tensor",
) -> int | None:
    """Largest batch whose bytes on the most loaded GPU (:func:`per_gpu_resident_bytes`) stay within
    ``memory_bytes``; those bytes are affine in the batch, so it is (memory − bytes at batch 0) // bytes per
    sequence. 0: not even one sequence fits; None: no KV cache, so the batch is not what runs out."""
    kw = dict(draft_context=draft_context, shared_weights=shared_weights, split=split)
    fixed = float(per_gpu_resident_bytes(target, draft, 0, context, tp, draft_tp, **kw))
    per_sequence = float(per_gpu_resident_bytes(target, draft, 1, context, tp, draft_tp, **kw)) - fixed
    if per_sequence <= 0.0:
        return None
    b = max(int((memory_bytes - fixed) // per_sequence), 0)
    # floor division in floats can land one off at an exact boundary: settle it on the same comparison
    while b > 0 and per_gpu_resident_bytes(target, draft, b, context, tp, draft_tp, **kw) > memory_bytes:
        b -= 1
    while per_gpu_resident_bytes(target, draft, b + 1, context, tp, draft_tp, **kw) <= memory_bytes:
        b += 1
    return b
