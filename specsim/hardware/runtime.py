"""Runtimes: the software that runs a forward pass, as one JSON file each, every number with its source.

A runtime sets what the roofline alone cannot see (ARCHITECTURE.md, "Runtime"): fixed overheads per forward,
layer, block and all-reduce, extra draft forwards per block, memory and compute efficiencies by the rows a
pass carries, materialised attention scores, dequantisation, host against device, and the multi-GPU split.
The shipped files are ``specsim/hardware/runtimes/*.json``; users pass their own by path. Each number is
``{"value": ..., "source": "..."}``; ``fit`` lists the parameters ``specsim validate`` refits.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.parallel import check_split_mode
from specsim.jsonio import (
    check_object,
    parse_file_data,
    read_json,
    shipped_names,
    shipped_or_user_file,
    sourced,
)

SCHEMA_VERSION = 2  # 2: gemv_int32_ops_per_weight_per_row replaced gemv_time_fraction_per_row
RUNTIMES_DIR = Path(__file__).parent / "runtimes"
# name -> (lowest, highest) allowed value
PARAM_BOUNDS = {
    "overhead_ms_per_forward": (0.0, 1e4),
    "overhead_ms_per_layer": (0.0, 1e3),
    "layer_overhead_share": (0.0, 1.0),
    "overhead_ms_per_block": (0.0, 1e4),
    "overhead_ms_per_sequence_per_block": (0.0, 1e2),
    "overhead_ms_per_allreduce": (0.0, 1e2),
    # Up to 8: on a CPU the "peaks" are a quick numpy measurement on a possibly busy machine, a proxy that a
    # fitted fraction may exceed; datasheet GPU fits stay well below 1.
    "memory_efficiency_gemv": (1e-4, 8.0),
    "memory_efficiency_gemm": (1e-4, 8.0),
    "gemv_max_rows": (1.0, 64.0),
    "gemv_int32_ops_per_weight_per_row": (0.0, 64.0),
    "compute_efficiency": (1e-4, 8.0),
    "compute_rows_half": (0.0, 1e4),
    "attention_score_bytes": (0.0, 64.0),
    "overlap": (0.0, 1.0),
    "interconnect_efficiency": (1e-3, 1.0),
    "dequant_ms_per_layer": (0.0, 1e2),
    "extra_draft_forwards_per_block": (0.0, 4.0),
    "host_overlap": (0.0, 1.0),
    "overhead_ms_per_mask": (0.0, 1e2),
    "masked_attention_factor": (1.0, 16.0),
    "device_ms_per_layer": (0.0, 1e2),
    "kv_concat_int32_ops_per_element": (0.0, 1e4),
    # the engine around its passes (:mod:`specsim.hardware.engine_terms`)
    "sampler_ms_per_token": (0.0, 1.0),
    "rejection_ms_per_draft_token": (0.0, 1.0),
    "schedule_ms_per_step": (0.0, 100.0),
    "schedule_ms_per_sequence": (0.0, 1.0),
    "schedule_overlap": (0.0, 1.0),
    "schedule_overlap_sd": (0.0, 1.0),
    "schedule_overlap_sd_model": (0.0, 1.0),
    "draft_floor_ms_per_forward": (0.0, 100.0),
    "head_floor_ms_per_forward": (0.0, 100.0),
    "lookup_ms_per_sequence": (0.0, 10.0),
}
PARAMS = tuple(PARAM_BOUNDS)
_KEYS = {
    "schema_version",
    "name",
    "display_name",
    "kind",
    "split_mode",
    "draft_split",
    "defaults_from",
    "notes",
    "fit",
    *PARAMS,
}
# Written for a parameter that a runtime file leaves out (it keeps the dataclass default).
_UNSET_SOURCES = {
    "gemv_max_rows": "default: only a 1-row pass runs the matrix-vector (GEMV) kernels",
    "gemv_int32_ops_per_weight_per_row": "default: not used (gemv_max_rows is 1)",
    "overhead_ms_per_sequence_per_block": "default: SD bookkeeping taken as independent of the batch",
    "extra_draft_forwards_per_block": "default: γ draft forwards per block (the first also takes the "
    "target's new token)",
    "sampler_ms_per_token": "default: sampling taken as free (its logits are in the pass's bytes)",
    "rejection_ms_per_draft_token": "default: rejection sampling taken as free",
    "schedule_ms_per_step": "default: CPU scheduling taken as free",
    "schedule_ms_per_sequence": "default: CPU scheduling taken as free",
    "schedule_overlap": "default: CPU scheduling runs between the GPU's passes (not overlapped)",
    "schedule_overlap_sd": "default: with a draft head, CPU scheduling runs between the GPU's passes",
    "schedule_overlap_sd_model": "default: with a draft model or lookup, CPU scheduling runs between passes",
    "draft_floor_ms_per_forward": "default: a draft model's forward costs its roofline and overheads",
    "head_floor_ms_per_forward": "default: a draft head's forward costs its roofline and overheads",
    "lookup_ms_per_sequence": "default: an n-gram lookup taken as free",
    "host_overlap": "default: the per-forward and per-layer overheads add to the device time",
    "overhead_ms_per_mask": "default: no host time for a multi-position pass's mask",
    "masked_attention_factor": "default: a masked pass's attention runs at its roofline",
    "device_ms_per_layer": "default: no device time per layer beyond the roofline",
    "kv_concat_int32_ops_per_element": "default: new K/V written in place (no cache concatenation)",
    "layer_overhead_share": "default: every decoder layer pays overhead_ms_per_layer",
}
# The host-against-device fields (schema 2 takes them or leaves them out) and the value that leaves them off.
_HOST_DEVICE = {
    "host_overlap": 0.0,
    "overhead_ms_per_mask": 0.0,
    "masked_attention_factor": 1.0,
    "device_ms_per_layer": 0.0,
    "kv_concat_int32_ops_per_element": 0.0,
}
# Fields a runtime file may leave out, written only where set: the value that leaves them off.
_OPTIONAL = {**_HOST_DEVICE, "layer_overhead_share": 1.0}
_SPLIT_MODE_SOURCE = "default: Megatron tensor parallel (vLLM, SGLang, gpt-fast)"
DRAFT_SPLITS = ("target", "single")  # the draft over the target's GPUs, or whole on one
_DRAFT_SPLIT_SOURCE = "default: the draft runs whole on one GPU"


# The runtime a plan assumes when none is named: CUDA graphs on GPUs (vLLM), PyTorch eager on CPUs.
DEFAULT_RUNTIMES = {"gpu": "vllm", "cpu": "torch-cpu"}


def _in_bounds(value, lo: float, hi: float) -> bool:
    """A real number (not a bool), finite, in [lo, hi]; math, not numpy: every fit step builds runtimes."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and lo <= value <= hi


