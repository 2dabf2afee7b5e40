"""One ``specsim check`` row: predicted vs measured τ and speedup at one γ (or tree, or policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.bounds import RANGES
from specsim.errors import SpecsimError
from specsim.jsonio import (
    check_keys,
    drop_none,
    field_int,
    field_list,
    field_num,
    field_opt,
    field_req,
    field_str,
    show,
)


@dataclass(frozen=True)
class CheckRow:
    """One ``specsim check`` result: predicted vs measured at one γ for one method and scenario.

    ``speedup_*`` is the decode phase, ``request_speedup_*`` the whole request (schema 2); ``*_halfwidth`` are
    relative 95% half-widths over ``rounds``; ``terms_ms_per_block`` predicted and measured ms by term.
    Optional: ``draft`` (a tree or a policy), ``temperature`` with ``tau_interval``/``speedup_interval``
    (sampled), ``batch`` (schema 3), ``synthetic_acceptance`` (a scripted schedule; absent: lossless).
    Field notes: ARCHITECTURE.md, Notes by module.
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
        return drop_none(out)

    @classmethod
    def from_json(cls, d: dict, where: str) -> CheckRow:
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {show(d)}")
        check_keys(d, set(cls.__dataclass_fields__), where)
        pos = lambda v, w: field_num(v, w, lo=0, hi=RANGES["ratio"][1])  # noqa: E731
        ratio = lambda v, w: field_num(v, w, unit="ratio")  # noqa: E731
        ms = lambda v, w: field_num(v, w, unit="ms")  # noqa: E731
        return cls(
            method=field_str(field_req(d, "method", where), f"{where}.method"),
            scenario=field_str(field_req(d, "scenario", where), f"{where}.scenario"),
            gamma=field_int(field_req(d, "gamma", where), f"{where}.gamma", lo=1, unit="gamma"),
            tau_predicted=field_num(field_req(d, "tau_predicted", where), f"{where}.tau_predicted", lo=1),
            tau_measured=field_num(field_req(d, "tau_measured", where), f"{where}.tau_measured", lo=1),
            speedup_predicted=ratio(field_req(d, "speedup_predicted", where), f"{where}.speedup_predicted"),
            speedup_measured=ratio(field_req(d, "speedup_measured", where), f"{where}.speedup_measured"),
            speedup_textbook=field_opt(d, "speedup_textbook", ratio, where),
            target_ms_per_token=field_opt(d, "target_ms_per_token", ms, where),
            sd_ms_per_token=field_opt(d, "sd_ms_per_token", ms, where),
            prompts=field_opt(d, "prompts", lambda v, w: field_int(v, w, lo=1), where),
            new_tokens=field_opt(d, "new_tokens", lambda v, w: field_int(v, w, lo=1), where),
            notes=field_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
            speedup_halfwidth=field_opt(d, "speedup_halfwidth", pos, where),
            request_speedup_predicted=field_opt(d, "request_speedup_predicted", ratio, where),
            request_speedup_measured=field_opt(d, "request_speedup_measured", ratio, where),
            request_speedup_halfwidth=field_opt(d, "request_speedup_halfwidth", pos, where),
            rounds=field_opt(d, "rounds", lambda v, w: field_int(v, w, lo=1), where),
            terms_ms_per_block=field_opt(d, "terms_ms_per_block", _terms, where),
            draft=field_opt(d, "draft", field_str, where),
            temperature=field_opt(d, "temperature", lambda v, w: field_num(v, w, unit="temperature"), where),
            tau_interval=field_opt(d, "tau_interval", lambda v, w: _interval(v, w, lo=1), where),
            speedup_interval=field_opt(d, "speedup_interval", lambda v, w: _interval(v, w, lo=0), where),
            batch=field_opt(d, "batch", lambda v, w: field_int(v, w, lo=1, unit="batch"), where),
            synthetic_acceptance=field_opt(d, "synthetic_acceptance", field_str, where),
            runtime=field_opt(d, "runtime", field_str, where),
            speedup_predicted_counts=field_opt(d, "speedup_predicted_counts", ratio, where),
        )


def _interval(value: Any, where: str, *, lo: float) -> tuple[float, float]:
    """[lo, hi] of a prediction interval: two finite numbers, lo <= hi."""
    pair = field_list(value, where)
    if len(pair) != 2:
        raise SpecsimError(f"{where}: expected [lo, hi], got {show(value)}")
    a, b = (field_num(x, f"{where}[{i}]", lo=lo, hi=RANGES["ratio"][1]) for i, x in enumerate(pair))
    if a > b:
        raise SpecsimError(f"{where}: expected lo <= hi, got {show(value)}")
    return a, b


def _terms(value: Any, where: str) -> dict:
    """{term: {"predicted": ms, "measured": ms}} of a check row."""
    if not isinstance(value, dict):
        raise SpecsimError(f"{where}: expected an object, got {show(value)}")
    out = {}
    for term, pair in value.items():
        check_keys(pair if isinstance(pair, dict) else {}, {"predicted", "measured"}, f"{where}.{term}")
        out[term] = {
            k: field_num(field_req(pair, k, f"{where}.{term}"), f"{where}.{term}.{k}", lo=0)
            for k in ("predicted", "measured")
        }
    return out
