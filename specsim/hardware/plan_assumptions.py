"""The assumptions a hardware plan states: what its speedup covers, how memory is counted, how the models
are split over GPUs, the drafting kind and the runtimes."""

from __future__ import annotations

from specsim.draft_kinds.registry import draft_kind as kind_named
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.plan_notes import image_tokens_note
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION
from specsim.predict.tau_at_gamma import extrapolated


def _draft_placement(par, effs: dict) -> str:
    """How the draft is placed over the target's GPUs (as given, or as each runtime places it)."""
    if par.draft_sharded is not None:
        return "split the same way" if par.draft_sharded else "whole on GPU 0"
    sharded = {par.draft_split_for(e) for e in effs.values()}
    if sharded == {True}:
        return "split the same way (as the runtime shards it)"
    return "whole on GPU 0 (as the runtime places it)" if sharded == {False} else "as each runtime places it"


def plan_assumptions(target: ModelSpec, draft, methods, effs: dict, par, kind_name: str) -> tuple[str, ...]:
    """The plan's assumption lines (deduplicated, in order)."""
    kind = kind_named(kind_name)
    placed = _draft_placement(par, effs)
    draft_bytes = "no draft model" if draft is None else f"{draft.dtype_bytes:g} (draft)"
    out = [
        "decode phase: speedup = tau/(gamma*c + v + o), c = Tq/T, v = Tv/T, o = the named overhead terms "
        "(extra draft forwards, the engine's block terms) over T, T = one target-only step (its forward plus "
        "the engine's sampling and exposed scheduling); prefill, vision encoding and draft set-up excluded",
        f"drafting kind {kind.name}: {kind.description}"
        + (
            "; its params above are the head as it runs, on the target's embedding (`hardware --list` counts "
            "the checkpoint's)"
            if kind.is_head and draft is not None
            else ""
        ),
        f"weights {target.dtype_bytes:g} (target) / {draft_bytes} bytes per parameter, KV cache "
        f"{target.kv_element_bytes:g} bytes per element; device peaks are datasheet dense BF16/FP16 "
        "(measured FP32 for the CPU)",
        "tau does not depend on batch size or context (taken from the profile); a batch verifies in lockstep "
        "and emits tau tokens per sequence per block",
        "'fits' = per GPU: "
        + (
            "the most loaded GPU's share of the target's layers (weights and KV)"
            if par.split == "layer"
            else "target weights over tp and KV over tp (over the KV heads when tp exceeds them)"
        )
        + ("" if draft is None else f", the draft {placed}")
        + f", KV for batch x (context + gamma_max + 1) <= {USABLE_MEMORY_FRACTION:.0%} of device memory",
        f"context = tokens already in the KV cache ({image_tokens_note(target)})",
    ]
    out += _architecture_notes(target)
    for mt in methods:
        extra = sorted({s for s in mt.tau_source if extrapolated(s)})
        if extra:
            out.append(
                f"method {mt.method} ({mt.scenario}): tau at other gamma is an i.i.d. extrapolation "
                f"({', '.join(extra)}), not measured"
            )
    if par.tp > 1 and par.split == "layer":
        out.append(
            f"layer split over {par.tp} GPUs (whole layers per GPU, run one GPU after another): a pass costs "
            f"what it costs on one GPU and only memory divides; draft {placed}; tokens/s are per replica"
        )
    elif par.tp > 1:
        out.append(
            f"tensor parallel over {par.tp} GPUs (Megatron layout, 2 all-reduces per layer over the device's "
            f"interconnect); draft {placed}; tokens/s are per replica"
        )
    for eff in effs.values():  # one line per runtime, not per device (each device has its own copy)
        named = hasattr(eff, "fit")
        out.append(f"runtime {eff.name}: {eff.display_name}" if named else f"efficiencies: {eff.source}")
        if eff.extra_draft_forwards_per_block > 0 and draft is not None:
            out.append(
                f"draft: γ + {eff.extra_draft_forwards_per_block:g} forwards per block under "
                f"{eff.display_name} (extra_draft_forwards_per_block)"
            )
    return tuple(dict.fromkeys(out))


def _architecture_notes(m: ModelSpec) -> list[str]:
    """What the target's architecture changes in the pricing: routed experts, latent attention, windows."""
    out = []
    if m.moe is not None:
        out.append(
            f"mixture of experts: a token multiplies {m.moe.per_token} of {m.moe.experts} experts; a pass of "
            "B·new tokens reads E·(1 − (1 − k/E)^(B·new)) of them (routes taken as independent and uniform), "
            "so verification reads more experts than the decode step it replaces; against gpt-fast's "
            "Mixtral 8x7B decode steps this roofline runs fast (see `specsim validate`)"
        )
    if m.moe is not None and m.moe.expert_parallel:
        out.append(
            "expert parallelism: each GPU holds its share of the experts whole, and a pass waits for the GPU "
            "whose experts its tokens touch most (the expected maximum over the GPUs)"
        )
    if m.mla is not None:
        out.append(
            f"latent attention: the cache holds {m.mla.cache_elements} elements per layer and position, one "
            "copy for all heads (replicated over tensor-parallel GPUs); decoding runs absorbed"
        )
    if m.window_layers:
        out.append(
            f"sliding window: {m.window_layers} of {m.layers} layers read and hold at most the last "
            f"{m.window} positions"
        )
    return out


def scale_out_notes(devices: list[Device], par) -> tuple[str, ...]:
    """One line per device whose tensor-parallel ring leaves the GPUs its interconnect joins."""
    if par.split != "tensor":
        return ()
    return tuple(
        f"{d.name}: {par.tp} GPUs span {-(-par.tp // d.interconnect_gpus)} groups of {d.interconnect_gpus} "
        f"joined by {d.interconnect_link or 'the interconnect'}; all-reduces run at the scale-out link's "
        f"bandwidth ({d.scale_out_link or 'scale-out'}), their latency at the runtime's per-all-reduce "
        "figure for one group (under-estimated)"
        for d in devices
        if d.interconnect_gpus is not None and par.tp > d.interconnect_gpus
    )
