"""Assemble measured timings into a profile's latency section: the cost model
(:mod:`specsim.profile_format.cost_model`), the schema-1 tables read off it, the host check, provenance, and
the
atomic write into a profile."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from calibrate.measure.noise_check import worst_pass
from calibrate.measure.request_grid_sweep import (
    SENTINEL_END,
    SENTINEL_START,
    adaptive_prefix,
    grid_key,
    overhead_prefix,
)
from calibrate.measure.sampling_sweep import sampling_cost
from calibrate.models.loaded_model import LoadedModel
from calibrate.run.timing import Timing, summarize
from specsim.errors import SpecsimError
from specsim.hardware.host import cpu_device_name
from specsim.profile_format import Curve, LatencySection, Profile, Provenance
from specsim.profile_format.cost_grid import make_grid
from specsim.profile_format.cost_model import CostModel, HostCheck, OverheadGrid, TreeCosts
from specsim.profile_format.overhead_grid import TreeOverheadFit
from specsim.profiles import load_profile, save_profile

# A sentinel that moved by more than this (or twice its own half-width) between start and end means
# something else competed for the machine while it was measured.
CONTENDED_THRESHOLD = 0.03


def _curve(points: list[tuple[float, Timing]]) -> Curve:
    points = sorted(points, key=lambda p: p[0])
    return Curve(
        x=tuple(float(x) for x, _ in points),
        ms=tuple(t.median_ms for _, t in points),
        halfwidth_ms=tuple(t.halfwidth_ms for _, t in points),
        n=tuple(t.n for _, t in points),
    )


def _grid(timings: dict[str, Timing], name: str, rows, contexts, batches):
    missing = [
        grid_key(name, r, c, b)
        for r in rows
        for c in contexts
        for b in batches
        if grid_key(name, r, c, b) not in timings
    ]
    if missing:
        raise SpecsimError(f"latency: no measurement for {missing[0]} (expected every point of the plan)")
    pts = [[[timings[grid_key(name, r, c, b)] for b in batches] for c in contexts] for r in rows]
    return make_grid(
        rows,
        contexts,
        batches,
        [[[t.median_ms for t in cell] for cell in row] for row in pts],
        [[[t.halfwidth_ms for t in cell] for cell in row] for row in pts],
        [[[t.n for t in cell] for cell in row] for row in pts],
    )


def _pooled(timings: dict[str, Timing], prefix: str) -> float:
    """Median of every sample whose key starts with ``prefix`` (the overhead pooled over contexts)."""
    samples = [x for k, t in timings.items() if k.startswith(prefix) for x in t.samples_ms]
    if not samples:
        raise SpecsimError(f"latency: no overhead samples for {prefix!r}")
    return _ms_or_zero(summarize(samples).median_ms)


def _ms_or_zero(ms: float) -> float:
    """A difference of timers: float noise around 0 (either sign, below a nanosecond) is 0."""
    return ms if ms >= 1e-6 else 0.0


def _median(timings: dict[str, Timing], key: str) -> float:
    """Median of one overhead point (exact key: context 13 must not pool context 130)."""
    if key not in timings:
        raise SpecsimError(f"latency: no overhead samples for {key!r}")
    return _ms_or_zero(timings[key].median_ms)


def _overhead_grid(timings: dict[str, Timing], prefix, sizes, batches, contexts) -> OverheadGrid:
    """The engine's overhead per block by γ (or tree size) × draft batch, pooled and by context, from the
    sweep's keys ``prefix(size, batch) + context``."""
    pooled = [[_pooled(timings, prefix(n, b)) for b in batches] for n in sizes]
    by_ctx = [[[_median(timings, f"{prefix(n, b)}{c}") for b in batches] for c in contexts] for n in sizes]
    return OverheadGrid(
        tuple(sizes),
        tuple(batches),
        tuple(tuple(r) for r in pooled),
        tuple(float(c) for c in contexts),
        tuple(tuple(tuple(r) for r in m) for m in by_ctx),
    )


