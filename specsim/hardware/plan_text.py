"""Plain-text report of a hardware plan: models, fitted efficiencies, assumptions, rankings, speedup vs
batch."""

from __future__ import annotations

from dataclasses import dataclass

from specsim.hardware.efficiency_fit import FitResult, HoldoutResult
from specsim.hardware.model import ModelSpec
from specsim.hardware.plan import Plan, ranking
from specsim.hardware.runtime import Runtime
from specsim.predict.tau_at_gamma import extrapolated
from specsim.report import fmt, format_table


def describe_model(m: ModelSpec) -> str:
    """One line: name, parameters, bytes per weight and per KV element, vision tower."""
    v = m.vision
    at = f" at {v.image_size}" if v is not None and v.image_size is not None else ""
    vision = f", vision tower {v.params / 1e6:.0f}M ({v.image_tokens} tokens/image{at})" if v else ""
    moe = m.moe
    experts = (
        f", {m.active_params / 1e9:.2f}B active: {moe.per_token} of {moe.experts} experts per token"
        + ("" if moe.expert_bytes is None else f" at {moe.expert_bytes:g} bytes/weight")
        if moe
        else ""
    )
    window = f", a {m.window}-token window on {m.window_layers}/{m.layers} layers" if m.window_layers else ""
    return (
        f"{m.name} ({m.params / 1e9:.2f}B params{experts}, {m.dtype_bytes:g} bytes/weight, "
        f"{m.kv_element_bytes:g} bytes/KV element{window}{vision})"
    )


def fit_text(fit: FitResult | HoldoutResult) -> list[str]:
    """The fitted efficiencies, the fit error and, for a hold-out, each held-out point."""
    f = fit.fit if isinstance(fit, HoldoutResult) else fit
    e = f.efficiency
    free = ", ".join(k for k, ok in f.constrained.items() if not ok)
    values = (
        ", ".join(f"{k} {getattr(e, k):.4g}" for k in f.constrained)
        if isinstance(e, Runtime)
        else (
            f"compute {e.compute:.3f}, memory {e.memory:.3f}, overhead {e.overhead_ms:.3f} ms + "
            f"{e.overhead_ms_per_layer:.4f} ms/layer"
        )
    )
    lines = [
        f"fitted: {values} on {f.device}; fit error rms {f.rms_rel_error:.1%}, "
        f"max {f.max_abs_rel_error:.1%} over {len(f.rows)} points"
        + (f" (unconstrained: {free})" if free else "")
    ]
    if isinstance(fit, HoldoutResult):
        lines.append(
            f"held-out: rms {fit.rms_rel_error:.1%}, max {fit.max_abs_rel_error:.1%} over "
            f"{len(fit.held_out)} points"
        )
        lines += [
            f"  {r.label}: measured {r.measured_ms:.2f} ms, predicted {r.predicted_ms:.2f} ms "
            f"({r.rel_error:+.1%})"
            for r in fit.held_out
        ]
    return lines


@dataclass(frozen=True)
class _MethodShown:
    """One method's section before formatting: the ranking at the first (batch, context) with each row's
    τ flag (extrapolated?) and the top row's overhead line, and per context the speedup-vs-batch cells of
    every device with the notes on where SD stops paying."""

    method: str
    top: list
    starred: list[bool]
    overhead: str
    batch_tables: dict[int, tuple[list[list[str]], list[str]]]


def _batch_table(plan: Plan, method: str, ctx: int) -> tuple[list[list[str]], list[str]]:
    """(a row of cells per device: speedup per batch, ! where it does not fit, then where SD stops paying;
    the notes on it) for ``method`` at context ``ctx``."""
    table, notes = [], []
    for dev in plan.devices:
        rs = sorted(plan.select(device=dev, method=method, context=ctx), key=lambda r: r.batch_size)
        limit = plan.crossover(dev, method, ctx)
        table.append(
            [dev]
            + [f"{r.speedup:.2f}" + ("" if r.fits_memory else "!") for r in rs]
            + [limit.cell(), limit.crossover_cell(), limit.fits_cell()]
        )
        if sentence := limit.sentence():
            notes.append(f"    {sentence}")
    return table, notes


