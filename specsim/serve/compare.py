"""SD on vs off under the same load, at one rate or over a sweep of rates: pure functions of a frozen
configuration (so any executor can map them over rates).

Both runs of a comparison serve the same requests (arrivals drawn from ``seed``); SD off is the same server
with γ = 0 (target-only decoding, no draft). SD pays at a rate when its p50 TPOT is below the target-only
one (TPOT speedup = off / on > 1); the sweep names the rate from which it stops paying for good
(:func:`specsim.hardware.batch_limit.paying_range`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specsim.bounds import RANGES, interval_arg
from specsim.draft_shapes.policies import GammaPolicy
from specsim.errors import SpecsimError
from specsim.hardware.batch_limit import Run, paying_range, paying_runs
from specsim.hardware.prices import usd_per_million_tokens
from specsim.jsonio import check_keys, field_int, field_num
from specsim.serve.arrivals import TRACE_KEYS, Requests, arrivals, mixed_image_requests, uniform_requests
from specsim.serve.metrics import ServeMetrics, Slo, summarize
from specsim.serve.scheduler import SchedulerConfig
from specsim.serve.simulator import simulate
from specsim.serve.speculation import AcceptanceSource
from specsim.serve.step_cost import StepCost

TARGET_ONLY = GammaPolicy(0)
# --slo-attainment (serve and tune): the share of requests that must meet the SLO
attainment_arg = interval_arg(0.0, 1.0, "a fraction in (0, 1]", lo_open=True)


@dataclass(frozen=True)
class Workload:
    """``requests`` requests of the same shape arriving at a rate (Gamma gaps of shape ``burstiness``, 1 =
    Poisson), each with ``images`` images or, given ``image_mix`` ((images, share), ...), a count drawn
    from it after the arrivals; or a fixed ``trace`` (then rates do not apply)."""

    requests: int = 1000
    prompt_tokens: int = 512
    images: int = 1
    output_tokens: int = 256
    burstiness: float = 1.0
    trace: Requests | None = None
    image_mix: tuple[tuple[int, float], ...] = ()

    def at_rate(self, rate_per_s: float | None, rng: np.random.Generator) -> Requests:
        if self.trace is not None:
            return self.trace.from_first_arrival()
        if rate_per_s is None:
            raise SpecsimError("workload: a rate is needed unless requests come from a trace")
        times = arrivals(self.requests, rate_per_s, rng, self.burstiness)
        if self.image_mix:
            return mixed_image_requests(times, self.prompt_tokens, self.image_mix, self.output_tokens, rng)
        return uniform_requests(times, self.prompt_tokens, self.images, self.output_tokens)

    def max_images(self) -> int:
        """The most images one request of this workload carries."""
        if self.trace is not None:
            return int(self.trace.images.max()) if len(self.trace.images) else 0
        if self.image_mix:
            return max(k for k, share in self.image_mix if share > 0)
        return self.images

    def longest_positions(self, image_tokens: int) -> int:
        """The most positions one request takes: its prompt, its images' ``image_tokens`` each, its output."""
        if self.trace is not None:
            t = self.trace
            return int(np.max(t.prompt_tokens + t.images * image_tokens + t.output_tokens, initial=0))
        return self.prompt_tokens + self.max_images() * image_tokens + self.output_tokens

    def to_json(self) -> dict:
        """The workload as JSON (a trace as its four columns)."""
        out = {k: getattr(self, k) for k in ("requests", "prompt_tokens", "images", "output_tokens")}
        out |= {"burstiness": self.burstiness, "image_mix": [list(p) for p in self.image_mix]}
        if self.trace is not None:
            t = self.trace
            cols = (t.arrival_s, t.prompt_tokens, t.images, t.output_tokens)
            out["trace"] = {k: c.tolist() for k, c in zip(TRACE_KEYS, cols)}
        return out

    @classmethod
    def from_json(cls, d: dict, where: str = "workload") -> Workload:
        """Inverse of :meth:`to_json`; errors name the field."""
        check_keys(d, (*_COUNTS, "burstiness", "image_mix", "trace"), where)
        counts = {k: field_int(d.get(k), f"{where}.{k}", lo=0) for k in _COUNTS}
        mix = tuple((int(k), float(w)) for k, w in d.get("image_mix", ()))
        trace = None
        if d.get("trace") is not None:
            cols = [np.asarray(d["trace"][k]) for k in TRACE_KEYS]
            trace = Requests(cols[0].astype(float), *(c.astype(np.int64) for c in cols[1:]))
        burst = field_num(d.get("burstiness"), f"{where}.burstiness", lo=1e-3, hi=1e3)
        return cls(**counts, burstiness=burst, trace=trace, image_mix=mix)


