"""Latency sweeps of a draft/target pair -> :class:`specsim.profile.LatencySection` (all times in ms).

What is measured (every point with :func:`calibrate.timing.measure`, greedy, KV cache in use):

- Tp(L), Tq(L): one forward over 1 new position on a KV cache of L context positions, batch 1.
- Tv(γ): one target forward over the γ+1 new positions verification needs (positions L..L+γ: the
  pending last token plus γ drafts) on a cache of L = ``verify_context_tokens``, logits at every
  new position, exactly as the engine verifies; γ = 1..8 by default.
- Tq at batch b = 1..4 (in-batch ensembles) on a cache of ``verify_context_tokens``.
- Prefill(L): one forward over L prompt positions with an empty cache (last logits only). For VLMs
  the L positions include the visual tokens (defaults cover 1 to 5 images); the vision encoder is
  timed apart: one image through vision tower + projector (``vision_encoder_ms_per_image``).
- Captioner ms per image: image prompt + ``caption_tokens`` greedy tokens (when a captioner is given).

Tp and Tv(γ) on the verify context are timed round-robin (one call of each per round), and so
are the draft batch sizes, so a drifting machine load biases their ratios v(γ) and Tq(b)/Tq(1) less.
KV caches are filled with random keys/values of the real shapes (see ``models.random_kv_cache``):
latency does not depend on the values, and long contexts then cost no prefill. Results are saved
after every unit in ``<out>.partial`` (atomically), so an interrupted run resumes there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from calibrate import models as M
from calibrate.timing import Timing, measure_interleaved
from specsim.errors import SpecsimError, warn
from specsim.jsonio import read_json
from specsim.profile import (
    Curve,
    LatencySection,
    Profile,
    Provenance,
    load_profile,
    save_profile,
    write_json_atomic,
)

SCHEMA_VERSION = 1
PARTIAL_SUFFIX = ".partial"  # not ".json": profile folders are scanned for *.json
Runner = Callable[[list, dict, "LatencyPlan"], dict]


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class LatencyPlan:
    """What to measure (tokens, γ, batch sizes) and how hard (repeats, target CI half-width)."""

    contexts_tokens: tuple[int, ...] = (64, 256, 1024)
    verify_context_tokens: int = 256
    gammas: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    batch_sizes: tuple[int, ...] = (1, 2, 3, 4)
    prefill_tokens: tuple[int, ...] = (16, 64, 256)
    vision: bool = True
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 30
    prefill_warmup: int = 1
    prefill_min_repeats: int = 3
    prefill_max_repeats: int = 10
    target_rel_halfwidth: float = 0.02
    max_seconds_per_point: float | None = None
    caption_tokens: int = 32
    seed: int = 0
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("contexts_tokens", "gammas", "batch_sizes", "prefill_tokens"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise SpecsimError(f"{name}: expected a non-empty list of integers >= 1, got {_show(list(values))}")
            object.__setattr__(self, name, tuple(sorted(set(values))))
        for name in ("verify_context_tokens", "min_repeats", "max_repeats", "prefill_min_repeats",
                     "prefill_max_repeats", "caption_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SpecsimError(f"{name}: expected an integer >= 1, got {_show(getattr(self, name))}")
        if self.max_repeats < self.min_repeats or self.prefill_max_repeats < self.prefill_min_repeats:
            raise SpecsimError(f"repeats: expected max >= min, got min {self.min_repeats} and max {self.max_repeats}")
        if not 0 < self.target_rel_halfwidth < 1:
            raise SpecsimError(f"target_rel_halfwidth: expected a fraction in (0, 1), got {self.target_rel_halfwidth}")
        if self.verify_context_tokens not in self.contexts_tokens:  # v(γ) = Tv/Tp needs Tp at this context
            object.__setattr__(self, "contexts_tokens", tuple(sorted({*self.contexts_tokens, self.verify_context_tokens})))

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict) -> LatencyPlan:
        if not isinstance(d, dict) or d.get("schema_version") != SCHEMA_VERSION:
            raise SpecsimError(f"latency plan: expected schema_version {SCHEMA_VERSION}, got {_show(d)}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known})


def default_plan(target: M.LoadedModel, **overrides) -> LatencyPlan:
    """A plan fitted to the model kind: VLM contexts/prefills cover 0 to 5 images' visual tokens.

    Prefill also starts at 16 tokens: text-only and caption drafting prefill the prompt without its
    visual tokens, often shorter than 64, and end-to-end latency does not extrapolate measured tables.
    """
    if target.kind == "vlm":
        img = M.image_token_count(target.model.config)
        text = 64
        base = {"contexts_tokens": (text, img + text, 5 * img + text), "verify_context_tokens": img + text,
                "prefill_tokens": (16,) + tuple(k * img + text for k in range(0, 6))}
    else:
        base = {}
    return LatencyPlan(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


# --------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """One measured point; ``key`` names it in the partial file, ``weight`` is its rough relative cost."""

    key: str
    role: str      # "target" | "draft" | "captioner"
    what: str      # "forward" | "prefill" | "vision" | "caption"
    batch: int = 1
    context_tokens: int = 0
    new_tokens: int = 1
    weight: float = 1.0


def _forward_key(role: str, batch: int, context: int, new: int) -> str:
    return f"{role}.forward.b={batch}.ctx={context}.new={new}"


def plan_tasks(plan: LatencyPlan, models: dict[str, M.LoadedModel]) -> list[Task]:
    """The de-duplicated points to measure: Tq at batch 1 on the verify context is the Tq(context) point."""
    sizes = {role: M.param_count(m) / 1e9 for role, m in models.items()}
    reps = plan.warmup + plan.min_repeats
    preps = plan.prefill_warmup + plan.prefill_min_repeats
    tasks: dict[str, Task] = {}

    def fwd(role: str, b: int, ctx: int, new: int) -> None:
        w = sizes[role] * max(1.0, b * new / 8) * reps
        tasks.setdefault(_forward_key(role, b, ctx, new), Task(_forward_key(role, b, ctx, new), role, "forward",
                                                             b, ctx, new, w))

    for role in ("target", "draft"):
        for ctx in plan.contexts_tokens:
            fwd(role, 1, ctx, 1)
    for g in plan.gammas:
        fwd("target", 1, plan.verify_context_tokens, g + 1)
    for b in plan.batch_sizes:
        fwd("draft", b, plan.verify_context_tokens, 1)
    for role in ("target", "draft"):
        for n in plan.prefill_tokens:
            key = f"{role}.prefill.tokens={n}"
            tasks[key] = Task(key, role, "prefill", 1, 0, n, sizes[role] * max(1.0, n / 8) * preps)
    for role in ("target", "draft"):
        if plan.vision and models[role].kind == "vlm" and hasattr(models[role].model, "get_image_features"):
            key = f"{role}.vision.images=1"
            tasks[key] = Task(key, role, "vision", 1, 0, M.image_token_count(models[role].model.config),
                              sizes[role] * 8 * preps)
    if "captioner" in models:
        key = f"captioner.caption.tokens={plan.caption_tokens}"
        tasks[key] = Task(key, "captioner", "caption", 1, 0, plan.caption_tokens,
                          sizes["captioner"] * (plan.caption_tokens + 64) * preps)
    return list(tasks.values())


def _task_fn(task: Task, m: M.LoadedModel, plan: LatencyPlan, generator) -> tuple[Callable, Callable | None]:
    """(fn, setup) for one task; ``setup`` restores the state ``fn`` changes (untimed)."""
    model = m.model
    if task.what == "forward":
        cache = M.random_kv_cache(m, task.batch, task.context_tokens, generator)
        ids = M.random_input_ids(m, task.batch, task.new_tokens, generator)
        # input_ids: [B, new]; the cache grows to ctx+new, and setup crops it back to ctx.
        kw = _batch_mask_kwargs(task, model.device) if task.batch > 1 else {}
        return (lambda: model(input_ids=ids, past_key_values=cache, use_cache=True, **kw),
                lambda: M.crop_cache(cache, task.context_tokens))
    if task.what == "prefill":
        ids = M.random_input_ids(m, 1, task.new_tokens, generator)
        return lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1), None
    if task.what == "vision":
        pixels = M.random_pixel_values(m, 1, generator)
        return lambda: model.get_image_features(pixel_values=pixels), None
    if task.what == "caption":
        return _caption_fn(m, plan.caption_tokens, generator), None
    raise SpecsimError(f"unknown task kind {task.what!r}")


def _batch_mask_kwargs(task: Task, device) -> dict:
    """Attention mask and position ids of an in-batch ensemble step: rows after the first start with a pad
    column (left padding), so the timed call takes the same padded-mask path as the ensemble drafter."""
    import torch

    mask = torch.ones(task.batch, task.context_tokens + task.new_tokens, dtype=torch.long, device=device)
    mask[1:, 0] = 0
    pos = mask.sum(1, keepdim=True) - task.new_tokens + torch.arange(task.new_tokens, device=device)
    return {"attention_mask": mask, "position_ids": pos}


def _caption_fn(m: M.LoadedModel, tokens: int, generator) -> Callable:
    """Greedy generation of exactly ``tokens`` caption tokens for one image (prompt: image + 16 text tokens)."""
    import torch

    if m.kind != "vlm":
        raise SpecsimError(f"captioner {m.name!r} is a text-only model (expected a vision-language model)")
    img_id = int(getattr(m.model.config, "image_token_id", getattr(m.model.config, "image_token_index", 0)))
    text = M.random_input_ids(m, 1, 16, generator)
    image = torch.full((1, M.image_token_count(m.model.config)), img_id, dtype=text.dtype, device=text.device)
    ids = torch.cat([image, text], dim=1)
    pixels = M.random_pixel_values(m, 1, generator)
    mask = torch.ones_like(ids)
    return lambda: m.model.generate(input_ids=ids, attention_mask=mask, pixel_values=pixels, do_sample=False,
                                    max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0)


def run_tasks(tasks: list[Task], models: dict[str, M.LoadedModel], plan: LatencyPlan) -> dict[str, Timing]:
    """Measure a unit of tasks (one, or a group on one model) round-robin with the plan's settings."""
    import torch

    m = models[tasks[0].role]
    cheap = all(t.what == "forward" for t in tasks)
    with torch.inference_mode():
        calls = {}
        for task in tasks:
            generator = torch.Generator().manual_seed(plan.seed + sum(map(ord, task.key)))
            calls[task.key] = _task_fn(task, models[task.role], plan, generator)
        return measure_interleaved(calls, device=m.device, target_rel_halfwidth=plan.target_rel_halfwidth,
                                   warmup=plan.warmup if cheap else plan.prefill_warmup,
                                   min_repeats=plan.min_repeats if cheap else plan.prefill_min_repeats,
                                   max_repeats=plan.max_repeats if cheap else plan.prefill_max_repeats,
                                   max_seconds=plan.max_seconds_per_point)


