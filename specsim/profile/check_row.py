"""One ``specsim check`` row: predicted vs measured τ and speedup at one γ (or tree, or policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.bounds import RANGES
from specsim.errors import SpecsimError
from specsim.jsonio import check_keys
from specsim.profile._fields import _drop_none, _int, _list, _num, _opt, _req, _show, _str


@dataclass(frozen=True)
class CheckRow:
    """One ``specsim check`` result: predicted vs measured at one γ for one method and scenario.

    ``speedup_*`` is the decode phase (ms per token after the first pass); ``request_speedup_*`` the whole
    request (schema 2). ``*_halfwidth`` are relative 95% confidence half-widths of the measured values over
    ``rounds`` repeats; ``terms_ms_per_block`` maps draft/verify/overhead to predicted and measured ms
    per block, and ``target_step`` to those of a target-only step.
    ``draft`` (optional) names a token tree ("tree:4,2,1", γ = its nodes) or a draft-length policy
    ("policy:heuristic:5", γ = its starting γ); absent for a fixed-γ chain.
    Sampled checks (``temperature`` T > 0; absent = greedy) add the 95% prediction intervals of the
    measured τ and decode-phase speedup (``tau_interval``, ``speedup_interval``: [lo, hi], from the Monte
    Carlo of :mod:`specsim.check.sampled`); ``rounds`` is then the number of seeds per prompt.
    ``batch`` (schema 3; absent: one request at a time) is B of a batched check: the batched engine against
    batched target-only decoding, B requests per batch (``prompts`` in all).
    ``synthetic_acceptance`` (absent: lossless decoding) names the schedule every block's accept decision
    followed (``specsim check --synthetic-acceptance SPEC``): the passes are real, the acceptance scripted.
    ``runtime`` (absent: this project's engine) names the engine that ran, e.g. ``llama.cpp``; its rows add
    ``speedup_predicted_counts``, the prediction with τ from the run's own counts (drafts proposed and
    accepted), which tests the costs alone (``speedup_predicted`` takes τ from the profile's traces).
    """

    method: str
    scenario: str
    gamma: int
    tau_predicted: float
    tau_measured: float
    speedup_predicted: float
    speedup_measured: float
    speedup_textbook: float | None = None
    target_ms_per_token: float | None = None
    sd_ms_per_token: float | None = None
    prompts: int | None = None
    new_tokens: int | None = None
    notes: str = ""
    speedup_halfwidth: float | None = None
    request_speedup_predicted: float | None = None
    request_speedup_measured: float | None = None
    request_speedup_halfwidth: float | None = None
    rounds: int | None = None
    terms_ms_per_block: dict | None = None
    draft: str | None = None
    temperature: float | None = None
    tau_interval: tuple[float, float] | None = None
    speedup_interval: tuple[float, float] | None = None
    batch: int | None = None
    synthetic_acceptance: str | None = None
    runtime: str | None = None
    speedup_predicted_counts: float | None = None

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__} | {"notes": self.notes or None}
        for k in ("tau_interval", "speedup_interval"):
            out[k] = None if out[k] is None else list(out[k])
        return _drop_none(out)

    @classmethod
    def from_json(cls, d: dict, where: str) -> CheckRow:
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {_show(d)}")
        check_keys(d, set(cls.__dataclass_fields__), where)
        pos = lambda v, w: _num(v, w, lo=0, hi=RANGES["ratio"][1])  # noqa: E731
        ratio = lambda v, w: _num(v, w, unit="ratio")  # noqa: E731
        ms = lambda v, w: _num(v, w, unit="ms")  # noqa: E731
        return cls(
            method=_str(_req(d, "method", where), f"{where}.method"),
            scenario=_str(_req(d, "scenario", where), f"{where}.scenario"),
            gamma=_int(_req(d, "gamma", where), f"{where}.gamma", lo=1, unit="gamma"),
            tau_predicted=_num(_req(d, "tau_predicted", where), f"{where}.tau_predicted", lo=1),
            tau_measured=_num(_req(d, "tau_measured", where), f"{where}.tau_measured", lo=1),
            speedup_predicted=ratio(_req(d, "speedup_predicted", where), f"{where}.speedup_predicted"),
            speedup_measured=ratio(_req(d, "speedup_measured", where), f"{where}.speedup_measured"),
            speedup_textbook=_opt(d, "speedup_textbook", ratio, where),
            target_ms_per_token=_opt(d, "target_ms_per_token", ms, where),
            sd_ms_per_token=_opt(d, "sd_ms_per_token", ms, where),
            prompts=_opt(d, "prompts", lambda v, w: _int(v, w, lo=1), where),
            new_tokens=_opt(d, "new_tokens", lambda v, w: _int(v, w, lo=1), where),
            notes=_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
            speedup_halfwidth=_opt(d, "speedup_halfwidth", pos, where),
            request_speedup_predicted=_opt(d, "request_speedup_predicted", ratio, where),
            request_speedup_measured=_opt(d, "request_speedup_measured", ratio, where),
            request_speedup_halfwidth=_opt(d, "request_speedup_halfwidth", pos, where),
            rounds=_opt(d, "rounds", lambda v, w: _int(v, w, lo=1), where),
            terms_ms_per_block=_opt(d, "terms_ms_per_block", _terms, where),
            draft=_opt(d, "draft", _str, where),
            temperature=_opt(d, "temperature", lambda v, w: _num(v, w, unit="temperature"), where),
            tau_interval=_opt(d, "tau_interval", lambda v, w: _interval(v, w, lo=1), where),
            speedup_interval=_opt(d, "speedup_interval", lambda v, w: _interval(v, w, lo=0), where),
            batch=_opt(d, "batch", lambda v, w: _int(v, w, lo=1, unit="batch"), where),
            synthetic_acceptance=_opt(d, "synthetic_acceptance", _str, where),
            runtime=_opt(d, "runtime", _str, where),
            speedup_predicted_counts=_opt(d, "speedup_predicted_counts", ratio, where),
        )


def _interval(value: Any, where: str, *, lo: float) -> tuple[float, float]:
    """[lo, hi] of a prediction interval: two finite numbers, lo <= hi."""
    pair = _list(value, where)
    if len(pair) != 2:
        raise SpecsimError(f"{where}: expected [lo, hi], got {_show(value)}")
    a, b = (_num(x, f"{where}[{i}]", lo=lo, hi=RANGES["ratio"][1]) for i, x in enumerate(pair))
    if a > b:
        raise SpecsimError(f"{where}: expected lo <= hi, got {_show(value)}")
    return a, b


def _terms(value: Any, where: str) -> dict:
    """{term: {"predicted": ms, "measured": ms}} of a check row."""
    if not isinstance(value, dict):
        raise SpecsimError(f"{where}: expected an object, got {_show(value)}")
    out = {}
    for term, pair in value.items():
        check_keys(pair if isinstance(pair, dict) else {}, {"predicted", "measured"}, f"{where}.{term}")
        out[term] = {
            k: _num(_req(pair, k, f"{where}.{term}"), f"{where}.{term}.{k}", lo=0)
            for k in ("predicted", "measured")
        }
    return out