_COUNTS = ("requests", "prompt_tokens", "images", "output_tokens")


@dataclass(frozen=True)
class ServeSetup:
    """Everything but the rate: step costs, workload, scheduler, SD policy and acceptance, SLO, seed."""

    cost: StepCost
    workload: Workload
    policy: GammaPolicy
    acceptance: AcceptanceSource
    scheduler: SchedulerConfig = SchedulerConfig()
    slo: Slo | None = None
    seed: int = 0


@dataclass(frozen=True)
class Comparison:
    """SD on and off at one rate (None: a trace's own arrivals); ``tpot_speedup`` = off p50 / on p50."""

    rate_per_s: float | None
    sd: ServeMetrics
    target_only: ServeMetrics

    @property
    def tpot_speedup(self) -> float | None:
        on, off = self.sd.tpot_ms.p50, self.target_only.tpot_ms.p50
        return None if not on or off is None else off / on

    def usd_per_million_tokens(self, usd_per_hour: float | None) -> dict:
        """$ per million output tokens of SD and target-only at ``usd_per_hour`` (None: no price)."""
        sides = {"sd": self.sd, "target_only": self.target_only}
        return {k: usd_per_million_tokens(usd_per_hour, 1, m.output_tokens_per_s) for k, m in sides.items()}

    def to_json(self) -> dict:
        return {
            "rate_per_s": self.rate_per_s,
            "tpot_p50_speedup": self.tpot_speedup,
            "sd": self.sd.to_json(),
            "target_only": self.target_only.to_json(),
        }


def served(setup: ServeSetup, policy: GammaPolicy, rate_per_s: float | None) -> ServeMetrics:
    """Summary of ``setup``'s requests at ``rate_per_s`` (arrivals from ``setup.seed``) served with
    ``policy``."""
    requests = setup.workload.at_rate(rate_per_s, np.random.default_rng([setup.seed, 0]))
    run = simulate(
        requests,
        cost=setup.cost,
        policy=policy,
        acceptance=setup.acceptance,
        rng=np.random.default_rng([setup.seed, 1]),
        scheduler=setup.scheduler,
    )
    return summarize(run, setup.slo)


def compare_at(setup: ServeSetup, rate_per_s: float | None) -> Comparison:
    """Serve the same requests with SD (``setup.policy``) and target-only; summarise both."""
    return Comparison(
        rate_per_s, served(setup, setup.policy, rate_per_s), served(setup, TARGET_ONLY, rate_per_s)
    )


@dataclass(frozen=True)
class Sweep:
    """Comparisons over rates, and the rate from which SD's p50 TPOT stays worse than target-only (None:
    it pays at every rate swept, or at none: see ``pays_at_all``)."""

    rows: tuple[Comparison, ...]
    stops_paying_from_rate: float | None
    pays_at_all: bool

    def runs(self) -> tuple[Run, ...]:
        """The rates as runs where SD pays and where it loses (:func:`paying_runs`)."""
        return paying_runs([r.rate_per_s for r in self.rows], [r.tpot_speedup or 0.0 for r in self.rows])

    def to_json(self) -> dict:
        return {
            "rows": [r.to_json() for r in self.rows],
            "sd_stops_paying_from_rate_per_s": self.stops_paying_from_rate,
            "sd_pays_at_some_rate": self.pays_at_all,
            "sd_pays_at_rates_per_s": [r.rate_per_s for r in self.rows if (r.tpot_speedup or 0.0) >= 1.0],
        }