def run_task(task: Task, models: dict[str, M.LoadedModel], plan: LatencyPlan) -> Timing:
    """Measure one task alone."""
    return run_tasks([task], models, plan)[task.key]


def plan_units(tasks: list[Task], plan: LatencyPlan) -> list[list[Task]]:
    """Tasks measured together (interleaved): per model, the forwards on the verify context, i.e.
    Tp with Tv(γ) for all γ (their ratio is v(γ)), and Tq with the draft batch sizes."""
    units: list[list[Task]] = []
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        if task.what == "forward" and task.context_tokens == plan.verify_context_tokens:
            if task.role not in groups:
                groups[task.role] = []
                units.append(groups[task.role])
            groups[task.role].append(task)
        else:
            units.append([task])
    return units


# --------------------------------------------------------------------------- partial state
@dataclass
class PartialState:
    """Timings done so far (key -> Timing) for one identity (models, device, dtype, threads)."""

    identity: dict
    timings: dict[str, Timing] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "identity": self.identity,
                "timings": {k: t.to_json() for k, t in self.timings.items()}}


def partial_path(out_path: str | Path) -> Path:
    """Where the partial results of a run writing ``out_path`` live."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + PARTIAL_SUFFIX)


def load_partial(path: Path, identity: dict) -> PartialState:
    """Resume state from ``path``: empty if absent, or if broken (reported on stderr, then overwritten by
    this run); SpecsimError if it is valid but belongs to other models/settings (it may be worth keeping)."""
    import os

    if not os.path.lexists(path):
        return PartialState(identity)
    try:
        data = read_json(path, "partial results")
        timings = _partial_timings(data, f"partial results {str(path)!r}")
    except SpecsimError as err:
        warn(f"{err}; ignoring it and measuring from the start")
        return PartialState(identity)
    if data["identity"] != identity:
        other = {k: v for k, v in data["identity"].items() if identity.get(k) != v}
        raise SpecsimError(f"partial results {str(path)!r} were measured with {_show(other)} (expected "
                           f"{_show({k: identity.get(k) for k in other})}; delete the file or pass --no-resume)")
    return PartialState(identity, timings)


def _partial_timings(data, where: str) -> dict[str, Timing]:
    """key -> Timing of a partial file's JSON, every field checked (SpecsimError naming the first bad one)."""
    if not isinstance(data, dict) or type(data.get("schema_version")) is not int \
            or data["schema_version"] != SCHEMA_VERSION:
        raise SpecsimError(f"{where}: expected an object with schema_version {SCHEMA_VERSION} written by this tool")
    if not isinstance(data.get("identity"), dict):
        raise SpecsimError(f"{where}.identity: expected an object, got {_show(data.get('identity'))}")
    timings = data.get("timings")
    if not isinstance(timings, dict):
        raise SpecsimError(f"{where}.timings: expected an object, got {_show(timings)}")
    return {k: Timing.from_json(v, f"{where}.timings[{k!r}]") for k, v in timings.items()}


