"""One serving check row (``specsim check --serve-rates``): predicted vs measured serving metrics of a real
server loop at one request rate, SD or target-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.bounds import RANGES
from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, drop_none, field_int, field_num, field_opt, field_req, field_str, show

# the metrics a row compares: p50/p90 TTFT and TPOT (ms), p50 end-to-end latency (ms), output tokens/s
SERVE_METRICS = (
    "ttft_p50_ms",
    "ttft_p90_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "e2e_p50_ms",
    "output_tokens_per_s",
)


@dataclass(frozen=True)
class ServeCheckRow:
    """One serving check result (schema 3, optional ``serve_checks``).

    ``requests`` requests of ``scenario`` arriving as a seeded Poisson process at ``rate_per_s``, at most
    ``max_num_seqs`` at once, ``new_tokens`` each at most; the SD side ``method`` and ``gamma`` (0:
    target-only). ``metrics`` maps each name of :data:`SERVE_METRICS` to its predicted and measured value
    (mean over ``rounds``) and the measured value's relative 95% half-width. Optional:
    ``synthetic_acceptance``, ``runtime``. Field notes: ARCHITECTURE.md, Notes by module.
    """

    method: str
    scenario: str
    gamma: int
    rate_per_s: float
    requests: int
    new_tokens: int
    max_num_seqs: int
    seed: int
    rounds: int
    metrics: dict
    notes: str = ""
    synthetic_acceptance: str | None = None
    runtime: str | None = None

    def error(self, metric: str) -> float:
        """predicted / measured − 1 of ``metric``."""
        m = self.metrics[metric]
        return m["predicted"] / m["measured"] - 1.0

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return drop_none(out | {"notes": self.notes or None})

    @classmethod
    def from_json(cls, d: dict, where: str) -> ServeCheckRow:
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {show(d)}")
        check_keys(d, set(cls.__dataclass_fields__), where)
        count = lambda v, w: field_int(v, w, lo=1)  # noqa: E731
        return cls(
            method=field_str(field_req(d, "method", where), f"{where}.method"),
            scenario=field_str(field_req(d, "scenario", where), f"{where}.scenario"),
            gamma=_gamma(field_req(d, "gamma", where), f"{where}.gamma"),
            rate_per_s=field_num(field_req(d, "rate_per_s", where), f"{where}.rate_per_s", lo=1e-6, hi=1e6),
            requests=count(field_req(d, "requests", where), f"{where}.requests"),
            new_tokens=count(field_req(d, "new_tokens", where), f"{where}.new_tokens"),
            max_num_seqs=count(field_req(d, "max_num_seqs", where), f"{where}.max_num_seqs"),
            seed=field_int(field_req(d, "seed", where), f"{where}.seed", lo=0, unit="seed"),
            rounds=count(field_req(d, "rounds", where), f"{where}.rounds"),
            metrics=_metrics(field_req(d, "metrics", where), f"{where}.metrics"),
            notes=field_opt(d, "notes", lambda v, w: field_str(v, w, allow_empty=True), where) or "",
            synthetic_acceptance=field_opt(d, "synthetic_acceptance", field_str, where),
            runtime=field_opt(d, "runtime", field_str, where),
        )


def _gamma(value: Any, where: str) -> int:
    """γ of a serving row: 0 (target-only) or a γ in range."""
    g = field_int(value, where, lo=0)
    if g > RANGES["gamma"][1]:
        raise SpecsimError(f"{where}: expected an integer in 0..{RANGES['gamma'][1]}, got {g}")
    return g


def _metrics(value: Any, where: str) -> dict:
    """{metric: {"predicted", "measured", "halfwidth"}} with every name of SERVE_METRICS."""
    if not isinstance(value, dict):
        raise SpecsimError(f"{where}: expected an object, got {show(value)}")
    check_keys(value, set(SERVE_METRICS), where)
    out = {}
    for name in SERVE_METRICS:
        pair = field_req(value, name, where)
        if not isinstance(pair, dict):
            raise SpecsimError(f"{where}.{name}: expected an object, got {show(pair)}")
        check_keys(pair, {"predicted", "measured", "halfwidth"}, f"{where}.{name}")
        out[name] = {
            k: field_num(field_req(pair, k, f"{where}.{name}"), f"{where}.{name}.{k}", lo=0, lo_open=True)
            for k in ("predicted", "measured")
        }  # halfwidth: null after one round (no spread to bound), else >= 0
        out[name]["halfwidth"] = field_opt(
            pair, "halfwidth", lambda v, w: field_num(v, w, lo=0), f"{where}.{name}"
        )
    for stem in ("ttft", "tpot"):  # a percentile below a lower one: no distribution has it
        for k in ("predicted", "measured"):
            p50, p90 = out[f"{stem}_p50_ms"][k], out[f"{stem}_p90_ms"][k]
            if p90 < p50:
                raise SpecsimError(f"{where}.{stem}_p90_ms.{k}: expected >= the p50's {p50:g}, got {p90:g}")
    return out
