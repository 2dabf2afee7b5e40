"""The search space of ``specsim tune`` and its grammar: the deployments a study may choose.

Dimensions, each a list of choices (one choice: fixed): ``device``, ``runtime``, ``tp``, ``draft``
(:class:`DraftOption`), γ per decode-batch band (bands split after ``gamma_breaks``; 0 = no drafting),
``sd_off_from_batch`` and ``max_num_seqs``. A point is a :class:`~specsim.tune.trial.Deployment`.
Grammar: integer lists as ``1-4,8``, ``never`` in ``--sd-off-from-batch``, a draft option
``[MODEL][:KIND][:M|T]@ACCEPTANCE`` (ACCEPTANCE an i.i.d. α or ``traces:PROFILE[:METHOD[/SCENARIO]]``).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from specsim.bounds import RANGES
from specsim.draft_kinds.registry import draft_kind, draft_kinds
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.image_tokens import ImageSize
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.parallel import check_splittable, check_tp
from specsim.hardware.plan_inputs import refuse_image_size_without_vision, resolve_models
from specsim.hardware.runtime import DEFAULT_RUNTIMES, load_runtime
from specsim.report import clip, parse_int_list
from specsim.tune.trial import IMAGE_AXIS, TRACES_PREFIX, Deployment, DraftOption, acceptance_source

MAX_BATCH = int(RANGES["batch"][1])
NEVER, DEFAULT = "never", "default"
MAX_SPACE = 10**9  # deployments a space may hold (TPE samples it; exhaustive search enumerates it)


@dataclass(frozen=True)
class SearchSpace:
    """The choices per dimension (module docstring)."""

    devices: tuple[str, ...]
    drafts: tuple[DraftOption, ...]
    gammas: tuple[int, ...]
    runtimes: tuple[str | None, ...] = (None,)
    tps: tuple[int, ...] = (1,)
    gamma_breaks: tuple[int, ...] = ()
    sd_off_from_batch: tuple[int | None, ...] = (None,)
    max_num_seqs: tuple[int, ...] = (256,)

    def __post_init__(self) -> None:
        for name in ("devices", "drafts", "gammas", "runtimes", "tps", "sd_off_from_batch", "max_num_seqs"):
            if not getattr(self, name):
                raise SpecsimError(f"search space: {name} needs at least one choice")
        breaks = self.gamma_breaks
        if list(breaks) != sorted(set(breaks)) or (breaks and not 1 <= breaks[0] <= breaks[-1] < MAX_BATCH):
            raise SpecsimError(
                f"--gamma-breaks: expected increasing batch sizes in 1..{MAX_BATCH - 1}, got {list(breaks)}"
            )
        # one gamma in every band, or no step decoding past the last break: the bands would change nothing
        if breaks and len(set(self.gammas)) < 2:
            raise SpecsimError(
                f"--gamma-breaks: bands the gamma searched by batch, and --gamma gives one, {self.gammas[0]}"
            )
        if breaks and breaks[-1] >= max(self.max_num_seqs):
            raise SpecsimError(
                f"--gamma-breaks: expected breaks below the largest --max-num-seqs {max(self.max_num_seqs)} "
                f"(no step decodes more), got {breaks[-1]}"
            )
        if max(self.gammas) == 0 and any(b is not None for b in self.sd_off_from_batch):  # SD never on
            raise SpecsimError(
                "--sd-off-from-batch: shapes when SD runs, and every --gamma is 0 (SD never runs)"
            )
        late = [b for b in self.sd_off_from_batch if b is not None and b > max(self.max_num_seqs)]
        if late:  # no step decodes more than max_num_seqs: it would never turn SD off
            raise SpecsimError(
                "--sd-off-from-batch: expected at most the largest --max-num-seqs "
                f"{max(self.max_num_seqs)} (no step decodes more), got {late[0]}"
            )
        if self.size > MAX_SPACE:
            raise SpecsimError(f"search space: {self.size} deployments, expected at most {MAX_SPACE}")

    @property
    def bands(self) -> list[tuple[int, int]]:
        """The decode-batch bands of the γ policy, [(lo, hi), ...] covering 1..MAX_BATCH."""
        edges = [0, *self.gamma_breaks, MAX_BATCH]
        return [(lo + 1, hi) for lo, hi in zip(edges, edges[1:])]

    def dimensions(self) -> list[tuple[str, tuple]]:
        """(param name, choices as labels) of every dimension, in a fixed order."""
        bands = [("gamma" if lo == 1 else f"gamma_from_{lo}", self.gammas) for lo, _ in self.bands]
        return [
            ("device", self.devices),
            ("runtime", tuple(DEFAULT if r is None else r for r in self.runtimes)),
            ("tp", self.tps),
            ("draft", tuple(d.label for d in self.drafts)),
            *bands,
            ("sd_off_from_batch", tuple(NEVER if b is None else b for b in self.sd_off_from_batch)),
            ("max_num_seqs", self.max_num_seqs),
        ]

    def searched(self) -> list[tuple[str, tuple]]:
        """The dimensions with more than one choice (a study's params)."""
        return [(n, c) for n, c in self.dimensions() if len(c) > 1]

    @property
    def size(self) -> int:
        out = 1
        for _, choices in self.dimensions():
            out *= len(choices)
        return out

    def enumerate(self):
        """Every point's params (searched dimensions only), in product order."""
        names = [n for n, _ in self.searched()]
        for values in itertools.product(*(c for _, c in self.searched())):
            yield dict(zip(names, values))

    def deployment(self, params: dict) -> Deployment:
        """The deployment at ``params`` (labels of the searched dimensions; fixed ones from the space); its γ
        policy in one form (bands with the first band's γ fall back to it), so equal policies are one
        deployment, simulated once."""
        chosen = {n: params[n] if len(c) > 1 else c[0] for n, c in self.dimensions()}
        draft = {d.label: d for d in self.drafts}[chosen["draft"]]
        gammas = [int(chosen["gamma" if lo == 1 else f"gamma_from_{lo}"]) for lo, _ in self.bands]
        by_batch: list[list[int]] = []  # bands whose γ differs from the first band's, neighbours merged
        for (lo, hi), g in zip(self.bands[1:], gammas[1:]):
            if g == gammas[0]:
                continue
            if by_batch and by_batch[-1][2] == g and by_batch[-1][1] == lo - 1:
                by_batch[-1][1] = hi
            else:
                by_batch.append([lo, hi, g])
        off = chosen["sd_off_from_batch"]
        policy = GammaPolicy(gammas[0], tuple(map(tuple, by_batch)), None if off == NEVER else int(off))
        runtime = None if chosen["runtime"] == DEFAULT else chosen["runtime"]
        return Deployment(
            chosen["device"], runtime, int(chosen["tp"]), draft, policy, int(chosen["max_num_seqs"])
        )

    def to_json(self) -> dict:
        return {"size": self.size} | {n: list(c) for n, c in self.dimensions()}


def parse_space(
    *,
    devices: str,
    drafts: list[str],
    gammas: str,
    runtimes: str | None = None,
    tps: str = "1",
    gamma_breaks: str | None = None,
    sd_off_from_batch: str = NEVER,
    max_num_seqs: str = "256",
) -> SearchSpace:
    """A :class:`SearchSpace` from the CLI's strings (module docstring); SpecsimError naming the flag."""
    return SearchSpace(
        devices=_device_names(devices),
        drafts=tuple(dict.fromkeys(parse_draft_option(d) for d in drafts)),
        gammas=tuple(parse_int_list(gammas, name="--gamma", zero_ok=True)),
        runtimes=(None,) if runtimes is None else _names(runtimes, "--runtime"),
        tps=tuple(parse_int_list(tps, name="--tp", unit="gpus")),
        gamma_breaks=tuple(sorted(parse_int_list(gamma_breaks, name="--gamma-breaks", unit="batch")))
        if gamma_breaks
        else (),
        sd_off_from_batch=_off_list(sd_off_from_batch),
        max_num_seqs=tuple(parse_int_list(max_num_seqs, name="--max-num-seqs", unit="batch")),
    )


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in str(text).split(",")))
    if not all(names):
        raise SpecsimError(f"{flag}: expected comma-separated names, got {clip(text)!r}")
    return names