def run_identity(models: dict[str, M.LoadedModel], threads: int) -> dict:
    """What must match for partial results to be reused."""
    ident = {f"{role}": f"{m.name} ({m.weights} weights)" for role, m in models.items()}
    first = models["target"]
    return {**ident, "device": first.device, "dtype": first.dtype, "threads": threads}


# --------------------------------------------------------------------------- sweep
def measure_latency(models: dict[str, M.LoadedModel], plan: LatencyPlan, *, partial: Path | None = None,
                    resume: bool = True, progress: bool = True, runner: Runner | None = None) -> dict[str, Timing]:
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
    units = plan_units([t for t in tasks if t.key not in state.timings], plan)
    done = [t for t in tasks if t.key in state.timings]
    bar = _progress_bar(sum(t.weight for t in tasks), sum(t.weight for t in done), len(done), progress)
    try:
        for unit in units:
            bar.set_postfix_str(unit[0].key + (f" (+{len(unit) - 1} interleaved)" if len(unit) > 1 else ""),
                                refresh=True)
            state.timings.update(runner(unit, models, plan))
            if partial is not None:
                write_json_atomic(partial, state.to_json())
            bar.update(sum(t.weight for t in unit))
    finally:
        bar.close()
    return {t.key: state.timings[t.key] for t in tasks}


