"""Hardware planning: device catalog, model sizes from HF configs, roofline latency, fits, device ranking.

Carry a profile measured on one machine to devices you do not have: :mod:`~specsim.hardware.roofline`
predicts per-pass latency (ms) from FLOPs, bytes and a device's datasheet peaks;
:mod:`~specsim.hardware.efficiency_fit` fits its efficiencies to measured points;
:mod:`~specsim.hardware.plan` ranks devices by SD throughput.
"""

from specsim.hardware.device import Device, catalog_names, load_device, load_devices
from specsim.hardware.efficiency_fit import fit_efficiency, holdout, points_from_latency, short_context_split
from specsim.hardware.model import ModelSpec, VisionSpec, spec_from_config
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.plan import Plan, PlanRow, plan_hardware, ranking, speedup_crossover_batch
from specsim.hardware.roofline import (
    Efficiency,
    decode_ms,
    forward_bytes,
    forward_flops,
    forward_ms,
    prefill_ms,
    verify_ms,
    vision_ms,
)

__all__ = [
    "Device",
    "Efficiency",
    "MethodTau",
    "ModelSpec",
    "Plan",
    "PlanRow",
    "VisionSpec",
    "catalog_names",
    "decode_ms",
    "fit_efficiency",
    "forward_bytes",
    "forward_flops",
    "forward_ms",
    "holdout",
    "load_device",
    "load_devices",
    "load_model_spec",
    "plan_hardware",
    "points_from_latency",
    "prefill_ms",
    "ranking",
    "short_context_split",
    "spec_from_config",
    "speedup_crossover_batch",
    "verify_ms",
    "vision_ms",
]