@dataclass(frozen=True)
class Runtime:
    """Per-pass overheads (ms) and row/context-dependent efficiencies of one serving runtime."""

    name: str
    display_name: str = ""
    kind: str = "gpu"  # "gpu" | "cpu": which devices it runs on
    overhead_ms_per_forward: float = 0.0
    overhead_ms_per_layer: float = 0.0
    layer_overhead_share: float = 1.0  # share of overhead_ms_per_layer paid per layer (0: one graph a step)
    overhead_ms_per_block: float = 0.0
    overhead_ms_per_sequence_per_block: float = 0.0
    overhead_ms_per_allreduce: float = 0.0
    memory_efficiency_gemv: float = 0.8
    memory_efficiency_gemm: float = 0.8
    gemv_max_rows: float = 1.0
    gemv_int32_ops_per_weight_per_row: float = 0.0
    compute_efficiency: float = 0.6
    compute_rows_half: float = 0.0
    attention_score_bytes: float = 0.0
    overlap: float = 1.0
    interconnect_efficiency: float = 0.7
    dequant_ms_per_layer: float = 0.0
    extra_draft_forwards_per_block: float = 0.0
    host_overlap: float = 0.0
    overhead_ms_per_mask: float = 0.0
    masked_attention_factor: float = 1.0
    device_ms_per_layer: float = 0.0
    kv_concat_int32_ops_per_element: float = 0.0
    sampler_ms_per_token: float = 0.0
    rejection_ms_per_draft_token: float = 0.0
    schedule_ms_per_step: float = 0.0
    schedule_ms_per_sequence: float = 0.0
    schedule_overlap: float = 0.0  # share of a target-only step's CPU scheduling hidden behind its forward
    schedule_overlap_sd: float = 0.0  # the same in an SD block drafting with a head (EAGLE, MTP)
    schedule_overlap_sd_model: float = 0.0  # ... with a separate draft model or a host lookup
    draft_floor_ms_per_forward: float = 0.0
    head_floor_ms_per_forward: float = 0.0
    lookup_ms_per_sequence: float = 0.0
    split_mode: str = "tensor"  # one of specsim.hardware.parallel.SPLIT_MODES
    split_mode_source: str = _SPLIT_MODE_SOURCE
    draft_split: str = "single"  # one of DRAFT_SPLITS: how the runtime places the draft under --tp
    draft_split_source: str = _DRAFT_SPLIT_SOURCE
    # a runtime whose fit (on the same rows) gives this one's defaults where no source of its own covers it
    defaults_from: str = ""
    defaults_from_source: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    fit: tuple[str, ...] = ()
    defaults: dict[str, float] = field(default_factory=dict)  # cited values of the ``fit`` parameters
    # parameter -> the parameter whose value it always takes (``"same_as"`` in the file): a tie holds through
    # fits and copies, so a fitted efficiency moves the one tied to it
    ties: dict[str, str] = field(default_factory=dict)
    default_sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_split_mode(self.split_mode, "runtime.split_mode.value")
        if self.draft_split not in DRAFT_SPLITS:
            raise SpecsimError(
                f"runtime.draft_split.value: expected one of {list(DRAFT_SPLITS)}, got {self.draft_split!r}"
            )
        for key, to in self.ties.items():
            if (
                not isinstance(to, str)
                or to == key
                or to not in PARAM_BOUNDS
                or to in self.ties
                or key in self.fit
            ):
                raise SpecsimError(
                    f"runtime.{key}.same_as: expected another parameter that is neither tied nor "
                    f"{key!r} fitted on its own, got {to!r}"
                )
            object.__setattr__(self, key, getattr(self, to))
        for key, (lo, hi) in PARAM_BOUNDS.items():
            value = getattr(self, key)
            if not _in_bounds(value, lo, hi):
                raise SpecsimError(f"runtime.{key}: expected a number in [{lo:g}, {hi:g}], got {value!r}")
        for key, value in self.defaults.items():
            lo, hi = PARAM_BOUNDS[key]
            if not _in_bounds(value, lo, hi):
                raise SpecsimError(
                    f"runtime.{key}.default: expected a number in [{lo:g}, {hi:g}], got {value!r}"
                )

    # The interface the roofline uses (Efficiency has the same methods).
    def memory_efficiency(self, rows) -> np.ndarray:
        """Fraction of peak bandwidth reached by a pass over ``rows`` rows: GEMV up to ``gemv_max_rows``, GEMM
        above (the GEMV rows' own arithmetic is :func:`specsim.hardware.roofline.gemv_rows_ms`)."""
        r = np.asarray(rows, dtype=float)
        return np.where(
            r <= np.maximum(self.gemv_max_rows, 1.0), self.memory_efficiency_gemv, self.memory_efficiency_gemm
        )

    def compute_efficiency_at(self, rows) -> np.ndarray:
        """Fraction of peak FLOP/s: compute_efficiency · r / (r + compute_rows_half)."""
        r = np.asarray(rows, dtype=float)
        return self.compute_efficiency * r / (r + self.compute_rows_half)

    def pass_overhead_ms(self, layers: int) -> float:
        per_layer = self.overhead_ms_per_layer * self.layer_overhead_share
        return self.overhead_ms_per_forward + per_layer * layers

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "name": self.name,
            "display_name": self.display_name or self.name,
            "kind": self.kind,
        }
        for key in PARAMS:
            if key in _OPTIONAL and key not in self.sources and getattr(self, key) == _OPTIONAL[key]:
                continue  # a runtime that leaves host against device alone writes what it wrote before
            out[key] = {
                "value": float(getattr(self, key)),
                "source": self.sources.get(key) or _UNSET_SOURCES.get(key, ""),
            }
            if key in self.ties:
                out[key]["same_as"] = self.ties[key]
            if key in self.defaults:
                out[key]["default"] = {
                    "value": float(self.defaults[key]),
                    "source": self.default_sources.get(key, ""),
                }
        out["split_mode"] = {"value": self.split_mode, "source": self.split_mode_source}
        out["draft_split"] = {"value": self.draft_split, "source": self.draft_split_source}
        if self.defaults_from:
            out["defaults_from"] = {"value": self.defaults_from, "source": self.defaults_from_source}
        out["fit"] = list(self.fit)
        if self.notes:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = "runtime") -> Runtime:
        """Validate a runtime dict; every error names the field and the bad value."""
        if isinstance(d, dict) and d.get("schema_version") == 1 and type(d["schema_version"]) is int:
            raise SpecsimError(
                f"{where}.schema_version: expected {SCHEMA_VERSION}, got 1 (version 2 prices the rows "
                "of a multi-row GEMV pass by gemv_int32_ops_per_weight_per_row, which replaced "
                "gemv_time_fraction_per_row: set it, or 0 where gemv_max_rows is 1)"
            )
        check_object(d, _KEYS, where, schema_version=SCHEMA_VERSION)
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise SpecsimError(f"{where}.name: expected a non-empty string, got {name!r}")
        kind = d.get("kind", "gpu")
        if kind not in ("gpu", "cpu"):
            raise SpecsimError(f"{where}.kind: expected 'gpu' or 'cpu', got {kind!r}")
        values, sources, defaults, default_sources, ties = {}, {}, {}, {}, {}
        for key in PARAMS:
            if key not in d:
                continue
            values[key], sources[key] = _number(d[key], f"{where}.{key}")
            if isinstance(d[key], dict) and "same_as" in d[key]:
                ties[key] = d[key]["same_as"]
            if isinstance(d[key], dict) and "default" in d[key]:
                defaults[key], default_sources[key] = _number(d[key]["default"], f"{where}.{key}.default")
        if "split_mode" in d:
            values["split_mode"], values["split_mode_source"] = sourced(
                d["split_mode"], f"{where}.split_mode", "where the runtime documents its multi-GPU split"
            )
        if "draft_split" in d:
            values["draft_split"], values["draft_split_source"] = sourced(
                d["draft_split"], f"{where}.draft_split", "where the runtime documents the draft's GPUs"
            )
        if "defaults_from" in d:
            values["defaults_from"], values["defaults_from_source"] = sourced(
                d["defaults_from"], f"{where}.defaults_from", "why the other runtime's fit stands in"
            )
        fit = d.get("fit", [])
        if not isinstance(fit, list) or any(k not in PARAMS for k in fit):
            raise SpecsimError(
                f"{where}.fit: expected a list of parameter names from {list(PARAMS)}, got {fit!r}"
            )
        missing = [k for k in fit if k not in defaults]
        if missing:
            raise SpecsimError(
                f"{where}.{missing[0]}.default: missing (every parameter in 'fit' needs the cited "
                "value leave-one-source-out falls back to)"
            )
        try:
            return cls(
                name=name,
                display_name=str(d.get("display_name") or name),
                kind=kind,
                sources=sources,
                fit=tuple(fit),
                notes=str(d.get("notes", "")),
                defaults=defaults,
                default_sources=default_sources,
                ties=ties,
                **values,
            )
        except SpecsimError as err:
            raise SpecsimError(str(err).replace("runtime.", f"{where}.", 1)) from None

    def with_values(self, source: str, **values: float) -> Runtime:
        """A copy with some parameters replaced and their source set to ``source``."""
        return replace(self, sources={**self.sources, **{k: source for k in values}}, **values)

    def at_defaults(self) -> Runtime:
        """A copy whose ``fit`` parameters hold their cited defaults (nothing fitted on the published set)."""
        return replace(self, sources={**self.sources, **self.default_sources}, **self.defaults)


def _number(q: Any, where: str) -> tuple[Any, str]:
    """(value, source) of a ``{"value": ..., "source": "..."}`` entry; errors name the field."""
    return sourced(q, where, "the paper, repository, datasheet or fit command this number comes from")


def is_shipped(rt) -> bool:
    """Whether ``rt`` is the shipped runtime file of its name, unchanged: a user's file of that name, or one
    fitted on a profile, is not, and the published rows never scored it."""
    return isinstance(rt, Runtime) and rt.name in runtime_names() and rt == load_runtime(rt.name)


def runtime_names() -> list[str]:
    """Names of the shipped runtimes (file stems)."""
    return shipped_names(RUNTIMES_DIR)


def load_runtime(name_or_path: str) -> Runtime:
    """A shipped runtime name (``hf-eager``, ``vllm``, ``llama.cpp``) or a path to a runtime JSON file."""
    path = shipped_or_user_file(name_or_path, RUNTIMES_DIR, "runtime")
    return parse_file_data(read_json(path, "runtime file"), path, "runtime", Runtime.from_json)
