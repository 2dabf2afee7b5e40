"""One tuning trial: a deployment served under a study's load, as a pure function of a frozen configuration.

A :class:`TrialConfig` is the study's fixed :class:`TuneContext` (target, workload and rate, SLO, token
budget, seed) and one :class:`Deployment` (device, runtime, TP, draft option, serving γ policy,
``max_num_seqs``). :func:`run_trial` prices it through the library ``specsim serve`` uses (roofline step
costs, :func:`specsim.serve.compare.served`): the same arrivals and acceptance draws (seeded from the
context) for every deployment, so trials differ only by what they choose. A deployment that cannot run
(weights leave no KV cache, a prompt longer than the cache) is a :class:`TrialResult` that does not fit,
with the reason. Both dataclasses serialise with ``schema_version`` (results are stored in a study).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.hardware.device import load_device
from specsim.hardware.image_tokens import ImageSize
from specsim.hardware.model_resolution import load_model_spec
from specsim.hardware.runtime import DEFAULT_RUNTIMES, load_runtime
from specsim.predict.acceptance_source import parse_acceptance
from specsim.serve.compare import ServeSetup, Workload, served
from specsim.serve.metrics import ServeMetrics, Slo
from specsim.serve.roofline_cost import RooflineStepCost
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.speculation import serving_source
from specsim.tune.kinds import drafting_kind

SCHEMA_VERSION = 1
TRACES_PREFIX = "traces:"


@dataclass(frozen=True)
class DraftOption:
    """A draft model, its drafting kind (:mod:`specsim.tune.kinds`) and its acceptance, any spec of
    :func:`specsim.predict.acceptance_source.parse_acceptance`: an i.i.d. α (``0.7``),
    ``traces:PROFILE[:METHOD[/SCENARIO]]`` (a profile entry's greedy traces replayed), ``tau:T@G``, ...)."""

    model: str
    kind: str
    acceptance: str

    @property
    def label(self) -> str:
        return f"{self.model}:{self.kind}@{self.acceptance}"


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
            },
            "gamma": p.gamma,
            "gamma_by_batch": [list(r) for r in p.by_batch],
            "sd_off_from_batch": p.off_from_batch,
            "max_num_seqs": self.max_num_seqs,
        }

    @classmethod
    def from_json(cls, d: dict) -> Deployment:
        policy = GammaPolicy(d["gamma"], tuple(tuple(r) for r in d["gamma_by_batch"]), d["sd_off_from_batch"])
        draft = DraftOption(**d["draft"])
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

    @property
    def mean_concurrency(self) -> float | None:
        """Requests in the server on average (Little's law: requests/s × mean E2E)."""
        m = self.metrics
        return None if m is None or m.e2e_ms.mean is None else m.requests_per_s * m.e2e_ms.mean / 1e3

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
        cost = step_cost(
            ctx.target, dep.draft.model, dep.draft.kind, dep.device, dep.runtime, dep.tp, ctx.image_size
        )
        kv = cost.kv_cache_tokens()
        scheduler = SchedulerConfig(dep.max_num_seqs, ctx.max_num_batched_tokens, None, True, kv)
        acceptance = acceptance_source(dep.draft.acceptance)
        setup = ServeSetup(cost, ctx.workload, dep.policy, acceptance, scheduler, ctx.slo, ctx.seed)
        metrics = served(setup, dep.policy, ctx.rate_per_s)
    except SpecsimError as err:  # inputs were checked before the study: what is left is this deployment's
        return TrialResult(False, str(err), dep.tp, None, None)
    return TrialResult(True, "", dep.tp, kv, metrics)


@lru_cache(maxsize=64)
def step_cost(target, draft, kind, device, runtime, tp, image_size) -> RooflineStepCost:
    """The roofline step cost of one deployment's models and hardware (cached per process: a pure value)."""
    size = None if image_size is None else ImageSize(*image_size)
    dev = load_device(device)
    rt = load_runtime(runtime if runtime is not None else DEFAULT_RUNTIMES[dev.kind])
    return RooflineStepCost(
        load_model_spec(target, image_size=size),
        load_model_spec(draft, image_size=size),
        dev,
        rt,
        tp=tp,
        split=getattr(rt, "split_mode", "tensor"),
        draft_image_tokens_per_image=drafting_kind(kind).draft_image_tokens_per_image,
    )


@lru_cache(maxsize=64)
def acceptance_source(spec: str):
    """The serving draws of a draft option's acceptance (:class:`DraftOption`), read by the one acceptance
    source of every command (:func:`specsim.predict.acceptance_source.parse_acceptance`)."""
    return serving_source(parse_acceptance(spec, "acceptance"))
