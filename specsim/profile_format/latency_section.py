"""The profile's latency section: measured tables (ms), a γ·c + v ratio, and the forward-cost model.

Every section with timings has a cost model: schema 2 measures one; a schema-1 section's 1-D tables
become a one-context one when it is built (:mod:`specsim.profile_format.table_cost_model`), not written back.
A section with only a published ratio (``block_cost``) has none: :attr:`LatencySection.published_ratio`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specsim.bounds import RANGES, check_range
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
from specsim.profile_format.cost_model import CostModel
from specsim.profile_format.provenance import Provenance
from specsim.profile_format.table_cost_model import TABLES_INTERPOLATION, tables_cost_model


@dataclass(frozen=True)
class Curve:
    """A measured table y_ms(x): x ascending (context tokens, prompt tokens, gamma or batch size).

    ``halfwidth_ms`` is the 95% confidence half-width of each median, ``n`` the repeats behind it.
    """

    x: tuple[float, ...]
    ms: tuple[float, ...]
    halfwidth_ms: tuple[float, ...] | None = None
    n: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        return drop_none(
            {
                "x": list(self.x),
                "ms": list(self.ms),
                "halfwidth_ms": None if self.halfwidth_ms is None else list(self.halfwidth_ms),
                "n": None if self.n is None else list(self.n),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str) -> Curve:
        check_keys(d if isinstance(d, dict) else {}, {"x", "ms", "halfwidth_ms", "n"}, where)
        xs = [
            field_num(v, f"{where}.x[{i}]", unit="tokens")
            for i, v in enumerate(field_list(field_req(d, "x", where), f"{where}.x"))
        ]
        ms = [
            field_num(v, f"{where}.ms[{i}]", unit="ms")
            for i, v in enumerate(field_list(field_req(d, "ms", where), f"{where}.ms"))
        ]
        if len(xs) != len(ms):
            raise SpecsimError(f"{where}: x has {len(xs)} values but ms has {len(ms)}")
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise SpecsimError(f"{where}.x: expected strictly increasing values, got {show(xs)}")
        hw = d.get("halfwidth_ms")
        if hw is not None:
            hw = [
                field_num(v, f"{where}.halfwidth_ms[{i}]", lo=0, hi=RANGES["ms"][1])
                for i, v in enumerate(field_list(hw, f"{where}.halfwidth_ms"))
            ]
            if len(hw) != len(xs):
                raise SpecsimError(f"{where}.halfwidth_ms: expected {len(xs)} values, got {len(hw)}")
        n = d.get("n")
        if n is not None:
            n = [field_int(v, f"{where}.n[{i}]", lo=1) for i, v in enumerate(field_list(n, f"{where}.n"))]
            if len(n) != len(xs):
                raise SpecsimError(f"{where}.n: expected {len(xs)} values, got {len(n)}")
        return cls(tuple(xs), tuple(ms), None if hw is None else tuple(hw), None if n is None else tuple(n))


@dataclass(frozen=True)
class BlockCost:
    """γ·c + v at one γ, known only as a ratio (e.g. derived from a paper's speedup table)."""

    gamma: int
    gamma_c_plus_v: float
    derivation: str

    def to_json(self) -> dict:
        return {"gamma": self.gamma, "gamma_c_plus_v": self.gamma_c_plus_v, "derivation": self.derivation}

    @classmethod
    def from_json(cls, d: dict, where: str) -> BlockCost:
        check_keys(d if isinstance(d, dict) else {}, {"gamma", "gamma_c_plus_v", "derivation"}, where)
        return cls(
            gamma=field_int(field_req(d, "gamma", where), f"{where}.gamma", lo=1, unit="gamma"),
            gamma_c_plus_v=_block_cost_ratio(d, where),
            derivation=field_str(field_req(d, "derivation", where), f"{where}.derivation"),
        )


_CURVES = (
    "target_decode_ms_by_context",  # Tp vs context tokens
    "draft_decode_ms_by_context",  # Tq vs context tokens, batch 1
    "target_verify_ms_by_gamma",  # Tv(gamma) at verify_context_tokens
    "target_prefill_ms_by_tokens",  # target prefill vs prompt tokens
    "draft_prefill_ms_by_tokens",  # draft prefill vs prompt tokens
    "draft_decode_ms_by_batch",  # Tq vs batch size (ensembles), at verify_context_tokens
)


@dataclass(frozen=True)
class LatencySection:
    """Measured latencies (ms). Every table is optional: what was not measured stays ``None``."""

    target_decode_ms_by_context: Curve | None = None
    draft_decode_ms_by_context: Curve | None = None
    target_verify_ms_by_gamma: Curve | None = None
    target_prefill_ms_by_tokens: Curve | None = None
    draft_prefill_ms_by_tokens: Curve | None = None
    draft_decode_ms_by_batch: Curve | None = None
    verify_context_tokens: int | None = None
    vision_encoder_ms_per_image: float | None = None
    draft_vision_encoder_ms_per_image: float | None = None
    captioner_ms_per_image: float | None = None
    # what each further image of the same prompt adds (its images go through the encoder in one call);
    # None: every image costs the one-image call
    vision_encoder_ms_per_extra_image: float | None = None
    draft_vision_encoder_ms_per_extra_image: float | None = None
    block_cost: BlockCost | None = None
    provenance: Provenance | None = None  # when latency was measured apart from acceptance
    cost_model: CostModel | None = None  # forward cost over rows × context × batch (module docstring)
    # built from the 1-D tables on construction, never written
    cost_model_from_tables: bool = field(default=False, init=False)

    def __post_init__(self):
        # A model built from the tables is derived state, rebuilt whenever the section is (a replace() of
        # a table must not keep the old model); a measured one (any other interpolation) is kept as given.
        derived = self.cost_model is None or self.cost_model.interpolation == TABLES_INTERPOLATION
        if derived:
            model = tables_cost_model(self)
            object.__setattr__(self, "cost_model", model)
        object.__setattr__(self, "cost_model_from_tables", derived and self.cost_model is not None)

    @property
    def published_ratio(self) -> BlockCost | None:
        """The published γ·c + v of a section with no timings to price forwards with, else None."""
        return self.block_cost if self.cost_model is None else None

    def vision_ms(self, images: int, draft: bool = False) -> float:
        """ms to encode one prompt's ``images`` in one call: the one-image call, plus the per-extra-image
        slope for each further image when measured, else ``images`` one-image calls; SpecsimError naming the
        field when it was not measured."""
        prefix = "draft_" if draft else ""
        one = getattr(self, f"{prefix}vision_encoder_ms_per_image")
        if images <= 0:
            return 0.0
        if one is None:
            raise SpecsimError(f"{prefix}vision_encoder_ms_per_image: not measured in this profile")
        extra = getattr(self, f"{prefix}vision_encoder_ms_per_extra_image")
        return images * one if extra is None else one + (images - 1) * extra

    def forward_costs(self) -> CostModel:
        """The cost model every prediction prices forwards with; SpecsimError when the section has none."""
        if self.cost_model is None:
            raise SpecsimError(
                "latency: no timings to price forwards with (a published ratio gamma*c+v only, or no "
                "latency section; run 'specsim calibrate latency')"
            )
        return self.cost_model

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for name in _CURVES:
            curve = getattr(self, name)
            if curve is not None:
                out[name] = curve.to_json()
        for name in (
            "verify_context_tokens",
            "vision_encoder_ms_per_image",
            "draft_vision_encoder_ms_per_image",
            "captioner_ms_per_image",
            "vision_encoder_ms_per_extra_image",
            "draft_vision_encoder_ms_per_extra_image",
        ):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.block_cost is not None:
            out["block_cost"] = self.block_cost.to_json()
        if self.cost_model is not None and not self.cost_model_from_tables:
            out["cost_model"] = self.cost_model.to_json()
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict, where: str = "latency") -> LatencySection:
        allowed = set(_CURVES) | {
            "verify_context_tokens",
            "vision_encoder_ms_per_image",
            "draft_vision_encoder_ms_per_image",
            "captioner_ms_per_image",
            "vision_encoder_ms_per_extra_image",
            "draft_vision_encoder_ms_per_extra_image",
            "block_cost",
            "provenance",
            "cost_model",
        }
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {show(d)}")
        check_keys(d, allowed, where)
        kwargs: dict[str, Any] = {name: field_opt(d, name, Curve.from_json, where) for name in _CURVES}
        for name, unit in (("target_verify_ms_by_gamma", "gamma"), ("draft_decode_ms_by_batch", "batch")):
            curve = kwargs[name]  # x counts drafts or sequences: whole numbers >= 1
            for i, x in enumerate(() if curve is None else curve.x):
                if x != int(x) or x < 1:
                    raise SpecsimError(f"{where}.{name}.x[{i}]: expected an integer {unit} >= 1, got {x}")
                check_range(x, unit, f"{where}.{name}.x[{i}]")
        kwargs["verify_context_tokens"] = field_opt(
            d, "verify_context_tokens", lambda v, w: field_int(v, w, lo=1, unit="tokens"), where
        )
        for name in (
            "vision_encoder_ms_per_image",
            "draft_vision_encoder_ms_per_image",
            "captioner_ms_per_image",
            "vision_encoder_ms_per_extra_image",
            "draft_vision_encoder_ms_per_extra_image",
        ):
            kwargs[name] = field_opt(
                d, name, lambda v, w: field_num(v, w, lo=0, unit="ms", zero_ok=True), where
            )
        kwargs["block_cost"] = field_opt(d, "block_cost", BlockCost.from_json, where)
        kwargs["provenance"] = field_opt(d, "provenance", Provenance.from_json, where)
        kwargs["cost_model"] = field_opt(d, "cost_model", CostModel.from_json, where)
        return cls(**kwargs)


def _block_cost_ratio(d: dict, where: str) -> float:
    """γ·c + v of a BlockCost: at least 1, because v = Tv/Tp >= 1 (verifying costs at least one target
    forward), so that speedup = tau/(γ·c + v) <= tau <= γ+1 and the textbook c = (γ·c + v - 1)/γ >= 0."""
    value = field_num(field_req(d, "gamma_c_plus_v", where), f"{where}.gamma_c_plus_v", unit="ratio")
    if value < 1:
        raise SpecsimError(
            f"{where}.gamma_c_plus_v: expected >= 1 (v = Tv/Tp >= 1, so speedup <= tau <= gamma+1), "
            f"got {value}"
        )
    return value