def _method_shown(plan: Plan, method: str) -> _MethodShown:
    """What ``method``'s section shows (:class:`_MethodShown`), gathered from the plan."""
    top = ranking(plan, method, batch=plan.batches[0], context=plan.contexts[0])
    tables = {ctx: _batch_table(plan, method, ctx) for ctx in plan.contexts}
    overhead = overhead_text(top[0])
    return _MethodShown(method, top, [extrapolated(r.tau_source) for r in top], overhead, tables)


def plan_text(plan: Plan, target: ModelSpec, draft: ModelSpec, fit=None) -> str:
    """``specsim hardware``'s text report: models, fit, assumptions, the ranking and speedup vs batch per
    method (every section gathered first, then formatted)."""
    kind = plan.rows[0].draft_kind if plan.rows else "model"
    side = describe_model(draft) if draft is not None else "none: drafts by host lookup"
    lines = [f"target {describe_model(target)}", f"draft  {side} (drafting kind {kind})"]
    if fit is not None:
        lines += fit_text(fit)
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in plan.assumptions]
    shown = [_method_shown(plan, method) for method in plan.methods]
    any_starred = any(extrapolated(r.tau_source) for r in plan.rows)
    for section in shown:
        lines += _method_lines(plan, section)
    if any_starred:
        lines.append("\n* tau at this gamma is an i.i.d. extrapolation from the measured gamma")
    return "\n".join(lines)


def _method_lines(plan: Plan, shown: _MethodShown) -> list[str]:
    """One method's section formatted: its ranking table, the top row's overhead, speedup vs batch per
    context."""
    batch, context = plan.batches[0], plan.contexts[0]
    fixed = len(plan.gammas) == 1  # a fixed γ (--gamma) is not a best one
    best = f"speedup at γ = {plan.gammas[0]}" if fixed else "best-γ speedup"
    top = shown.top
    rows = [
        [
            str(i + 1),
            r.device,
            f"{r.target_tokens_per_s:.1f}",
            f"{r.sd_tokens_per_s:.1f}",
            f"{r.speedup:.2f}",
            str(r.best_gamma),
            f"{r.tau:.2f}" + ("*" if star else ""),
            f"{r.c:.3f}",
            f"{r.v:.2f}",
            f"{r.o:.3f}",
            "compute" if r.target_compute_bound else "memory",
            "yes" if r.fits_memory else "NO",
            fmt(r.usd_per_million_tokens, 3),
        ]
        + ([] if r.e2e_speedup is None else [f"{r.e2e_speedup:.2f}"])
        for i, (r, star) in enumerate(zip(top, shown.starred, strict=True))
    ]
    headers = ["#", "device", "target tok/s", "SD tok/s", "speedup", "γ" if fixed else "best γ", "tau", "c"]
    headers += ["v", "o", "target bound", "fits", "$/Mtok"]
    headers += [] if top[0].e2e_speedup is None else ["e2e speedup"]
    lines = [f"\nmethod {shown.method}: ranking at batch {batch}, context {context} tokens"]
    lines += [format_table(headers, rows), f"  {shown.overhead}"]
    header = ["device"] + [f"B={b}" for b in plan.batches]
    header += ["speedup<1 at B", "stops paying at B", "largest B that fits"]
    for ctx, (table, notes) in shown.batch_tables.items():
        lines.append(f"  {best} vs batch size, context {ctx} (! = does not fit in memory):")
        lines.append(format_table(header, table, indent="    "))
        lines += notes
    return lines


def overhead_text(r) -> str:
    """A row's o as the sum of its named terms, and the speedup they reproduce: τ / (γ·c + v + o)."""
    named = " + ".join(f"{v:.4f} {k}" for k, v in r.o_terms.items() if v)
    return (
        f"{r.device}: o = {r.o:.4f}"
        + (f" = {named}" if named else "")
        + f"; speedup = tau/(gamma*c + v + o) = {r.tau:.3f}/({r.best_gamma}*{r.c:.4f} + {r.v:.4f} + "
        f"{r.o:.4f}) = {r.speedup:.3f} (units of one target-only step, {r.target_ms_per_step:.2f} ms)"
    )
