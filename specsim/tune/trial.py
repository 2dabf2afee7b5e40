"""One tuning trial: a deployment served under a study's load, as a pure function of a frozen configuration.

A :class:`TrialConfig` is the study's fixed :class:`TuneContext` (target, workload and rate, SLO, token
budget, seed) and one :class:`Deployment` (device, runtime, TP, draft option, serving γ policy,
``max_num_seqs``). :func:`run_trial` prices it as ``specsim serve`` does (its step cost from
:func:`specsim.serve.serve_request.roofline_step_cost`, :func:`specsim.serve.compare.served`): the same
arrivals and acceptance draws for every deployment. A deployment that cannot run is a :class:`TrialResult`
that does not fit, with the reason. Both dataclasses serialise with ``schema_version``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.predict.acceptance_source import parse_acceptance
from specsim.serve.compare import ServeSetup, Workload, served
from specsim.serve.metrics import ServeMetrics, Slo
from specsim.serve.roofline_cost import RooflineStepCost
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.serve_request import ServeRequest, roofline_step_cost
from specsim.serve.speculation import serving_source

SCHEMA_VERSION = 1
TRACES_PREFIX = "traces:"
IMAGE_AXIS = {  # what a draft pass's prompt holds of each image (not a drafting kind: any kind with a model)
    "M": "the draft's prompt keeps the images (multimodal drafting)",
    "T": "the draft's prompt drops the images (text-only drafting)",
}


@dataclass(frozen=True)
class DraftOption:
    """A drafting kind (a name of :func:`specsim.draft_kinds.registry.draft_kinds`), its draft model or head
    (None: a lookup kind, or a head kind's preset head for the target), the image axis of the draft's prompt
    (``M`` keeps each image's positions; ``T`` drops them, serve's ``--draft-image-tokens 0``) and its
    acceptance, a spec of :func:`specsim.predict.acceptance_source.parse_acceptance` (``0.7``, ...)."""

    model: str | None
    kind: str
    acceptance: str
    images: str = "M"

    @property
    def label(self) -> str:
        return f"{self.model or ''}:{self.kind}{':T' if self.images == 'T' else ''}@{self.acceptance}"

    @property
    def draft_image_tokens(self) -> int | None:
        """Positions per image in the draft's prompt (serve's ``--draft-image-tokens``; None: the
        target's)."""
        return 0 if self.images == "T" else None

    @classmethod
    def from_json(cls, d: dict) -> DraftOption:
        d = dict(d)
        if d["kind"] in IMAGE_AXIS:  # a record from before the registry: kind M/T was a draft model's
            d["images"], d["kind"] = d["kind"], "model"
        return cls(**d)


@dataclass(frozen=True)
class Deployment:
    """What a study chooses: device (name or JSON), runtime (None: the device's default), TP, draft
    option, serving γ policy and ``max_num_seqs``."""

    device: str
    runtime: str | None
    tp: int
    draft: DraftOption
    policy: GammaPolicy
    max_num_seqs: int

    def to_json(self) -> dict:
        p = self.policy
        return {
            "device": self.device,
            "runtime": self.runtime,
            "tp": self.tp,
            "draft": {
                "model": self.draft.model,
                "kind": self.draft.kind,
                "acceptance": self.draft.acceptance,
                "images": self.draft.images,
            },
            "gamma": p.gamma,
            "gamma_by_batch": [list(r) for r in p.by_batch],
            "sd_off_from_batch": p.off_from_batch,
            "max_num_seqs": self.max_num_seqs,
        }

    @classmethod
    def from_json(cls, d: dict) -> Deployment:
        policy = GammaPolicy(d["gamma"], tuple(tuple(r) for r in d["gamma_by_batch"]), d["sd_off_from_batch"])
        draft = DraftOption.from_json(d["draft"])
        return cls(d["device"], d["runtime"], d["tp"], draft, policy, d["max_num_seqs"])

    def with_policy(self, policy: GammaPolicy) -> Deployment:
        return Deployment(self.device, self.runtime, self.tp, self.draft, policy, self.max_num_seqs)


@dataclass(frozen=True)
class TuneContext:
    """What every trial of a study shares: the target, the image size (None: the default), the workload
    and its rate (None: a trace's own arrivals), the SLO, the token budget per step and the seed."""

    target: str
    workload: Workload
    rate_per_s: float | None
    slo: Slo | None = None
    max_num_batched_tokens: int = 8192
    seed: int = 0
    image_size: tuple[int, int] | None = None

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "workload": self.workload.to_json(),
            "rate_per_s": self.rate_per_s,
            "slo": None if self.slo is None else vars(self.slo).copy(),
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "seed": self.seed,
            "image_size": None if self.image_size is None else list(self.image_size),
        }

    @classmethod
    def from_json(cls, d: dict) -> TuneContext:
        size = d.get("image_size")
        return cls(
            d["target"],
            Workload.from_json(d["workload"]),
            d["rate_per_s"],
            None if d["slo"] is None else Slo(**d["slo"]),
            d["max_num_batched_tokens"],
            d["seed"],
            None if size is None else (int(size[0]), int(size[1])),
        )


