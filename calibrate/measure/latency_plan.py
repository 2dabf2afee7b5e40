"""Latency calibration of a draft/target pair -> :class:`specsim.profile_format.LatencySection` (all times in
ms).

Measured (greedy, KV caches in use, one timing primitive, :mod:`calibrate.run.timing`): the forward-cost
model (:mod:`calibrate.measure.request_grid_sweep`), prefill, the vision encoders and the captioner, and a
sentinel for host contention. Results are saved after every unit in ``<out>.partial``, where a run resumes.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from calibrate.measure.latency_assembly import latency_section, measurement_provenance, save_latency_profile
from calibrate.measure.latency_partial import (  # partial_timings: tests reach it through this module
    SCHEMA_VERSION,
    PartialState,
    load_partial,
    partial_path,
    partial_timings,  # noqa: F401
    progress_bar,
    run_identity,
    show_value,
)
from calibrate.measure.latency_tasks import Task, task_call
from calibrate.measure.noise_check import host_warnings
from calibrate.measure.request_grid_sweep import SENTINEL_END, SENTINEL_START, grid_key, sweep_context
from calibrate.measure.sampling_sweep import SAMPLING_KEY, sampling_timings
from calibrate.measure.tree_grid_sweep import sweep_trees, tree_sweep_context
from calibrate.models.loaded_model import LoadedModel, image_token_count, param_count
from calibrate.run.timing import Timing, measure_interleaved
from specsim.draft_shapes.trees import parse_tree
from specsim.errors import SpecsimError
from specsim.jsonio import check_schema_version, write_json_atomic

Runner = Callable[[list, dict, "LatencyPlan"], dict]


VISION_IMAGES = (1, 4)  # images per timed vision call


@dataclass(frozen=True)
class LatencyPlan:
    """What to measure (contexts, γ, draft batch sizes, prompt lengths) and how hard (rounds, target CI).

    ``warmup``/``min_repeats``/``max_repeats`` count rounds of the engine-shaped sweep at each context
    (every γ × batch block plus target-only steps per round); ``max_seconds_per_point`` caps one
    context's sweep; ``ensemble`` (default: for VLM targets) times the in-batch ensemble drafter even at
    batch 1, as the multimodal methods run it. ``trees`` (spec strings,
    :func:`calibrate.measure.tree_grid_sweep.sweep_trees`; empty: no tree grids) adds one tree-engine sweep
    per context (:mod:`calibrate.measure.tree_grid_sweep`).
    """

    contexts_tokens: tuple[int, ...] = (64, 256, 1024)
    verify_context_tokens: int = 256
    gammas: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    batch_sizes: tuple[int, ...] = (1,)
    prefill_tokens: tuple[int, ...] = (16, 64, 256)
    vision: bool = True
    warmup: int = 1
    min_repeats: int = 5
    max_repeats: int = 30
    prefill_warmup: int = 1
    prefill_min_repeats: int = 3
    prefill_max_repeats: int = 10
    target_rel_halfwidth: float = 0.02
    max_seconds_per_point: float | None = None
    caption_tokens: int = 32
    seed: int = 0
    ensemble: bool | None = None
    sentinel_steps: int = 5
    trees: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("contexts_tokens", "gammas", "batch_sizes", "prefill_tokens"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise SpecsimError(
                    f"{name}: expected a non-empty list of integers >= 1, got {show_value(list(values))}"
                )
            object.__setattr__(self, name, tuple(sorted(set(values))))
        for name in (
            "verify_context_tokens",
            "min_repeats",
            "max_repeats",
            "prefill_min_repeats",
            "prefill_max_repeats",
            "caption_tokens",
            "sentinel_steps",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SpecsimError(f"{name}: expected an integer >= 1, got {show_value(getattr(self, name))}")
        if self.max_repeats < self.min_repeats or self.prefill_max_repeats < self.prefill_min_repeats:
            raise SpecsimError(
                f"repeats: expected max >= min, got min {self.min_repeats} and max {self.max_repeats}"
            )
        if not 0 < self.target_rel_halfwidth < 1:
            raise SpecsimError(
                f"target_rel_halfwidth: expected a fraction in (0, 1), got {self.target_rel_halfwidth}"
            )
        if (
            self.verify_context_tokens not in self.contexts_tokens
        ):  # the 1-D Tv(γ) table is read at this context
            object.__setattr__(
                self, "contexts_tokens", tuple(sorted({*self.contexts_tokens, self.verify_context_tokens}))
            )
        if 1 not in self.batch_sizes:  # every method's draft runs batch 1 at least in the 1-D tables
            object.__setattr__(self, "batch_sizes", (1, *self.batch_sizes))
        object.__setattr__(self, "trees", sweep_trees(specs=self.trees))

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict) -> LatencyPlan:
        check_schema_version(d, SCHEMA_VERSION, "latency plan")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known})


def default_plan(target: LoadedModel, **overrides) -> LatencyPlan:
    """A plan fitted to the model kind: VLM contexts/prefills cover 0 to 5 images' visual tokens and the
    draft batch sizes of the in-batch ensembles (1..4).

    Prefill also starts at 16 tokens: text-only and caption drafting prefill the prompt without its
    visual tokens, often shorter than 64, and end-to-end latency does not extrapolate measured tables.
    """
    if target.kind == "vlm":
        img = image_token_count(target.model.config)
        text = 64
        base = {
            "contexts_tokens": (text, img + text, 5 * img + text),
            "verify_context_tokens": img + text,
            "prefill_tokens": (16,) + tuple(k * img + text for k in range(0, 6)),
            "batch_sizes": (1, 2, 3, 4),
        }
    else:
        base = {}
    return LatencyPlan(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


def workload_plan(prompt_tokens, draft_prompt_tokens, new_tokens: int, gammas, **overrides) -> dict:
    """Plan fields sized to a workload: contexts from the shortest prompt to the longest prompt + N,
    prefill lengths from the shortest draft or target prompt to the longest prompt + γmax (the first
    block's fused pass), each with a middle point when its span is over 256 tokens."""
    lo = max(1, min(min(prompt_tokens), min(draft_prompt_tokens)) - 2)
    hi = max(prompt_tokens) + new_tokens
    contexts = (lo, hi) if hi - lo <= 256 else (lo, (lo + hi) // 2, hi)
    first = max(prompt_tokens) + max(gammas)
    short = max(1, min(min(prompt_tokens), min(draft_prompt_tokens)))
    # prefill time is close to linear in prompt tokens over a few hundred tokens: two ends suffice there
    prefill = tuple(sorted({short, first} if first - short <= 256 else {short, (short + first) // 2, first}))
    mid = min(contexts, key=lambda c: abs(c - (lo + hi) / 2))
    return {
        "contexts_tokens": contexts,
        "verify_context_tokens": mid,
        "prefill_tokens": prefill,
        "gammas": tuple(gammas),
    } | overrides


# --------------------------------------------------------------------------- tasks
def plan_tasks(plan: LatencyPlan, models: dict[str, LoadedModel]) -> list[Task]:
    """The units to measure, in order: the start sentinel, one sweep per context, prefills, vision,
    captioner, the end sentinel."""
    sizes = {role: param_count(m) / 1e9 for role, m in models.items()}
    rounds = plan.warmup + plan.min_repeats
    preps = plan.prefill_warmup + plan.prefill_min_repeats
    block = sum(
        sizes["draft"] * g * b + sizes["target"] * (1 + g / 8) for g in plan.gammas for b in plan.batch_sizes
    )
    sentinel = sizes["target"] * plan.sentinel_steps
    tasks = [Task(SENTINEL_START, "target", "sentinel", 1, plan.contexts_tokens[0], 1, sentinel)]
    tasks += [Task(f"sweep.c={c}", "pair", "sweep", 1, c, 1, block * rounds) for c in plan.contexts_tokens]
    trees = [parse_tree(t) for t in plan.trees]
    tree_block = sum(
        sizes["draft"] * t.depth * b + sizes["target"] * (1 + t.n / 8)
        for t in trees
        for b in plan.batch_sizes
    )
    tasks += [
        Task(f"tree.sweep.c={c}", "pair", "tree-sweep", 1, c, 1, tree_block * rounds)
        for c in plan.contexts_tokens
        if trees
    ]
    for n in plan.prefill_tokens:
        tasks.append(
            Task(
                grid_key("target_prefill", n, 0, 1),
                "target",
                "prefill",
                1,
                0,
                n,
                sizes["target"] * max(1.0, n / 8) * preps,
            )
        )
        for b in plan.batch_sizes:
            tasks.append(
                Task(
                    grid_key("draft_prefill", n, 0, b),
                    "draft",
                    "prefill",
                    b,
                    0,
                    n,
                    sizes["draft"] * max(1.0, b * n / 8) * preps,
                )
            )
    for role in ("target", "draft"):
        if plan.vision and models[role].kind == "vlm" and hasattr(models[role].model, "get_image_features"):
            for images in VISION_IMAGES:  # one call: its line in images prices a prompt's images together
                tasks.append(
                    Task(
                        f"{role}.vision.images={images}",
                        role,
                        "vision",
                        images,
                        0,
                        image_token_count(models[role].model.config),
                        sizes[role] * 8 * images * preps,
                    )
                )
    if "captioner" in models:
        key = f"captioner.caption.tokens={plan.caption_tokens}"
        tasks.append(
            Task(
                key,
                "captioner",
                "caption",
                1,
                0,
                plan.caption_tokens,
                sizes["captioner"] * (plan.caption_tokens + 64) * preps,
            )
        )
    tasks.append(Task(SAMPLING_KEY, "pair", "sampling", 1, 0, 1, 0.01 * sentinel))
    tasks.append(Task(SENTINEL_END, "target", "sentinel", 1, plan.contexts_tokens[0], 1, sentinel))
    return tasks


def _ensemble(plan: LatencyPlan, models: dict[str, LoadedModel]) -> bool:
    return models["target"].kind == "vlm" if plan.ensemble is None else plan.ensemble


def run_tasks(tasks: list[Task], models: dict[str, LoadedModel], plan: LatencyPlan) -> dict[str, Timing]:
    """Measure one unit: a sweep (returns every grid and overhead point at its context, plus the unit's
    own key), a sentinel, or one prefill/vision/caption point."""
    import torch

    (task,) = tasks
    generator = torch.Generator().manual_seed(plan.seed + sum(map(ord, task.key)))
    if task.what == "tree-sweep":
        out = tree_sweep_context(
            models,
            task.context_tokens,
            trees=[parse_tree(t) for t in plan.trees],
            batch_sizes=plan.batch_sizes,
            ensemble=_ensemble(plan, models),
            warmup=plan.warmup,
            min_rounds=plan.min_repeats,
            max_rounds=plan.max_repeats,
            target_rel_halfwidth=plan.target_rel_halfwidth,
            max_seconds=plan.max_seconds_per_point,
            generator=generator,
        )
        return out | {task.key: out[grid_key("tree_verify", 2, task.context_tokens, 1)]}  # the unit is done
    if task.what == "sampling":
        return sampling_timings(
            models,
            plan.gammas,
            generator=generator,
            warmup=plan.warmup,
            min_repeats=plan.min_repeats,
            max_repeats=plan.max_repeats,
            target_rel_halfwidth=plan.target_rel_halfwidth,
            max_seconds=plan.max_seconds_per_point,
        )
    if task.what in ("sweep", "sentinel"):
        sentinel = task.what == "sentinel"
        out = sweep_context(
            models,
            task.context_tokens,
            gammas=() if sentinel else plan.gammas,
            batch_sizes=() if sentinel else plan.batch_sizes,
            ensemble=_ensemble(plan, models),
            warmup=plan.warmup,
            min_rounds=plan.sentinel_steps if sentinel else plan.min_repeats,
            max_rounds=plan.sentinel_steps if sentinel else plan.max_repeats,
            target_rel_halfwidth=plan.target_rel_halfwidth,
            max_seconds=plan.max_seconds_per_point,
            generator=generator,
        )
        decode = out[grid_key("target_decode", 1, task.context_tokens, 1)]
        return {task.key: decode} if sentinel else out | {task.key: decode}
    m = models[task.role]
    with torch.inference_mode():
        call = task_call(task, m, plan.caption_tokens, generator)
        return measure_interleaved(
            {task.key: (call, None)},
            device=m.device,
            target_rel_halfwidth=plan.target_rel_halfwidth,
            warmup=plan.prefill_warmup,
            min_repeats=plan.prefill_min_repeats,
            max_repeats=plan.prefill_max_repeats,
            max_seconds=plan.max_seconds_per_point,
        )


def run_task(task: Task, models: dict[str, LoadedModel], plan: LatencyPlan) -> dict[str, Timing]:
    """Measure one task alone (all the keys it yields)."""
    return run_tasks([task], models, plan)


# --------------------------------------------------------------------------- sweep
def measure_latency(
    models: dict[str, LoadedModel],
    plan: LatencyPlan,
    *,
    partial: Path | None = None,
    resume: bool = True,
    progress: bool = True,
    runner: Runner | None = None,
) -> dict[str, Timing]:
    """Measure every task of ``plan`` (skipping those already in ``partial``), saving after each unit.

    ``models`` holds "target" and "draft" (and optionally "captioner"); returns key -> Timing.
    ``runner(tasks, models, plan) -> {key: Timing}`` replaces :func:`run_tasks` (tests).
    """
    import torch

    runner = runner or run_tasks
    tasks = plan_tasks(plan, models)
    identity = run_identity(models, torch.get_num_threads())
    if partial is not None and not resume:
        partial.unlink(missing_ok=True)
    state = load_partial(partial, identity) if partial is not None else PartialState(identity)
    units = [[t] for t in tasks if t.key not in state.timings]
    done = [t for t in tasks if t.key in state.timings]
    bar = progress_bar(sum(t.weight for t in tasks), sum(t.weight for t in done), len(done), progress)
    try:
        for unit in units:
            bar.set_postfix_str(
                unit[0].key + (f" (+{len(unit) - 1} interleaved)" if len(unit) > 1 else ""), refresh=True
            )
            state.timings.update(runner(unit, models, plan))
            if partial is not None:
                write_json_atomic(partial, state.to_json())
            bar.update(sum(t.weight for t in unit))
    finally:
        bar.close()
    return dict(state.timings)


def calibrate_latency(
    models: dict[str, LoadedModel],
    plan: LatencyPlan,
    out: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    name: str = "",
    description: str = "",
    notes: str = "",
    runner: Runner | None = None,
) -> tuple[Path, dict[str, Timing]]:
    """Measure (resumable), then write the profile at ``out`` atomically and drop the partial file."""
    part = partial_path(out)
    timings = measure_latency(models, plan, partial=part, resume=resume, progress=progress, runner=runner)
    provenance = measurement_provenance(models, notes=notes)
    section = latency_section(timings, plan, provenance)
    for note in host_warnings(section.cost_model.host_check, timings, plan):
        print(f"warning: {note}", file=sys.stderr)
    path = save_latency_profile(out, section, provenance, name=name, description=description)
    part.unlink(missing_ok=True)
    return path, timings
