"""Acceptance of one drafting method in one scenario: τ at γ, a histogram or traces, and what it costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.bounds import RANGES
from specsim.errors import SpecsimError, warn
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
from specsim.profile_format.provenance import Provenance
from specsim.profile_format.trace import Trace

# The method code prefix of an adaptive in-batch ensemble ("adaptive:MTC").
ADAPTIVE_PREFIX = "adaptive:"


@dataclass(frozen=True)
class MethodAcceptance:
    """Acceptance of one drafting method in one scenario (task, images per prompt).

    ``gamma`` is the γ τ was measured at (``None`` when τ is not given but traces are);
    ``accepted_histogram[k]`` counts blocks that accepted exactly k drafts (length γ+1).
    The cost fields say what the method pays: draft batch size (ensemble members), draft and target
    prompt tokens (set-up prefill), and whether it runs the draft's vision encoder or a captioner.
    ``provenance`` (optional) says where this entry alone comes from, e.g. a serving engine's counters
    imported into a profile measured elsewhere (engine, version, model, time window).
    """

    method: str
    scenario: str
    images_per_prompt: int
    task: str = ""
    gamma: int | None = None
    tau: float | None = None
    accepted_histogram: tuple[int, ...] | None = None
    traces: tuple[Trace, ...] = ()
    draft_batch_size: int = 1
    draft_prompt_tokens: float | None = None
    target_prompt_tokens: float | None = None
    uses_draft_vision: bool = False
    captions_per_prompt: int = 0
    weights: tuple[float, ...] | None = None  # ensemble member weights, if an ensemble
    notes: str = ""
    provenance: Provenance | None = (
        None  # when this entry was measured apart from the profile (an engine import)
    )

    @property
    def adaptive(self) -> bool:
        """An adaptive ensemble (``adaptive:...``), whose blocks also pay its weight update."""
        return self.method.startswith(ADAPTIVE_PREFIX)

    def to_json(self) -> dict:
        return drop_none(
            {
                "method": self.method,
                "scenario": self.scenario,
                "images_per_prompt": self.images_per_prompt,
                "task": self.task or None,
                "gamma": self.gamma,
                "tau": self.tau,
                "accepted_histogram": None
                if self.accepted_histogram is None
                else list(self.accepted_histogram),
                "traces": [t.to_json() for t in self.traces] or None,
                "draft_batch_size": self.draft_batch_size,
                "draft_prompt_tokens": self.draft_prompt_tokens,
                "target_prompt_tokens": self.target_prompt_tokens,
                "uses_draft_vision": self.uses_draft_vision or None,
                "captions_per_prompt": self.captions_per_prompt or None,
                "weights": None if self.weights is None else list(self.weights),
                "notes": self.notes or None,
                "provenance": None if self.provenance is None else self.provenance.to_json(),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str) -> MethodAcceptance:
        allowed = {
            "method",
            "scenario",
            "images_per_prompt",
            "task",
            "gamma",
            "tau",
            "accepted_histogram",
            "traces",
            "draft_batch_size",
            "draft_prompt_tokens",
            "target_prompt_tokens",
            "uses_draft_vision",
            "captions_per_prompt",
            "weights",
            "notes",
            "provenance",
        }
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {show(d)}")
        check_keys(d, allowed, where)
        gamma, tau, hist, traces = _acceptance_evidence(d, where)
        images = field_int(
            field_req(d, "images_per_prompt", where), f"{where}.images_per_prompt", lo=0, unit="images"
        )
        batch = field_int(d.get("draft_batch_size", 1), f"{where}.draft_batch_size", lo=1, unit="batch")
        weights = _ensemble_weights(d.get("weights"), batch, where)
        uses_vision = d.get("uses_draft_vision", False)
        if not isinstance(uses_vision, bool):
            raise SpecsimError(f"{where}.uses_draft_vision: expected true or false, got {show(uses_vision)}")
        if uses_vision and images == 0:
            # Harmless to the numbers (the draft vision cost is charged per image), but a mislabeled entry.
            warn(
                f"{where}: uses_draft_vision is true but images_per_prompt is 0, so no draft vision cost "
                "is charged; is the entry mislabeled?"
            )
        return cls(
            method=field_str(field_req(d, "method", where), f"{where}.method"),
            scenario=field_str(field_req(d, "scenario", where), f"{where}.scenario"),
            images_per_prompt=images,
            task=field_str(d.get("task", ""), f"{where}.task", allow_empty=True),
            gamma=gamma,
            tau=tau,
            accepted_histogram=None if hist is None else tuple(hist),
            traces=traces,
            draft_batch_size=batch,
            draft_prompt_tokens=field_opt(
                d, "draft_prompt_tokens", lambda v, w: field_num(v, w, unit="tokens"), where
            ),
            target_prompt_tokens=field_opt(
                d, "target_prompt_tokens", lambda v, w: field_num(v, w, unit="tokens"), where
            ),
            uses_draft_vision=uses_vision,
            captions_per_prompt=field_int(
                d.get("captions_per_prompt", 0), f"{where}.captions_per_prompt", lo=0, unit="images"
            ),
            weights=weights,
            notes=field_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
            provenance=field_opt(d, "provenance", Provenance.from_json, where),
        )


def _acceptance_evidence(d: dict, where: str) -> tuple[int | None, float | None, list | None, tuple]:
    """(gamma, tau, histogram, traces) of an acceptance entry, each valid and agreeing with the others."""
    gamma = field_opt(d, "gamma", lambda v, w: field_int(v, w, lo=1, unit="gamma"), where)
    tau = field_opt(d, "tau", lambda v, w: field_num(v, w, lo=1), where)
    if tau is not None:
        if gamma is None:
            raise SpecsimError(f"{where}.gamma: missing (tau={tau} needs the gamma it was measured at)")
        if tau > gamma + 1 + 1e-9:
            raise SpecsimError(f"{where}.tau: expected 1 <= tau <= gamma+1 = {gamma + 1}, got {tau}")
    hist = d.get("accepted_histogram")
    if hist is not None:
        hist = [
            field_int(v, f"{where}.accepted_histogram[{i}]", lo=0)
            for i, v in enumerate(field_list(hist, f"{where}.accepted_histogram"))
        ]
        if gamma is None or len(hist) != gamma + 1:
            raise SpecsimError(
                f"{where}.accepted_histogram: expected gamma+1 = "
                f"{None if gamma is None else gamma + 1} counts, got {len(hist)}"
            )
        if sum(hist) == 0:
            raise SpecsimError(f"{where}.accepted_histogram: expected at least one block, got all zeros")
    traces = tuple(
        Trace.from_json(t, f"{where}.traces[{i}]")
        for i, t in enumerate(field_list(d.get("traces", []), f"{where}.traces", nonempty=False))
    )
    if tau is None and hist is None and not traces:
        raise SpecsimError(f"{where}: expected tau, accepted_histogram or traces, got none")
    _check_tau_histogram(gamma, tau, hist, where)
    return gamma, tau, hist, traces


TAU_TOLERANCE = 0.005  # papers print tau with 2 decimals; calibrate writes tau and histogram exactly


def _check_tau_histogram(gamma: int | None, tau: float | None, hist: list | None, where: str) -> None:
    """tau and the histogram must tell one story: predictions use tau before the histogram, so a
    disagreement would silently ignore an edit. (That both agree with the greedy traces replayed at gamma
    is checked where profiles are loaded, :mod:`specsim.profiles.loading`: replay is not the contract's.)"""
    if tau is not None and hist is not None:
        tau_hist = sum((k + 1) * h for k, h in enumerate(hist)) / sum(hist)
        if abs(tau - tau_hist) > TAU_TOLERANCE:
            raise SpecsimError(
                f"{where}.tau: {tau} disagrees with accepted_histogram, which gives tau = "
                f"{tau_hist:.4f} at gamma={gamma} (expected within {TAU_TOLERANCE})"
            )


def _ensemble_weights(weights: Any, batch: int, where: str) -> tuple[float, ...] | None:
    """Ensemble member weights: one per draft batch member, finite, >= 0, not all zero."""
    if weights is None:
        return None
    weights = tuple(
        field_num(w, f"{where}.weights[{i}]", lo=0, hi=RANGES["ratio"][1])
        for i, w in enumerate(field_list(weights, f"{where}.weights"))
    )
    if len(weights) != batch:
        raise SpecsimError(
            f"{where}.weights: expected one weight per ensemble member (draft_batch_size = {batch}), "
            f"got {len(weights)}"
        )
    if not any(weights):
        raise SpecsimError(f"{where}.weights: expected at least one weight > 0, got all zeros")
    return weights