def _device_names(text: str) -> tuple[str, ...]:
    """Catalog names as ``hardware --device`` reads them (any case, an alias: 'H100' is h100-sxm), a file
    path as given; one device given twice, however spelt, is refused."""
    from specsim.hardware.device import resolve_device_name

    names = [p.strip() for p in str(text).split(",")]
    if not all(names):
        raise SpecsimError(f"--device: expected comma-separated names, got {clip(text)!r}")
    canonical = [resolve_device_name(n) or n for n in names]
    twice = next((n for i, n in enumerate(canonical) if n in canonical[:i]), None)
    if twice is not None:
        raise SpecsimError(f"--device: device {twice!r} given twice")
    return tuple(canonical)


def _off_list(text: str) -> tuple[int | None, ...]:
    """'never,64,128' → (None, 64, 128)."""
    parts = [p.strip() for p in str(text).split(",")]
    numbers = [p for p in parts if p.lower() != NEVER]
    off = parse_int_list(",".join(numbers), name="--sd-off-from-batch", unit="batch") if numbers else []
    return ((None,) if len(numbers) < len(parts) else ()) + tuple(off)


def parse_draft_option(text: str, where: str = "--draft") -> DraftOption:
    """``[MODEL][:KIND][:M|T]@ACCEPTANCE`` → :class:`DraftOption` (the acceptance and the kind checked, the
    model not yet: :func:`check_space`)."""
    model, at, acceptance = str(text).strip().partition("@")  # a spec may hold "@" (tau:T@G)
    if not at or not acceptance or not model.strip(":"):
        raise SpecsimError(
            f"{where}: expected [MODEL][:KIND][:M|T]@ACCEPTANCE (e.g. llava-1.5-68m@0.7, "
            f"llava-1.5-68m:T@0.7, :eagle3@0.8, :ngram@{TRACES_PREFIX}PROFILE:METHOD/SCENARIO), "
            f"got {clip(text)!r}"
        )
    head, colon, images = model.rpartition(":")
    model, images = (head, images) if colon and images in IMAGE_AXIS else (model, "M")
    head, colon, name = model.rpartition(":")  # a model name may hold ':' (zoo:draft)
    kind = draft_kind(None)
    if colon and (not head or _names_kind(name) or (name.isupper() and len(name) <= 4)):  # ':foo': a KIND
        kind, model = draft_kind(name, f"{where} {clip(text)!r}: KIND"), head
    elif not colon and _names_kind(name) and draft_kind(name).name != "model":  # ngram@0.5: the kind alone
        kind, model = draft_kind(name), ""
    model = model or None
    if model is None and kind.name == "model":
        raise SpecsimError(f"{where} {clip(text)!r}: drafting kind 'model' needs the draft model's name")
    if not kind.has_model and (model is not None or images != "M"):
        raise SpecsimError(
            f"{where} {clip(text)!r}: drafting kind {kind.name!r} uses no model (write "
            f":{kind.name}@ACCEPTANCE)"
        )
    if not acceptance.startswith(TRACES_PREFIX):
        try:
            acceptance = f"{float(acceptance):g}"
        except ValueError:
            pass
    try:
        acceptance_source(acceptance)
    except SpecsimError as err:
        raise SpecsimError(f"{where} {clip(text)!r}: {err}") from None
    return DraftOption(model, kind.name, acceptance, images)