def host_check(timings: dict[str, Timing], context: int) -> HostCheck | None:
    """Compare the sentinel (target-only steps at ``context``) timed at the start and at the end."""
    start, end = timings.get(SENTINEL_START), timings.get(SENTINEL_END)
    if start is None or end is None:
        return None
    threshold = max(CONTENDED_THRESHOLD, 2 * max(start.rel_halfwidth, end.rel_halfwidth))
    change = end.median_ms / start.median_ms - 1
    contended = abs(change) > threshold
    note = (
        f"the sentinel (target-only step at context {context}) took {start.median_ms:.3f} ms at the start "
        f"and {end.median_ms:.3f} ms at the end ({change:+.1%}; threshold {threshold:.1%})"
    )
    if contended:
        note = "host contended while measuring: " + note + "; re-measure on a quiet machine"
    return HostCheck(
        sentinel=f"target_decode.r=1.c={context}.b=1",
        start_ms=start.median_ms,
        end_ms=end.median_ms,
        threshold=threshold,
        contended=contended,
        note=note,
    )


def tree_costs(timings: dict[str, Timing], plan) -> TreeCosts | None:
    """The token-tree grids of a sweep with trees (see :mod:`calibrate.measure.tree_grid_sweep` for the keys);
    None
    without."""
    from calibrate.measure import tree_grid_sweep as T
    from specsim.draft_shapes.trees import parse_tree

    if not getattr(plan, "trees", ()):
        return None
    trees = [parse_tree(t) for t in plan.trees]
    ctx, batches = plan.contexts_tokens, plan.batch_sizes
    sizes = tuple(sorted({t.n for t in trees}))
    rows = T.level_rows(trees)
    grid = _overhead_grid(timings, T.overhead_prefix, sizes, batches, ctx)
    return TreeCosts(
        verify=_grid(timings, "tree_verify", tuple(n + 1 for n in sizes), ctx, (1,)),
        draft=_grid(timings, "tree_draft", rows, tuple(c + 1 for c in ctx), batches) if rows else None,
        overhead_ms_per_block=grid,
        trees=tuple(plan.trees),
        overhead_fit=TreeOverheadFit.fit(
            sizes,
            [np.mean([t.depth for t in trees if t.n == n]) for n in sizes],
            grid.ms_by_context,
            batches,
            ctx,
        ),
    )


def cost_model(timings: dict[str, Timing], plan) -> CostModel:
    """The :class:`CostModel` of a finished sweep (see :mod:`calibrate.measure.request_grid_sweep` for the
    keys)."""
    ctx, gammas, batches = plan.contexts_tokens, plan.gammas, plan.batch_sizes
    return CostModel(
        target_decode=_grid(timings, "target_decode", (1,), ctx, (1,)),
        target_verify=_grid(timings, "target_verify", tuple(g + 1 for g in gammas), ctx, (1,)),
        draft_first=_grid(timings, "draft_first", (1, 2), ctx, batches),
        draft_next=_grid(timings, "draft_next", (1,), tuple(c + 1 for c in ctx), batches),
        target_prefill=_grid(timings, "target_prefill", plan.prefill_tokens, (0,), (1,)),
        draft_prefill=_grid(timings, "draft_prefill", plan.prefill_tokens, (0,), batches),
        overhead_ms_per_block=_overhead_grid(timings, overhead_prefix, gammas, batches, ctx),
        overhead_ms_per_target_step=_pooled(timings, overhead_prefix(0, 1)),
        adaptive_ms_per_block=(
            _overhead_grid(timings, adaptive_prefix, gammas, batches, ctx)
            if any(k.startswith(adaptive_prefix(gammas[0], batches[0])) for k in timings)
            else None
        ),
        host_check=host_check(timings, ctx[0]),
        tree=tree_costs(timings, plan),
        sampling=sampling_cost(timings, gammas),
    )


