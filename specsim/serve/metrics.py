"""Serving metrics of a simulated run: TTFT, TPOT, ITL, E2E percentiles, throughput and goodput under an SLO.

Per request (as ``vllm bench serve``): TTFT = first token − arrival; E2E = last token − arrival; TPOT =
(E2E − TTFT) / (output tokens − 1); ITL = gaps between successive tokens after the first (τ at once: one gap,
τ − 1 of 0). Duration = last finish − first arrival; throughput = output tokens / duration; goodput = requests
meeting every SLO bound / duration. Acceptance rate = accepted / draft tokens; mean acceptance length =
1 + accepted / SD blocks (= τ).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.report import clip
from specsim.serve.simulator import ServeRun

PERCENTILES = (50, 90, 99)
SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


@dataclass(frozen=True)
class Slo:
    """Service-level bounds (ms); None: not bounded."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def describe(self) -> str:
        return ",".join(
            f"{k}={getattr(self, f):g}" for k, f in SLO_KEYS.items() if getattr(self, f) is not None
        )


def parse_slo(text: str, where: str = "--slo") -> Slo:
    """'ttft=500,tpot=50' (ms; keys ttft, tpot, e2e) -> Slo; SpecsimError naming the bad part otherwise."""
    keys = ", ".join(SLO_KEYS)
    usage = f"{where}: expected bounds in ms like ttft=500,tpot=50 (keys {keys}), got {clip(text)!r}"
    values: dict[str, float] = {}
    for part in str(text).split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key.strip() not in SLO_KEYS:
            raise SpecsimError(usage)
        field = SLO_KEYS[key.strip()]
        if field in values:
            raise SpecsimError(f"{where}: {key.strip()}= given twice in {clip(text)!r}")
        try:
            ms = float(value)
        except ValueError:
            raise SpecsimError(usage) from None
        if not (np.isfinite(ms) and 0 < ms <= 1e8):
            raise SpecsimError(
                f"{where}: {key.strip()} expected a bound in ms in (0, 1e8], got {clip(value)!r}"
            )
        values[field] = ms
    return Slo(**values)


@dataclass(frozen=True)
class Percentiles:
    """p50, p90, p99 and mean of one metric (ms); None when no request has it."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        if values.size == 0:
            return cls(None, None, None, None)
        p = np.percentile(values, PERCENTILES)
        return cls(float(p[0]), float(p[1]), float(p[2]), float(values.mean()))


@dataclass(frozen=True)
class ServeMetrics:
    """Summary of one simulated run (times in ms, rates per second)."""

    requests: int
    duration_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    steps: int
    busy_fraction: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    slo: Slo | None = None
    goodput_requests_per_s: float | None = None
    slo_met_fraction: float | None = None
    max_context_tokens: int = 0  # the widest KV cache a decode step was priced at (not in to_json)
    mean_decode_batch: float = 0.0  # requests decoding per step that decodes (not in to_json)

    def to_json(self) -> dict:
        out = asdict(self)
        del out["max_context_tokens"], out["mean_decode_batch"]
        return out

    @classmethod
    def from_json(cls, d: dict) -> ServeMetrics:
        """Inverse of :meth:`to_json` (for summaries this package wrote, e.g. a stored tuning study)."""
        fields = dict(d)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            fields[key] = Percentiles(**fields[key])
        if fields.get("slo") is not None:
            fields["slo"] = Slo(**fields["slo"])
        return cls(**fields)


def per_request_ms(run: ServeRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, E2E) per request in ms; TPOT is NaN for one-token requests."""
    req = run.requests
    ttft = (run.first_token_s - req.arrival_s) * 1e3
    e2e = (run.finish_s - req.arrival_s) * 1e3
    rest = req.output_tokens - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(rest > 0, (e2e - ttft) / np.maximum(rest, 1), np.nan)
    return ttft, tpot, e2e


def itl_percentiles(gaps_ms: np.ndarray, zero_tokens: int) -> Percentiles:
    """Percentiles of the ITL multiset {gaps} ∪ {0 × zero_tokens} without building it (linear interpolation
    between closest ranks, as np.percentile)."""
    gaps = np.sort(np.asarray(gaps_ms, dtype=float))
    total = gaps.size + zero_tokens
    if total == 0:
        return Percentiles(None, None, None, None)

    def at(rank: np.ndarray) -> np.ndarray:
        i = rank - zero_tokens
        return np.where(i < 0, 0.0, gaps[np.clip(i, 0, max(gaps.size - 1, 0))] if gaps.size else 0.0)

    pos = np.asarray(PERCENTILES, dtype=float) / 100.0 * (total - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, total - 1)
    vals = at(lo) + (at(hi) - at(lo)) * (pos - lo)
    return Percentiles(*(float(v) for v in vals), float(gaps.sum() / total))


def summarize(run: ServeRun, slo: Slo | None = None) -> ServeMetrics:
    """Percentiles, throughput, acceptance counters and (with ``slo``) goodput of ``run``."""
    req = run.requests
    ttft, tpot, e2e = per_request_ms(run)
    duration = float(run.finish_s.max() - req.arrival_s.min())
    tokens = int(req.output_tokens.sum())
    good = fraction = None
    if slo is not None:
        ok = np.ones(len(req), dtype=bool)
        for field, values in (("ttft_ms", ttft), ("tpot_ms", np.nan_to_num(tpot, nan=0.0)), ("e2e_ms", e2e)):
            bound = getattr(slo, field)
            if bound is not None:
                ok &= values <= bound
        good, fraction = float(ok.sum() / duration), float(ok.mean())
    return ServeMetrics(
        requests=len(req),
        duration_s=duration,
        output_tokens=tokens,
        output_tokens_per_s=tokens / duration,
        requests_per_s=len(req) / duration,
        ttft_ms=Percentiles.of(ttft),
        tpot_ms=Percentiles.of(tpot[~np.isnan(tpot)]),
        itl_ms=itl_percentiles(run.itl_gaps_ms, run.itl_zero_tokens),
        e2e_ms=Percentiles.of(e2e),
        steps=run.steps,
        busy_fraction=run.busy_s / duration if duration > 0 else 1.0,
        acceptance_rate=run.accepted_tokens / run.draft_tokens if run.draft_tokens else None,
        mean_acceptance_length=1.0 + run.accepted_tokens / run.sd_blocks if run.sd_blocks else None,
        slo=slo,
        goodput_requests_per_s=good,
        slo_met_fraction=fraction,
        max_context_tokens=run.max_context_tokens,
        mean_decode_batch=run.mean_decode_batch,
    )