def _progress_bar(total: float, done: float, done_points: int, progress: bool):
    from tqdm import tqdm

    if done_points and progress:
        print(f"resuming: {done_points} point(s) already measured", file=sys.stderr)
    return tqdm(total=total, initial=done, disable=not progress, file=sys.stderr, desc="calibrate latency",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed} elapsed, ~{remaining} left]{postfix}")


def _curve(points: list[tuple[float, Timing]]) -> Curve:
    points = sorted(points, key=lambda p: p[0])
    return Curve(x=tuple(float(x) for x, _ in points), ms=tuple(t.median_ms for _, t in points),
                 halfwidth_ms=tuple(t.halfwidth_ms for _, t in points), n=tuple(t.n for _, t in points))


def latency_section(timings: dict[str, Timing], plan: LatencyPlan, provenance=None) -> LatencySection:
    """Assemble the measured timings into a LatencySection (curves of medians with half-widths)."""
    v = plan.verify_context_tokens

    def get(key: str) -> Timing | None:
        return timings.get(key)

    def curve(pairs: list[tuple[float, str]]) -> Curve | None:
        pts = [(x, get(k)) for x, k in pairs if get(k) is not None]
        return _curve(pts) if pts else None

    vision = {role: get(f"{role}.vision.images=1") for role in ("target", "draft")}
    caption = get(f"captioner.caption.tokens={plan.caption_tokens}")
    return LatencySection(
        target_decode_ms_by_context=curve([(c, _forward_key("target", 1, c, 1)) for c in plan.contexts_tokens]),
        draft_decode_ms_by_context=curve([(c, _forward_key("draft", 1, c, 1)) for c in plan.contexts_tokens]),
        target_verify_ms_by_gamma=curve([(g, _forward_key("target", 1, v, g + 1)) for g in plan.gammas]),
        target_prefill_ms_by_tokens=curve([(n, f"target.prefill.tokens={n}") for n in plan.prefill_tokens]),
        draft_prefill_ms_by_tokens=curve([(n, f"draft.prefill.tokens={n}") for n in plan.prefill_tokens]),
        draft_decode_ms_by_batch=curve([(b, _forward_key("draft", b, v, 1)) for b in plan.batch_sizes]),
        verify_context_tokens=v,
        vision_encoder_ms_per_image=None if vision["target"] is None else vision["target"].median_ms,
        draft_vision_encoder_ms_per_image=None if vision["draft"] is None else vision["draft"].median_ms,
        captioner_ms_per_image=None if caption is None else caption.median_ms,
        provenance=provenance,
    )