def latency_section(timings: dict[str, Timing], plan, provenance=None) -> LatencySection:
    """The latency section: the cost model, and the schema-1 tables read off it (Tp and Tq by context,
    Tv(γ) and Tq by draft batch at the verify context, prefill by prompt tokens, vision, captioner)."""
    v = plan.verify_context_tokens

    def curve(pairs: list[tuple[float, str]]) -> Curve | None:
        pts = [(x, timings[k]) for x, k in pairs if k in timings]
        return _curve(pts) if pts else None

    vision = {role: timings.get(f"{role}.vision.images=1") for role in ("target", "draft")}
    extra = {role: _extra_image_ms(timings, role) for role in ("target", "draft")}
    caption = timings.get(f"captioner.caption.tokens={plan.caption_tokens}")
    return LatencySection(
        target_decode_ms_by_context=curve(
            [(c, grid_key("target_decode", 1, c, 1)) for c in plan.contexts_tokens]
        ),
        draft_decode_ms_by_context=curve(
            [(c, grid_key("draft_first", 1, c, 1)) for c in plan.contexts_tokens]
        ),
        target_verify_ms_by_gamma=curve([(g, grid_key("target_verify", g + 1, v, 1)) for g in plan.gammas]),
        target_prefill_ms_by_tokens=curve(
            [(n, grid_key("target_prefill", n, 0, 1)) for n in plan.prefill_tokens]
        ),
        draft_prefill_ms_by_tokens=curve(
            [(n, grid_key("draft_prefill", n, 0, 1)) for n in plan.prefill_tokens]
        ),
        draft_decode_ms_by_batch=curve([(b, grid_key("draft_first", 1, v, b)) for b in plan.batch_sizes]),
        verify_context_tokens=v,
        vision_encoder_ms_per_image=None if vision["target"] is None else vision["target"].median_ms,
        draft_vision_encoder_ms_per_image=None if vision["draft"] is None else vision["draft"].median_ms,
        vision_encoder_ms_per_extra_image=extra["target"],
        draft_vision_encoder_ms_per_extra_image=extra["draft"],
        captioner_ms_per_image=None if caption is None else caption.median_ms,
        provenance=provenance,
        cost_model=cost_model(timings, plan),
    )


def _extra_image_ms(timings: dict[str, Timing], role: str) -> float | None:
    """What each image after the first adds to one vision call: the slope between the one-image call and
    the largest one measured (None with one size only)."""
    sizes = sorted(int(k.rsplit("=", 1)[1]) for k in timings if k.startswith(f"{role}.vision.images="))
    if len(sizes) < 2 or sizes[0] != 1:
        return None
    one, most = (
        timings[f"{role}.vision.images=1"].median_ms,
        timings[f"{role}.vision.images={sizes[-1]}"].median_ms,
    )
    return max((most - one) / (sizes[-1] - 1), 0.0)


