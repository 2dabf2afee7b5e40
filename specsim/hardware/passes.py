"""Forward passes as a table of runtime-independent terms, priced under any runtime in one vectorised step.

A fit re-prices the same passes thousands of times, so what :func:`specsim.hardware.roofline.forward_ms`
computes that does not depend on the runtime (FLOPs, bytes, score elements, rows, layers, all-reduce
traffic, the device's peaks) is computed once per pass here; :meth:`PassTable.ms` applies the runtime exactly
as ``forward_ms`` does: time = device + host, or roof(host, device) at host_overlap > 0, with
roof(c, m) = max(c, m) + (1 − overlap)·min(c, m). ``tests/test_hardware_validate.py`` checks the two agree.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.parallel import allreduce_link_bytes, allreduces_per_pass
from specsim.hardware.roofline import (
    attention_flops,
    forward_flops,
    kv_elements,
    quantized_layers,
    roof_ms,
    score_elements,
    sharded_bytes,
    sharded_kv_bytes,
    streamed_weights,
)

_FIELDS = (
    "flops",
    "base_bytes",
    "attention_flops",
    "kv_bytes",
    "score_elems",
    "rows",
    "layers",
    "tp",
    "link_bytes",
    "allreduces",
    "quantized_layers",
    "weights",
    "peak_flops_per_s",
    "bandwidth_bytes_per_s",
    "link_bytes_per_s",
    "int32_ops_per_s",
    "kv_elems",
    "masked",
)


@dataclass(frozen=True)
class PassTable:
    """One entry per pass; every array has the same length (per-GPU terms of a ``tp``-way shard)."""

    flops: np.ndarray
    base_bytes: np.ndarray
    attention_flops: np.ndarray  # the attention kernels' share of ``flops``
    kv_bytes: np.ndarray  # the KV cache's share of ``base_bytes``
    score_elems: np.ndarray
    rows: np.ndarray
    layers: np.ndarray
    tp: np.ndarray
    link_bytes: np.ndarray
    allreduces: np.ndarray
    quantized_layers: np.ndarray
    weights: np.ndarray  # streamed weights per GPU (elements)
    peak_flops_per_s: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    link_bytes_per_s: np.ndarray
    int32_ops_per_s: np.ndarray  # NaN where the device file does not give it
    kv_elems: np.ndarray  # K/V elements of the cache after the pass (per GPU): what a concatenation copies
    masked: np.ndarray  # 1 where a sequence brings more than one new position (the pass builds a mask)

    def ms(self, rt) -> np.ndarray:
        """Time (ms) of every pass under runtime ``rt`` (a Runtime or an Efficiency)."""
        compute, memory, a_compute, a_memory, rest, host = self.parts_ms(rt)
        device = roof_ms(compute, memory, rt.overlap) + roof_ms(a_compute, a_memory, rt.overlap) + rest
        return device if rt.host_overlap == 0 else roof_ms(host, device, rt.host_overlap)

    def parts_ms(self, rt) -> tuple[np.ndarray, ...]:
        """(compute ms, memory ms) of the matmuls and the rest, the same of the attention kernels, the
        remaining device ms and the host ms of every pass; :meth:`ms` = :func:`roof_ms` of each pair + the
        rest, the host inside the rest where ``host_overlap`` is 0 (its own part then 0). Each is affine in
        the terms (efficiencies depend on the rows only)."""
        flops_s = self.peak_flops_per_s * rt.compute_efficiency_at(self.rows) / 1e3
        bytes_s = self.bandwidth_bytes_per_s * rt.memory_efficiency(self.rows) / 1e3
        a_bytes = self.kv_bytes + self.score_elems * rt.attention_score_bytes
        overhead = rt.pass_overhead_ms(0) + (rt.pass_overhead_ms(1) - rt.pass_overhead_ms(0)) * self.layers
        sharded = self.tp > 1
        link = np.where(sharded, self.link_bytes_per_s, 1.0) * rt.interconnect_efficiency
        allreduce = np.where(
            sharded, self.link_bytes / link * 1e3 + rt.overhead_ms_per_allreduce * self.allreduces, 0.0
        )
        host = overhead + rt.overhead_ms_per_mask * self.masked
        dequant = rt.dequant_ms_per_layer * self.quantized_layers
        eager = rt.device_ms_per_layer * self.layers + self._kv_concat_ms(rt)
        if rt.host_overlap == 0:
            rest, host = host + dequant + allreduce + self._gemv_rows_ms(rt) + eager, np.zeros_like(host)
        else:
            rest = dequant + allreduce + self._gemv_rows_ms(rt) + eager
        slow = np.where(self.masked > 0, rt.masked_attention_factor, 1.0)
        return (
            (self.flops - self.attention_flops) / flops_s,
            (self.base_bytes - self.kv_bytes) / bytes_s,
            self.attention_flops / flops_s * slow,
            a_bytes / bytes_s * slow,
            rest,
            host,
        )

    def _kv_concat_ms(self, rt) -> np.ndarray:
        """As :func:`specsim.hardware.roofline.kv_concat_ms`."""
        ops = rt.kv_concat_int32_ops_per_element
        if ops == 0:
            return np.zeros_like(self.kv_elems)
        if np.any(np.isnan(self.int32_ops_per_s)):
            raise SpecsimError(
                f"a device has no int32_ops_per_s, and runtime {rt.name!r} prices its cache concatenation by "
                "it (expected the device file to give it)"
            )
        return self.kv_elems * ops / self.int32_ops_per_s * 1e3

    def _gemv_rows_ms(self, rt) -> np.ndarray:
        """As :func:`specsim.hardware.roofline.gemv_rows_ms`."""
        ops = rt.gemv_int32_ops_per_weight_per_row
        multi = (self.rows > 1) & (self.rows <= rt.gemv_max_rows)
        if ops == 0 or not np.any(multi):
            return np.zeros_like(self.rows)
        if np.any(multi & np.isnan(self.int32_ops_per_s)):
            raise SpecsimError(
                f"a device has no int32_ops_per_s, and runtime {rt.name!r} prices passes of 2 to "
                f"{rt.gemv_max_rows:g} rows by it (expected the device file to give it)"
            )
        return np.where(multi, (self.rows - 1.0) * self.weights * ops / self.int32_ops_per_s * 1e3, 0.0)


def pass_terms(
    m: ModelSpec, dev: Device, batch: float, context: float, new: float, tp: int = 1, logits=None
) -> dict:
    """The runtime-independent terms of one pass (same shapes and conventions as ``forward_ms``; ``logits``
    positions default to ``new``, 1 for a prefill)."""
    b, ctx, n = float(batch), float(context), float(new)
    link = dev.link_bytes_per_s(tp) if tp > 1 else None
    return {
        "flops": float(forward_flops(m, b, ctx, n, logits)) / tp,
        "base_bytes": float(sharded_bytes(m, b, ctx, n, logits, tp=tp)),
        "attention_flops": float(attention_flops(m, b, ctx, n)) / tp,
        "kv_bytes": float(sharded_kv_bytes(m, b, ctx, n, tp)),
        "score_elems": float(score_elements(m, b, ctx, n, tp)),
        "rows": b * n,
        "layers": float(m.layers),
        "tp": float(tp),
        "link_bytes": float(allreduce_link_bytes(m, b, n, tp)) if tp > 1 else 0.0,
        "allreduces": float(allreduces_per_pass(m)),
        "quantized_layers": float(quantized_layers(m)),
        "weights": float(streamed_weights(m, b * n)) / tp,
        "peak_flops_per_s": dev.peak_flops_per_s,
        "bandwidth_bytes_per_s": dev.memory_bandwidth_bytes_per_s,
        "link_bytes_per_s": float(link) if link else 1.0,
        "int32_ops_per_s": float("nan") if dev.int32_ops_per_s is None else dev.int32_ops_per_s,
        "kv_elems": float(kv_elements(m, b, ctx, n, tp)),
        "masked": float(n > 1),
    }


def pass_table(entries: list[dict]) -> PassTable:
    """Stack :func:`pass_terms` dicts into a PassTable."""
    return PassTable(**{k: np.array([e[k] for e in entries], dtype=float) for k in _FIELDS})