def worst_rel_halfwidth(timings: dict[str, Timing]) -> tuple[str, float]:
    """(key, half-width / median) of the least precise point."""
    key = max(timings, key=lambda k: timings[k].rel_halfwidth)
    return key, timings[key].rel_halfwidth


# --------------------------------------------------------------------------- provenance and output
def device_name(device: str) -> str:
    """Human-readable device: the GPU name, or the CPU model name with its logical CPU count."""
    import os
    import platform

    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            name = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), name)
    except OSError:
        pass
    return f"cpu: {name} ({os.cpu_count()} logical CPUs)"


def measurement_provenance(models: dict[str, M.LoadedModel], *, notes: str = "") -> Provenance:
    """Provenance of a latency run: device, dtype, threads, software versions, real/random weights."""
    import datetime
    import platform

    import torch
    import transformers

    import specsim

    target, draft = models["target"], models["draft"]
    weights = {m.weights for m in models.values()}
    mixed = "" if len(weights) == 1 else "weights: " + ", ".join(f"{r} {m.weights}" for r, m in models.items())
    captioner = f"captioner: {models['captioner'].name}" if "captioner" in models else ""
    return Provenance(
        target=target.name, draft=draft.name, device=device_name(target.device), dtype=target.dtype,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), source="measured",
        software={"torch": torch.__version__, "transformers": transformers.__version__,
                  "python": platform.python_version(), "specsim": specsim.__version__},
        weights="random" if "random" in weights else "real", threads=torch.get_num_threads(),
        notes="; ".join(x for x in (mixed, captioner, notes) if x))


def save_latency_profile(out: str | Path, section: LatencySection, provenance: Provenance, *, name: str = "",
                         description: str = "") -> Path:
    """Write ``section`` into the profile at ``out``: a new profile, or the latency of an existing one
    (its acceptance and checks are kept; a warning is printed if its models differ)."""
    from dataclasses import replace

    out = Path(out)
    if out.is_file():
        profile = load_profile(str(out))
        if (profile.provenance.target, profile.provenance.draft) != (provenance.target, provenance.draft):
            print(f"note: {out} was for target {profile.provenance.target!r} / draft {profile.provenance.draft!r}; "
                  f"its latency section now comes from {provenance.target!r} / {provenance.draft!r}", file=sys.stderr)
        profile = replace(profile, latency=section)
    else:
        profile = Profile(provenance=provenance, latency=section, name=name or out.stem, description=description)
    return save_profile(profile, out)


def calibrate_latency(models: dict[str, M.LoadedModel], plan: LatencyPlan, out: str | Path, *, resume: bool = True,
                      progress: bool = True, name: str = "", description: str = "", notes: str = "",
                      runner: Runner | None = None) -> tuple[Path, dict[str, Timing]]:
    """Measure (resumable), then write the profile at ``out`` atomically and drop the partial file."""
    part = partial_path(out)
    timings = measure_latency(models, plan, partial=part, resume=resume, progress=progress, runner=runner)
    provenance = measurement_provenance(models, notes=notes)
    section = latency_section(timings, plan, provenance)
    path = save_latency_profile(out, section, provenance, name=name, description=description)
    part.unlink(missing_ok=True)
    return path, timings