# --------------------------------------------------------------------------- provenance and output
def device_name(device: str) -> str:
    """Human-readable device: the GPU name, or the CPU model name with its logical CPU count."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return cpu_device_name()


def measurement_provenance(models: dict[str, LoadedModel], *, notes: str = "") -> Provenance:
    """Provenance of a latency run: device, dtype, threads, software versions, real/random weights, and the
    module -> device placement of a model spread with a device map (in ``notes``)."""
    import datetime
    import platform

    import torch
    import transformers

    import specsim

    target, draft = models["target"], models["draft"]
    weights = {m.weights for m in models.values()}
    mixed = (
        "" if len(weights) == 1 else "weights: " + ", ".join(f"{r} {m.weights}" for r, m in models.items())
    )
    captioner = f"captioner: {models['captioner'].name}" if "captioner" in models else ""
    # A split model's latency includes transfers between devices: say where each part ran.
    placed = "; ".join(f"{role} placement: {m.placement}" for role, m in models.items() if m.placement)
    return Provenance(
        target=target.name,
        draft=draft.name,
        device=device_name(target.device),
        dtype=target.dtype,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        source="measured",
        software={
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "specsim": specsim.__version__,
        }
        | ({"cuda": str(torch.version.cuda)} if str(target.device).startswith("cuda") else {}),
        weights="random" if "random" in weights else "real",
        threads=torch.get_num_threads(),
        notes="; ".join(x for x in (mixed, captioner, placed, notes) if x),
    )


def save_latency_profile(
    out: str | Path, section: LatencySection, provenance: Provenance, *, name: str = "", description: str = ""
) -> Path:
    """Write ``section`` into the profile at ``out``: a new profile, or the latency of an existing one
    (its acceptance and checks are kept; a warning is printed if its models differ)."""
    from dataclasses import replace

    out = Path(out)
    if out.is_file():
        profile = load_profile(str(out))
        if (profile.provenance.target, profile.provenance.draft) != (provenance.target, provenance.draft):
            print(
                f"note: {out} was for target {profile.provenance.target!r} / "
                f"draft {profile.provenance.draft!r}; "
                f"its latency section now comes from {provenance.target!r} / {provenance.draft!r}",
                file=sys.stderr,
            )
        profile = replace(profile, latency=section)
    else:
        profile = Profile(
            provenance=provenance, latency=section, name=name or out.stem, description=description
        )
    return save_profile(profile, out)


def summary_lines(section, timings: dict, seconds: float, path) -> list[str]:
    """Human-readable summary: Tp, Tq, c, v(γ), prefill, vision, the worst half-width and the time taken."""
    lines = [f"wrote {path} ({len(timings)} points, {seconds:.1f} s of measuring this run)"]
    v_ctx = section.verify_context_tokens
    tp, tq = section.target_decode_ms_by_context, section.draft_decode_ms_by_context
    for label, curve in (
        ("Tp (target decode)", tp),
        ("Tq (draft decode)", tq),
        ("target prefill", section.target_prefill_ms_by_tokens),
        ("draft prefill", section.draft_prefill_ms_by_tokens),
        ("Tq by draft batch", section.draft_decode_ms_by_batch),
    ):
        if curve is not None:
            pts = ", ".join(
                f"{x:g}: {ms:.2f}±{hw:.2f}" for x, ms, hw in zip(curve.x, curve.ms, curve.halfwidth_ms)
            )
            lines.append(f"{label:20s} ms  {pts}")
    tp_v = dict(zip(tp.x, tp.ms))[float(v_ctx)]
    tq_v = dict(zip(tq.x, tq.ms))[float(v_ctx)]
    lines.append(f"at context {v_ctx}: Tp = {tp_v:.2f} ms, Tq = {tq_v:.2f} ms, c = Tq/Tp = {tq_v / tp_v:.3f}")
    tv = section.target_verify_ms_by_gamma
    lines.append(
        "v(gamma) = Tv/Tp:     " + ", ".join(f"{int(g)}: {ms / tp_v:.3f}" for g, ms in zip(tv.x, tv.ms))
    )
    for label, value in (
        ("vision encoder ms/image (target)", section.vision_encoder_ms_per_image),
        ("vision encoder ms/image (draft)", section.draft_vision_encoder_ms_per_image),
        (
            "vision encoder ms per further image in the same call (target)",
            section.vision_encoder_ms_per_extra_image,
        ),
        (
            "vision encoder ms per further image in the same call (draft)",
            section.draft_vision_encoder_ms_per_extra_image,
        ),
        ("captioner ms/image", section.captioner_ms_per_image),
    ):
        if value is not None:
            lines.append(f"{label}: {value:.2f}")
    worst = worst_pass(timings)  # the pass the noisy-calibration warning names
    if worst is not None:
        key, rel = worst
        lines.append(f"worst 95% CI half-width of a timed pass: {100 * rel:.2f}% of the median ({key})")
    cm = section.cost_model
    if cm is not None:
        grids = ", ".join(
            f"{name} {len(g.rows)}x{len(g.context_tokens)}x{len(g.batch)}"
            for name, g in (
                ("Tv", cm.target_verify),
                ("Tq first", cm.draft_first),
                ("Tq next", cm.draft_next),
            )
        )
        lines.append(
            f"cost grid (rows x contexts x batch): {grids}; "
            f"contexts {','.join(f'{v:g}' for v in cm.target_verify.context_tokens)}"
        )
        ov = cm.overhead_ms_per_block
        lines.append(
            "engine overhead ms per block (batch 1): "
            + ", ".join(f"gamma {g}: {ov.at(g, 1):.3f}" for g in ov.gamma)
            + f"; per target-only step {cm.overhead_ms_per_target_step:.3f}"
        )
        if cm.adaptive_ms_per_block is not None:
            ad, b = cm.adaptive_ms_per_block, cm.adaptive_ms_per_block.batch[-1]
            lines.append(
                f"adaptive weight update ms per block (batch {b}): "
                + ", ".join(f"gamma {g}: {ad.at(g, b):.3f}" for g in ad.gamma)
            )
        if cm.tree is not None:
            g = cm.tree.verify
            at = min(range(len(g.context_tokens)), key=lambda i: abs(g.context_tokens[i] - v_ctx))
            lines.append(
                f"tree verify Tv(n) ms at context {g.context_tokens[at]:g}: "
                + ", ".join(f"n={r - 1}: {g.ms[i][at][0]:.2f}" for i, r in enumerate(g.rows))
                + f" ({len(cm.tree.trees)} trees)"
            )
        if cm.host_check is not None:
            lines.append(("WARNING: " if cm.host_check.contended else "host check: ") + cm.host_check.note)
    return lines