def sweep_rates(
    setup: ServeSetup, rates: Sequence[float], on_done: Callable[[], None] | None = None, jobs: int = 1
) -> Sweep:
    """:func:`compare_at` at every rate (in increasing order); ``on_done`` after each (progress). With
    ``jobs`` > 1 the rates run in that many processes (each comparison is a pure function of its setup and
    rate, so the result is the same)."""
    ordered = [float(r) for r in sorted(rates)]
    rows = []
    with local_pool(min(jobs, len(ordered))) as pool:
        for row in pool.map(compare_at, [setup] * len(ordered), ordered):
            rows.append(row)
            if on_done is not None:
                on_done()
    first, stop = paying_range([r.rate_per_s for r in rows], [r.tpot_speedup or 0.0 for r in rows])
    return Sweep(tuple(rows), stop, first is not None)


class _InProcess:
    """An executor that maps in this process (one job: no pool to start)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    map = staticmethod(map)


def local_pool(jobs: int):
    """A process pool of ``jobs`` workers, or this process for one (a context manager with ``map``)."""
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max_workers=jobs)
    return _InProcess()


def capacity_per_s(setup: ServeSetup, policy: GammaPolicy) -> float:
    """Requests per second the server completes when every request is already waiting (all arrive within
    microseconds, at the top of the rate range): a steady stream above it queues without bound."""
    return served(setup, policy, RANGES["rate_per_s"][1]).requests_per_s


def meets_slo(
    setup: ServeSetup,
    policy: GammaPolicy,
    rate_per_s: float,
    attainment: float,
    capacity: float | None = None,
) -> bool:
    """Whether at least ``attainment`` of the requests served at ``rate_per_s`` meet ``setup.slo``, and
    (given the server's ``capacity`` in req/s) the server keeps up with that rate."""
    if capacity is not None and rate_per_s > capacity:
        return False
    return served(setup, policy, rate_per_s).slo_met_fraction >= attainment


def max_rate_meeting_slo(
    setup: ServeSetup,
    policy: GammaPolicy,
    attainment: float = 0.9,
    *,
    start_per_s: float = 1.0,
    rel_tolerance: float = 0.02,
    capacity: float | None = None,
) -> float | None:
    """The highest rate (req/s), at most the server's ``capacity`` (:func:`capacity_per_s` when None), at
    which ``attainment`` of the requests meet ``setup.slo`` (DistServe's SLO attainment, Zhong et al. 2024):
    doubled or halved from ``start_per_s`` until it brackets a change, then bisected in log rate to
    ``rel_tolerance``; None when even the lowest rate misses. Assumes attainment falls as the rate grows."""
    if setup.slo is None:
        raise SpecsimError("--max-rate: needs --slo (the bounds a request must meet)")
    if not 0 < attainment <= 1:
        raise SpecsimError(f"--slo-attainment: expected a fraction in (0, 1], got {attainment!r}")
    capacity = capacity_per_s(setup, policy) if capacity is None else capacity
    lowest = max(1e-4, setup.workload.requests / RANGES["arrival_s"][1])  # spans at most 1e9 s
    rate, ok = start_per_s, meets_slo(setup, policy, start_per_s, attainment, capacity)
    step = 2.0 if ok else 0.5
    while True:
        nxt = rate * step
        if not lowest <= nxt <= RANGES["rate_per_s"][1]:
            return rate if ok else None
        nxt_ok = meets_slo(setup, policy, nxt, attainment, capacity)
        if nxt_ok != ok:
            lo, hi = (rate, nxt) if ok else (nxt, rate)
            break
        rate = nxt
    while hi / lo > 1 + rel_tolerance:
        mid = float(np.sqrt(lo * hi))
        lo, hi = (mid, hi) if meets_slo(setup, policy, mid, attainment, capacity) else (lo, mid)
    return lo


def max_rates(setup: ServeSetup, attainment: float = 0.9) -> dict:
    """``slo_attainment``, and per side ("sd": ``setup.policy``, "target_only") ``max_rate_per_s``
    (:func:`max_rate_meeting_slo`) and ``capacity_per_s`` (:func:`capacity_per_s`)."""
    if setup.slo is None:
        raise SpecsimError("--max-rate: needs --slo (the bounds a request must meet)")
    sides = {"sd": setup.policy, "target_only": TARGET_ONLY}
    capacity = {k: capacity_per_s(setup, p) for k, p in sides.items()}
    found = {k: max_rate_meeting_slo(setup, p, attainment, capacity=capacity[k]) for k, p in sides.items()}
    return {"slo_attainment": attainment, "max_rate_per_s": found, "capacity_per_s": capacity}