def _names_kind(name: str) -> bool:
    key = name.strip().lower()
    return any(key == k.name or key in k.aliases for k in draft_kinds().values())


def check_space(space: SearchSpace, target: str, image_size: tuple[int, int] | None = None):
    """Refuse, before any simulation, what no deployment of ``space`` could mean: unknown models, devices
    or runtimes, a runtime for another kind of device, a TP degree a device or the target cannot take.
    (Whether weights and KV cache fit is a trial's answer, not an input error.) Returns the target's spec."""
    size = None if image_size is None else ImageSize(*image_size)
    target_spec = _named("--target", lambda: load_model_spec(target, image_size=size))
    refuse_image_size_without_vision(target_spec, size)  # before the drafts, which would name themselves
    for d in space.drafts:  # resolved as serve --draft-kind resolves them (a head kind's preset head, ...)
        kw = {"target": target, "draft": d.model, "draft_kind": d.kind, "image_size": size}
        try:
            resolve_models(pair=None, **kw)
        except SpecsimError as err:  # named by the spec, whose MODEL part stands for hardware's --draft
            said = str(err).removeprefix("--draft: ")
            hint = f"; write it before the kind: HEAD:{d.kind}@{d.acceptance}" if d.model is None else ""
            raise SpecsimError(f"--draft {d.label!r}: {said}{hint}") from None
    for name in space.devices:
        dev = _named("--device", lambda name=name: load_device(name))
        for rt_name in space.runtimes:
            rt = _named("--runtime", lambda r=rt_name, k=dev.kind: load_runtime(r or DEFAULT_RUNTIMES[k]))
            if rt.kind != dev.kind:
                raise SpecsimError(
                    f"--runtime: {rt.name!r} runs on {rt.kind} devices, but {name!r} is a {dev.kind}"
                )
            split = getattr(rt, "split_mode", "tensor")
            for tp in space.tps:
                _named("--tp", lambda tp=tp, dev=dev: check_tp(tp, dev))
                _named("--tp", lambda tp=tp, split=split: check_splittable(target_spec, tp, split, "target"))
    return target_spec


def _named(flag: str, load):
    """``load()``, its SpecsimError prefixed with the flag it is about."""
    try:
        return load()
    except SpecsimError as err:
        raise SpecsimError(f"{flag}: {err}") from None
