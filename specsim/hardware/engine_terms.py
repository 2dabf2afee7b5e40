"""What a serving engine does around its passes, as named terms (ms) of an SD block and of a target-only step.

block = (γ + e)·Tq + Tv + Σ block terms;  target step = Tp + Σ step terms,
with e·Tq (``extra_draft_forwards``) the draft forwards a block runs beyond its γ drafts. Terms:
``block_fixed``, ``sampling``, ``rejection``, ``lookup``, ``scheduling`` (partly hidden under the GPU's work).
Each term is bounded by its engine's work per token or per sequence; none is a free per-sequence fit.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import numpy as np

from specsim.draft_shapes.ngram_lookup import lookup_ms

BLOCK_TERMS = ("block_fixed", "sampling", "rejection", "lookup", "scheduling")
STEP_TERMS = ("sampling", "scheduling")
# the runtime parameters whose terms grow with the batch (fitted only on batch sweeps of two sources)
BATCH_PARAMS = (
    "sampler_ms_per_token",
    "rejection_ms_per_draft_token",
    "schedule_ms_per_sequence",
    "lookup_ms_per_sequence",
    "overhead_ms_per_sequence_per_block",
)


def _param(rt, name: str) -> float:
    return float(getattr(rt, name, 0.0))


def scheduling_ms(rt, batch, gpu_ms, hidden):
    """CPU scheduling the GPU waits for: the share not ``hidden`` behind the GPU, plus the hidden share's
    excess over ``gpu_ms`` (None: none)."""
    b = np.asarray(batch, dtype=float)
    cpu = _param(rt, "schedule_ms_per_step") + _param(rt, "schedule_ms_per_sequence") * b
    excess = 0.0 if gpu_ms is None else np.maximum(cpu - np.asarray(gpu_ms, dtype=float), 0.0)
    return (1.0 - hidden) * cpu + hidden * excess


def step_terms_ms(rt, batch, gpu_ms) -> dict[str, np.ndarray]:
    """Named work of a target-only step of ``batch`` sequences whose forward takes ``gpu_ms``."""
    b = np.asarray(batch, dtype=float)
    hidden = _param(rt, "schedule_overlap")
    sampling = _param(rt, "sampler_ms_per_token") * b
    return {"sampling": sampling, "scheduling": scheduling_ms(rt, b, gpu_ms, hidden)}


def block_terms_ms(rt, gamma, batch, gpu_ms, *, lookup=False, head=False) -> dict[str, np.ndarray]:
    """Named work of an SD block outside its passes (module docstring): ``gpu_ms`` the block's passes (None:
    long enough to hide the overlapped scheduling); ``lookup``, ``head`` (bools or arrays): the drafting kind
    has no model, or is a head (its overlapped share ``schedule_overlap_sd``; a draft model's or a lookup's
    ``schedule_overlap_sd_model``)."""
    g, b = np.asarray(gamma, dtype=float), np.asarray(batch, dtype=float)
    hidden = np.where(head, _param(rt, "schedule_overlap_sd"), _param(rt, "schedule_overlap_sd_model"))
    fixed = _param(rt, "overhead_ms_per_block") + _param(rt, "overhead_ms_per_sequence_per_block") * b
    return {
        "block_fixed": fixed + 0.0 * g,
        "sampling": _param(rt, "sampler_ms_per_token") * b * (g + 1.0),
        "rejection": _param(rt, "rejection_ms_per_draft_token") * b * g,
        "lookup": np.where(lookup, lookup_ms(rt, b), 0.0) + 0.0 * g,
        "scheduling": scheduling_ms(rt, b, gpu_ms, hidden) + 0.0 * g,
    }


def draft_pass_ms(rt, roof_ms, *, head: bool):
    """A draft forward: its roofline (with the runtime's pass overheads) plus the runtime's per-forward floor
    for the drafting kind (the proposer's own work per step, whatever the batch: a small draft at batch is
    bound by latency, not bandwidth)."""
    floor = np.where(head, _param(rt, "head_floor_ms_per_forward"), _param(rt, "draft_floor_ms_per_forward"))
    return roof_ms + floor