@dataclass(frozen=True)
class TrialConfig:
    """One simulation: the study's context and one deployment."""

    context: TuneContext
    deployment: Deployment

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "context": self.context.to_json(),
            "deployment": self.deployment.to_json(),
        }

    @classmethod
    def from_json(cls, d: dict) -> TrialConfig:
        _check_schema(d, "trial config")
        return cls(TuneContext.from_json(d["context"]), Deployment.from_json(d["deployment"]))


@dataclass(frozen=True)
class TrialResult:
    """What a trial served: whether it fits (else ``reason``), its GPUs (TP), KV-cache positions and the
    summary of its run (:class:`specsim.serve.metrics.ServeMetrics`)."""

    fits: bool
    reason: str
    gpus: int
    kv_cache_tokens: int | None
    metrics: ServeMetrics | None

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "fits": self.fits,
            "reason": self.reason,
            "gpus": self.gpus,
            "kv_cache_tokens": self.kv_cache_tokens,
            "metrics": None if self.metrics is None else self.metrics.to_json(),
        }

    @classmethod
    def from_json(cls, d: dict) -> TrialResult:
        _check_schema(d, "trial result")
        m = d["metrics"]
        metrics = None if m is None else ServeMetrics.from_json(m)
        return cls(d["fits"], d["reason"], d["gpus"], d["kv_cache_tokens"], metrics)


def _check_schema(d: dict, what: str) -> None:
    if not isinstance(d, dict) or d.get("schema_version") != SCHEMA_VERSION:
        got = d.get("schema_version") if isinstance(d, dict) else d
        raise SpecsimError(f"{what}: expected schema_version {SCHEMA_VERSION}, got {got!r}")


def run_trial(config: TrialConfig) -> TrialResult:
    """Serve the context's workload with the deployment (see the module docstring)."""
    ctx, dep = config.context, config.deployment
    try:
        cost = step_cost(ctx.target, dep.draft, dep.device, dep.runtime, dep.tp, ctx.image_size)
        kv = cost.kv_cache_tokens()
        scheduler = SchedulerConfig(dep.max_num_seqs, ctx.max_num_batched_tokens, None, True, kv)
        acceptance = acceptance_source(dep.draft.acceptance)
        setup = ServeSetup(cost, ctx.workload, dep.policy, acceptance, scheduler, ctx.slo, ctx.seed)
        metrics = served(setup, dep.policy, ctx.rate_per_s)
    except SpecsimError as err:  # inputs were checked before the study: what is left is this deployment's
        return TrialResult(False, str(err), dep.tp, None, None)
    return TrialResult(True, "", dep.tp, kv, metrics)


def decode_batch(context: TuneContext, dep: Deployment, result: TrialResult) -> int:
    """The load's mean decode batch (requests per step that decodes, as ``specsim serve`` reads it) within
    1..max_num_seqs; a result read back as JSON (a stored study, a worker's) keeps none: simulated again."""
    mean = result.metrics.mean_decode_batch or run_trial(TrialConfig(context, dep)).metrics.mean_decode_batch
    return int(min(max(round(mean), 1), dep.max_num_seqs))


@lru_cache(maxsize=64)
def step_cost(target, draft: DraftOption, device, runtime, tp, image_size) -> RooflineStepCost:
    """The step cost ``specsim serve --draft-kind KIND`` prices one deployment with (cached per process)."""
    request = ServeRequest(
        target=target,
        draft=draft.model,
        draft_kind=draft.kind,
        image_size=None if image_size is None else f"{image_size[0]}x{image_size[1]}",
        device=device,
        runtime=runtime,
        tp=tp,
        draft_image_tokens=draft.draft_image_tokens,
    )
    return roofline_step_cost(request)


@lru_cache(maxsize=64)
def acceptance_source(spec: str):
    """The serving draws of a draft option's acceptance (:class:`DraftOption`), read by the one acceptance
    source of every command (:func:`specsim.predict.acceptance_source.parse_acceptance`)."""
    return serving_source(parse_acceptance(spec, "acceptance"))
