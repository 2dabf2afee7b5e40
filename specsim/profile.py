"""The profile: the versioned JSON contract between ``calibrate`` (writes) and ``specsim`` (reads).

A profile holds provenance, latency tables (ms), acceptance per drafting method and scenario, and
the results of ``specsim check``. Every dataclass here is frozen and has ``to_json``/``from_json``;
``from_json`` validates every field and raises :class:`SpecsimError` naming the field and the bad
value (ranges per unit from :mod:`specsim.bounds`). :func:`save_profile` writes atomically
(temp file + rename, :mod:`specsim.jsonio`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specsim.adaptive import AdaptiveTrace, replay_at
from specsim.bounds import RANGES, check_range
from specsim.costmodel import CostModel
from specsim.errors import SpecsimError, warn
from specsim.jsonio import (  # noqa: F401  (write_json_atomic, write_text_atomic: their old import path, kept)
    check_keys,
    check_regular_file,
    drop_none,
    field_int,
    field_list,
    field_num,
    field_opt,
    field_req,
    field_str,
    read_json,
    show,
    write_json_atomic,
    write_text_atomic,
)

SCHEMA_VERSION = 2
# Schema 1: latency as 1-D tables only. Schema 2 adds ``latency.cost_model`` (forward cost over rows ×
# context × batch, :mod:`specsim.costmodel`) and per-trace prompt lengths; schema-1 files still load.
SCHEMA_VERSIONS = (1, 2)


# Field validators live in jsonio (one of each); the short private names keep this module readable.
_req, _show, _num, _int, _str, _list, _opt, _drop_none = (
    field_req, show, field_num, field_int, field_str, field_list, field_opt, drop_none)


# --------------------------------------------------------------------------- provenance
@dataclass(frozen=True)
class Provenance:
    """Where a profile's numbers come from; ``source`` is ``measured`` or ``published: <citation>``."""

    target: str
    draft: str
    device: str
    dtype: str
    date: str
    source: str
    software: dict[str, str] = field(default_factory=dict)
    weights: str = "real"  # "real" | "random" (architecture-only latency) | "n/a" (published)
    threads: int | None = None
    notes: str = ""

    def to_json(self) -> dict:
        return _drop_none({
            "target": self.target, "draft": self.draft, "device": self.device, "dtype": self.dtype,
            "date": self.date, "source": self.source, "software": dict(self.software),
            "weights": self.weights, "threads": self.threads, "notes": self.notes,
        })

    @classmethod
    def from_json(cls, d: dict, where: str = "provenance") -> Provenance:
        check_keys(d if isinstance(d, dict) else {}, {"target", "draft", "device", "dtype", "date", "source",
                                                      "software", "weights", "threads", "notes"}, where)
        source = _str(_req(d, "source", where), f"{where}.source")
        if source != "measured" and not source.startswith("published: "):
            raise SpecsimError(f"{where}.source: expected 'measured' or 'published: <citation>', got {source!r}")
        software = d.get("software", {})
        if not isinstance(software, dict) or not all(isinstance(v, str) for v in software.values()):
            raise SpecsimError(f"{where}.software: expected an object of name -> version strings, got {_show(software)}")
        weights = d.get("weights", "real")
        if weights not in ("real", "random", "n/a"):
            raise SpecsimError(f"{where}.weights: expected 'real', 'random' or 'n/a', got {_show(weights)}")
        return cls(
            target=_str(_req(d, "target", where), f"{where}.target"),
            draft=_str(_req(d, "draft", where), f"{where}.draft"),
            device=_str(_req(d, "device", where), f"{where}.device"),
            dtype=_str(_req(d, "dtype", where), f"{where}.dtype"),
            date=_str(_req(d, "date", where), f"{where}.date"),
            source=source,
            software=dict(software),
            weights=weights,
            threads=_opt(d, "threads", lambda v, w: _int(v, w, lo=1, unit="threads"), where),
            notes=_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
        )


# --------------------------------------------------------------------------- latency
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
        return _drop_none({
            "x": list(self.x), "ms": list(self.ms),
            "halfwidth_ms": None if self.halfwidth_ms is None else list(self.halfwidth_ms),
            "n": None if self.n is None else list(self.n),
        })

    @classmethod
    def from_json(cls, d: dict, where: str) -> Curve:
        check_keys(d if isinstance(d, dict) else {}, {"x", "ms", "halfwidth_ms", "n"}, where)
        xs = [_num(v, f"{where}.x[{i}]", unit="tokens") for i, v in enumerate(_list(_req(d, "x", where), f"{where}.x"))]
        ms = [_num(v, f"{where}.ms[{i}]", unit="ms")
              for i, v in enumerate(_list(_req(d, "ms", where), f"{where}.ms"))]
        if len(xs) != len(ms):
            raise SpecsimError(f"{where}: x has {len(xs)} values but ms has {len(ms)}")
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise SpecsimError(f"{where}.x: expected strictly increasing values, got {_show(xs)}")
        hw = d.get("halfwidth_ms")
        if hw is not None:
            hw = [_num(v, f"{where}.halfwidth_ms[{i}]", lo=0, hi=RANGES["ms"][1]) for i, v in enumerate(_list(hw, f"{where}.halfwidth_ms"))]
            if len(hw) != len(xs):
                raise SpecsimError(f"{where}.halfwidth_ms: expected {len(xs)} values, got {len(hw)}")
        n = d.get("n")
        if n is not None:
            n = [_int(v, f"{where}.n[{i}]", lo=1) for i, v in enumerate(_list(n, f"{where}.n"))]
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
            gamma=_int(_req(d, "gamma", where), f"{where}.gamma", lo=1, unit="gamma"),
            gamma_c_plus_v=_block_cost_ratio(d, where),
            derivation=_str(_req(d, "derivation", where), f"{where}.derivation"),
        )


_CURVES = (
    "target_decode_ms_by_context",   # Tp vs context tokens
    "draft_decode_ms_by_context",    # Tq vs context tokens, batch 1
    "target_verify_ms_by_gamma",     # Tv(gamma) at verify_context_tokens
    "target_prefill_ms_by_tokens",   # target prefill vs prompt tokens
    "draft_prefill_ms_by_tokens",    # draft prefill vs prompt tokens
    "draft_decode_ms_by_batch",      # Tq vs batch size (ensembles), at verify_context_tokens
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
    block_cost: BlockCost | None = None
    provenance: Provenance | None = None  # when latency was measured apart from acceptance
    cost_model: CostModel | None = None  # schema 2: forward cost over rows × context × batch

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for name in _CURVES:
            curve = getattr(self, name)
            if curve is not None:
                out[name] = curve.to_json()
        for name in ("verify_context_tokens", "vision_encoder_ms_per_image",
                     "draft_vision_encoder_ms_per_image", "captioner_ms_per_image"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.block_cost is not None:
            out["block_cost"] = self.block_cost.to_json()
        if self.cost_model is not None:
            out["cost_model"] = self.cost_model.to_json()
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict, where: str = "latency") -> LatencySection:
        allowed = set(_CURVES) | {"verify_context_tokens", "vision_encoder_ms_per_image",
                                  "draft_vision_encoder_ms_per_image", "captioner_ms_per_image",
                                  "block_cost", "provenance", "cost_model"}
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {_show(d)}")
        check_keys(d, allowed, where)
        kwargs: dict[str, Any] = {name: _opt(d, name, Curve.from_json, where) for name in _CURVES}
        gammas = kwargs["target_verify_ms_by_gamma"]
        if gammas is not None:
            for i, g in enumerate(gammas.x):
                if g != int(g) or g < 1:
                    raise SpecsimError(f"{where}.target_verify_ms_by_gamma.x[{i}]: expected an integer gamma >= 1, got {g}")
                check_range(g, "gamma", f"{where}.target_verify_ms_by_gamma.x[{i}]")
        batches = kwargs["draft_decode_ms_by_batch"]
        if batches is not None:
            for i, b in enumerate(batches.x):
                if b != int(b) or b < 1:
                    raise SpecsimError(f"{where}.draft_decode_ms_by_batch.x[{i}]: expected an integer batch >= 1, got {b}")
                check_range(b, "batch", f"{where}.draft_decode_ms_by_batch.x[{i}]")
        kwargs["verify_context_tokens"] = _opt(d, "verify_context_tokens",
                                               lambda v, w: _int(v, w, lo=1, unit="tokens"), where)
        for name in ("vision_encoder_ms_per_image", "draft_vision_encoder_ms_per_image", "captioner_ms_per_image"):
            kwargs[name] = _opt(d, name, lambda v, w: _num(v, w, lo=0, unit="ms", zero_ok=True), where)
        kwargs["block_cost"] = _opt(d, "block_cost", BlockCost.from_json, where)
        kwargs["provenance"] = _opt(d, "provenance", Provenance.from_json, where)
        kwargs["cost_model"] = _opt(d, "cost_model", CostModel.from_json, where)
        return cls(**kwargs)


# --------------------------------------------------------------------------- acceptance
@dataclass(frozen=True)
class Trace:
    """One prompt's teacher-forced acceptance trace over the target's own output.

    ``match[t]`` is 1 when the draft's argmax at position t equals the target's token (greedy);
    ``beta[t]`` = Σ_x min(p_t(x), q_t(x)) (sampling). Either may be absent, not both.
    ``tokens[t]`` (optional) is the target's token id at t, so positions can be classified afterwards
    (e.g. which tokens state an image fact). ``prompt_tokens`` / ``draft_prompt_tokens`` (optional,
    schema 2) are the prompt lengths the target and the draft saw, where the request's walk starts.
    Top-k traces (``calibrate acceptance --top-k K``) add
    ``draft_rank[t]``, the rank of the target's token in the draft's greedy distribution (0 = the
    draft's argmax, ties broken by token id; for ensembles the mixture q), and ``draft_top_probs[t]``,
    that distribution's K largest probabilities in decreasing order: greedy token trees replay exactly
    from the ranks (:mod:`specsim.tree_replay`), confidence policies from the top-1 probability.
    Sampled-path traces (``calibrate acceptance --sample-paths K``, optional) add ``accept_paths[k][t]``
    = min(1, q_t(y_t) / p_t(y_t)) along the target's k-th seeded sampled continuation y at the entry's
    temperature: the probability that a sampled draft at t is accepted given that the target emitted
    y_t there (Leviathan et al. 2023, §3.5; its mean over y_t ~ p_t is β_t). A sampled run follows its
    own tokens, so the sampled check simulates runs along these paths rather than the greedy output.
    Adaptive ensembles add ``adaptive`` (:class:`specsim.adaptive.AdaptiveTrace`): their exact replay.
    """

    match: tuple[int, ...] | None = None
    beta: tuple[float, ...] | None = None
    prompt_id: str | None = None
    tokens: tuple[int, ...] | None = None
    prompt_tokens: int | None = None
    draft_prompt_tokens: int | None = None
    draft_rank: tuple[int, ...] | None = None
    draft_top_probs: tuple[tuple[float, ...], ...] | None = None
    accept_paths: tuple[tuple[float, ...], ...] | None = None
    adaptive: AdaptiveTrace | None = None  # adaptive ensembles: what the exact block-by-block replay needs

    def to_json(self) -> dict:
        return _drop_none({
            "prompt_id": self.prompt_id,
            "match": None if self.match is None else list(self.match),
            "beta": None if self.beta is None else list(self.beta),
            "tokens": None if self.tokens is None else list(self.tokens),
            "prompt_tokens": self.prompt_tokens, "draft_prompt_tokens": self.draft_prompt_tokens,
            "draft_rank": None if self.draft_rank is None else list(self.draft_rank),
            "draft_top_probs": None if self.draft_top_probs is None else [list(p) for p in self.draft_top_probs],
            "accept_paths": None if self.accept_paths is None else [list(p) for p in self.accept_paths],
            "adaptive": None if self.adaptive is None else self.adaptive.to_json(),
        })

    @classmethod
    def from_json(cls, d: dict, where: str) -> Trace:
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {_show(d)}")
        check_keys(d, {"match", "beta", "prompt_id", "tokens", "prompt_tokens", "draft_prompt_tokens", "draft_rank",
                       "draft_top_probs", "accept_paths", "adaptive"}, where)
        match = d.get("match")
        beta = d.get("beta")
        if match is None and beta is None:
            raise SpecsimError(f"{where}: expected 'match' and/or 'beta', got neither")
        if match is not None:
            match = _list(match, f"{where}.match", nonempty=False)
            for i, m in enumerate(match):
                if m not in (0, 1) or isinstance(m, float):
                    raise SpecsimError(f"{where}.match[{i}]: expected 0 or 1, got {_show(m)}")
        if beta is not None:
            beta = [_num(b, f"{where}.beta[{i}]", lo=0, hi=1 + 1e-9)
                    for i, b in enumerate(_list(beta, f"{where}.beta", nonempty=False))]
        if match is not None and beta is not None and len(match) != len(beta):
            raise SpecsimError(f"{where}: match has {len(match)} positions but beta has {len(beta)}")
        tokens = d.get("tokens")
        if tokens is not None:
            tokens = [_int(t, f"{where}.tokens[{i}]", lo=0, unit="tokens") for i, t in enumerate(_list(tokens, f"{where}.tokens"))]
            if len(tokens) != len(match if match is not None else beta):
                raise SpecsimError(f"{where}.tokens: expected one per position "
                                   f"({len(match if match is not None else beta)}), got {len(tokens)}")
        rank, top = _top_k_fields(d, where, len(match if match is not None else beta), match)
        return cls(
            match=None if match is None else tuple(int(m) for m in match),
            beta=None if beta is None else tuple(min(b, 1.0) for b in beta),
            prompt_id=_opt(d, "prompt_id", _str, where),
            tokens=None if tokens is None else tuple(tokens),
            prompt_tokens=_opt(d, "prompt_tokens", lambda v, w: _int(v, w, lo=1), where),
            draft_prompt_tokens=_opt(d, "draft_prompt_tokens", lambda v, w: _int(v, w, lo=1), where),
            draft_rank=rank, draft_top_probs=top, accept_paths=_accept_paths(d.get("accept_paths"), where),
            adaptive=_adaptive(d, where, len(match if match is not None else beta)),
        )


def _adaptive(d: dict, where: str, positions: int) -> AdaptiveTrace | None:
    """The optional ``adaptive`` field of a trace, one entry per position."""
    if d.get("adaptive") is None:
        return None
    out = AdaptiveTrace.from_json(d["adaptive"], f"{where}.adaptive")
    if len(out) != positions:
        raise SpecsimError(f"{where}.adaptive.target_probs: expected one per position ({positions}), got {len(out)}")
    return out


def _accept_paths(paths: Any, where: str) -> tuple[tuple[float, ...], ...] | None:
    """Validated ``accept_paths`` of a trace: a non-empty list of non-empty lists of probabilities (each
    sampled path has its own length: it may end at EOS earlier or later than the greedy output)."""
    if paths is None:
        return None
    rows = _list(paths, f"{where}.accept_paths")
    return tuple(tuple(min(_num(b, f"{where}.accept_paths[{k}][{t}]", lo=0, hi=1 + 1e-9), 1.0)
                       for t, b in enumerate(_list(row, f"{where}.accept_paths[{k}]")))
                 for k, row in enumerate(rows))


def _top_k_fields(d: dict, where: str, positions: int, match) -> tuple:
    """Validated (draft_rank, draft_top_probs) of a trace; each optional, one entry per position."""
    rank, top = d.get("draft_rank"), d.get("draft_top_probs")
    if rank is not None:
        rank = tuple(_int(r, f"{where}.draft_rank[{i}]", lo=0)
                     for i, r in enumerate(_list(rank, f"{where}.draft_rank", nonempty=False)))
        if len(rank) != positions:
            raise SpecsimError(f"{where}.draft_rank: expected one per position ({positions}), got {len(rank)}")
        if match is not None and any((r == 0) != bool(m) for r, m in zip(rank, match)):
            i = next(i for i, (r, m) in enumerate(zip(rank, match)) if (r == 0) != bool(m))
            raise SpecsimError(f"{where}.draft_rank[{i}]: rank {rank[i]} contradicts match[{i}] = {match[i]} "
                               "(expected rank 0 exactly where the draft's argmax matches)")
    if top is not None:
        rows = _list(top, f"{where}.draft_top_probs", nonempty=False)
        if len(rows) != positions:
            raise SpecsimError(f"{where}.draft_top_probs: expected one row per position ({positions}), got {len(rows)}")
        top = tuple(tuple(_num(p, f"{where}.draft_top_probs[{i}][{j}]", lo=0, hi=1 + 1e-9)
                          for j, p in enumerate(_list(row, f"{where}.draft_top_probs[{i}]")))
                    for i, row in enumerate(rows))
        for i, row in enumerate(top):
            if len(row) != len(top[0]) or any(b > a + 1e-9 for a, b in zip(row, row[1:])) or sum(row) > 1 + 1e-6:
                raise SpecsimError(f"{where}.draft_top_probs[{i}]: expected {len(top[0])} decreasing probabilities "
                                   f"summing to <= 1, got {_show(list(row))}")
    return rank, top


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
    provenance: Provenance | None = None  # when this entry was measured apart from the profile (an engine import)

    @property
    def adaptive(self) -> bool:
        """An adaptive ensemble (``adaptive:...``), whose blocks also pay its weight update."""
        return self.method.startswith(ADAPTIVE_PREFIX)

    def to_json(self) -> dict:
        return _drop_none({
            "method": self.method, "scenario": self.scenario, "images_per_prompt": self.images_per_prompt,
            "task": self.task or None, "gamma": self.gamma, "tau": self.tau,
            "accepted_histogram": None if self.accepted_histogram is None else list(self.accepted_histogram),
            "traces": [t.to_json() for t in self.traces] or None,
            "draft_batch_size": self.draft_batch_size,
            "draft_prompt_tokens": self.draft_prompt_tokens,
            "target_prompt_tokens": self.target_prompt_tokens,
            "uses_draft_vision": self.uses_draft_vision or None,
            "captions_per_prompt": self.captions_per_prompt or None,
            "weights": None if self.weights is None else list(self.weights),
            "notes": self.notes or None,
            "provenance": None if self.provenance is None else self.provenance.to_json(),
        })

    @classmethod
    def from_json(cls, d: dict, where: str) -> MethodAcceptance:
        allowed = {"method", "scenario", "images_per_prompt", "task", "gamma", "tau", "accepted_histogram",
                   "traces", "draft_batch_size", "draft_prompt_tokens", "target_prompt_tokens",
                   "uses_draft_vision", "captions_per_prompt", "weights", "notes", "provenance"}
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {_show(d)}")
        check_keys(d, allowed, where)
        gamma, tau, hist, traces = _acceptance_evidence(d, where)
        images = _int(_req(d, "images_per_prompt", where), f"{where}.images_per_prompt", lo=0, unit="images")
        batch = _int(d.get("draft_batch_size", 1), f"{where}.draft_batch_size", lo=1, unit="batch")
        weights = _ensemble_weights(d.get("weights"), batch, where)
        uses_vision = d.get("uses_draft_vision", False)
        if not isinstance(uses_vision, bool):
            raise SpecsimError(f"{where}.uses_draft_vision: expected true or false, got {_show(uses_vision)}")
        if uses_vision and images == 0:
            # Harmless to the numbers (the draft vision cost is charged per image), but a mislabeled entry.
            warn(f"{where}: uses_draft_vision is true but images_per_prompt is 0, so no draft vision cost "
                 "is charged; is the entry mislabeled?")
        return cls(
            method=_str(_req(d, "method", where), f"{where}.method"),
            scenario=_str(_req(d, "scenario", where), f"{where}.scenario"),
            images_per_prompt=images,
            task=_str(d.get("task", ""), f"{where}.task", allow_empty=True),
            gamma=gamma, tau=tau,
            accepted_histogram=None if hist is None else tuple(hist),
            traces=traces,
            draft_batch_size=batch,
            draft_prompt_tokens=_opt(d, "draft_prompt_tokens", lambda v, w: _num(v, w, unit="tokens"), where),
            target_prompt_tokens=_opt(d, "target_prompt_tokens", lambda v, w: _num(v, w, unit="tokens"), where),
            uses_draft_vision=uses_vision,
            captions_per_prompt=_int(d.get("captions_per_prompt", 0), f"{where}.captions_per_prompt", lo=0,
                                     unit="images"),
            weights=weights,
            notes=_str(d.get("notes", ""), f"{where}.notes", allow_empty=True),
            provenance=_opt(d, "provenance", Provenance.from_json, where),
        )


def _acceptance_evidence(d: dict, where: str) -> tuple[int | None, float | None, list | None, tuple]:
    """(gamma, tau, histogram, traces) of an acceptance entry, each valid and agreeing with the others."""
    gamma = _opt(d, "gamma", lambda v, w: _int(v, w, lo=1, unit="gamma"), where)
    tau = _opt(d, "tau", lambda v, w: _num(v, w, lo=1), where)
    if tau is not None:
        if gamma is None:
            raise SpecsimError(f"{where}.gamma: missing (tau={tau} needs the gamma it was measured at)")
        if tau > gamma + 1 + 1e-9:
            raise SpecsimError(f"{where}.tau: expected 1 <= tau <= gamma+1 = {gamma + 1}, got {tau}")
    hist = d.get("accepted_histogram")
    if hist is not None:
        hist = [_int(v, f"{where}.accepted_histogram[{i}]", lo=0)
                for i, v in enumerate(_list(hist, f"{where}.accepted_histogram"))]
        if gamma is None or len(hist) != gamma + 1:
            raise SpecsimError(f"{where}.accepted_histogram: expected gamma+1 = "
                               f"{None if gamma is None else gamma + 1} counts, got {len(hist)}")
        if sum(hist) == 0:
            raise SpecsimError(f"{where}.accepted_histogram: expected at least one block, got all zeros")
    traces = tuple(Trace.from_json(t, f"{where}.traces[{i}]")
                   for i, t in enumerate(_list(d.get("traces", []), f"{where}.traces", nonempty=False)))
    if tau is None and hist is None and not traces:
        raise SpecsimError(f"{where}: expected tau, accepted_histogram or traces, got none")
    _check_agreement(gamma, tau, hist, traces, where)
    return gamma, tau, hist, traces


TAU_TOLERANCE = 0.005  # papers print tau with 2 decimals; calibrate writes tau and histogram exactly


def _check_agreement(gamma: int | None, tau: float | None, hist: list | None, traces: tuple, where: str) -> None:
    """tau, the histogram and the greedy traces (replayed at gamma) must tell one story: predictions use
    the traces first, then tau, then the histogram, so a disagreement would silently ignore an edit."""
    if tau is not None and hist is not None:
        tau_hist = sum((k + 1) * h for k, h in enumerate(hist)) / sum(hist)
        if abs(tau - tau_hist) > TAU_TOLERANCE:
            raise SpecsimError(f"{where}.tau: {tau} disagrees with accepted_histogram, which gives tau = "
                               f"{tau_hist:.4f} at gamma={gamma} (expected within {TAU_TOLERANCE})")
    greedy = [t.match for t in traces]
    if gamma is None or not greedy or any(m is None for m in greedy) or not any(greedy):
        return
    tau_replay, hist_replay = replay_at(traces, gamma)
    if tau is not None and abs(tau - tau_replay) > TAU_TOLERANCE:
        raise SpecsimError(f"{where}.tau: {tau} disagrees with its traces, which replay to tau = "
                           f"{tau_replay:.4f} at gamma={gamma} (expected within {TAU_TOLERANCE})")
    if hist is not None and [int(h) for h in hist_replay] != hist:
        raise SpecsimError(f"{where}.accepted_histogram: {_show(hist)} disagrees with its traces, which replay "
                           f"to {_show([int(h) for h in hist_replay])} at gamma={gamma}")


def _ensemble_weights(weights: Any, batch: int, where: str) -> tuple[float, ...] | None:
    """Ensemble member weights: one per draft batch member, finite, >= 0, not all zero."""
    if weights is None:
        return None
    weights = tuple(_num(w, f"{where}.weights[{i}]", lo=0, hi=RANGES["ratio"][1])
                    for i, w in enumerate(_list(weights, f"{where}.weights")))
    if len(weights) != batch:
        raise SpecsimError(f"{where}.weights: expected one weight per ensemble member (draft_batch_size = {batch}), "
                           f"got {len(weights)}")
    if not any(weights):
        raise SpecsimError(f"{where}.weights: expected at least one weight > 0, got all zeros")
    return weights


def _block_cost_ratio(d: dict, where: str) -> float:
    """γ·c + v of a BlockCost: at least 1, because v = Tv/Tp >= 1 (verifying costs at least one target
    forward), so that speedup = tau/(γ·c + v) <= tau <= γ+1 and the textbook c = (γ·c + v - 1)/γ >= 0."""
    value = _num(_req(d, "gamma_c_plus_v", where), f"{where}.gamma_c_plus_v", unit="ratio")
    if value < 1:
        raise SpecsimError(f"{where}.gamma_c_plus_v: expected >= 1 (v = Tv/Tp >= 1, so speedup <= tau <= gamma+1), "
                           f"got {value}")
    return value


# --------------------------------------------------------------------------- checks
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
    Carlo of :mod:`specsim.check_sampled`); ``rounds`` is then the number of seeds per prompt.
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
        out[term] = {k: _num(_req(pair, k, f"{where}.{term}"), f"{where}.{term}.{k}", lo=0)
                     for k in ("predicted", "measured")}
    return out


# --------------------------------------------------------------------------- profile
@dataclass(frozen=True)
class Profile:
    """A whole profile: provenance, latency, acceptance entries and check results."""

    provenance: Provenance
    latency: LatencySection = field(default_factory=LatencySection)
    acceptance: tuple[MethodAcceptance, ...] = ()
    checks: tuple[CheckRow, ...] = ()
    name: str = ""
    description: str = ""
    schema_version: int = SCHEMA_VERSION  # as loaded (1 or 2)

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,  # schema-1 content is valid schema 2: files are written as 2
            "name": self.name,
            "description": self.description,
            "provenance": self.provenance.to_json(),
            "latency": self.latency.to_json(),
            "acceptance": [a.to_json() for a in self.acceptance],
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, d: dict) -> Profile:
        if not isinstance(d, dict):
            raise SpecsimError(f"profile: expected a JSON object, got {_show(d)}")
        check_keys(d, {"schema_version", "name", "description", "provenance", "latency", "acceptance", "checks"},
                    "profile")
        version = _req(d, "schema_version", "profile")
        if isinstance(version, bool) or not isinstance(version, int) or version not in SCHEMA_VERSIONS:
            raise SpecsimError(f"profile.schema_version: expected one of {list(SCHEMA_VERSIONS)}, got {_show(version)}")
        acceptance = tuple(MethodAcceptance.from_json(a, f"acceptance[{i}]")
                           for i, a in enumerate(_list(d.get("acceptance", []), "acceptance", nonempty=False)))
        seen: set[tuple[str, str]] = set()
        for i, a in enumerate(acceptance):
            if (a.method, a.scenario) in seen:
                raise SpecsimError(f"acceptance[{i}]: duplicate entry for method {a.method!r} in scenario {a.scenario!r}")
            seen.add((a.method, a.scenario))
        return cls(
            provenance=Provenance.from_json(_req(d, "provenance", "profile")),
            latency=LatencySection.from_json(d.get("latency", {})),
            acceptance=acceptance,
            checks=tuple(CheckRow.from_json(c, f"checks[{i}]")
                         for i, c in enumerate(_list(d.get("checks", []), "checks", nonempty=False))),
            name=_str(d.get("name", ""), "profile.name", allow_empty=True),
            description=_str(d.get("description", ""), "profile.description", allow_empty=True),
            schema_version=version,
        )

    def with_acceptance(self, entries: tuple[MethodAcceptance, ...] | list[MethodAcceptance]) -> Profile:
        """A copy where ``entries`` replace any existing entry of the same (method, scenario)."""
        keys = {(e.method, e.scenario) for e in entries}
        kept = tuple(a for a in self.acceptance if (a.method, a.scenario) not in keys)
        return replace(self, acceptance=kept + tuple(entries))

    def with_checks(self, rows: tuple[CheckRow, ...] | list[CheckRow]) -> Profile:
        """A copy where ``rows`` replace existing rows of the same (method, scenario, gamma, draft, temperature)."""
        key = lambda r: (r.method, r.scenario, r.gamma, r.draft, r.temperature)  # noqa: E731
        keys = {key(r) for r in rows}
        kept = tuple(c for c in self.checks if key(c) not in keys)
        return replace(self, checks=kept + tuple(rows))


# --------------------------------------------------------------------------- files
PROFILES_DIR = Path(__file__).parent / "profiles"


def save_profile(profile: Profile, path: str | os.PathLike) -> Path:
    """Validate by round trip, then write atomically."""
    data = profile.to_json()
    Profile.from_json(json.loads(json.dumps(data)))
    return write_json_atomic(path, data)


def shipped_profiles() -> dict[str, Path]:
    """Name (file stem) -> path of every profile shipped inside the package."""
    return {p.stem: p for p in sorted(PROFILES_DIR.rglob("*.json"))}


DEFAULT_PROFILE = "ibed-llava1.5-7b-68m"


def resolve_profile_path(name_or_path: str) -> Path:
    """A shipped profile name, or a path to a JSON file."""
    shipped = shipped_profiles()
    if name_or_path in shipped:
        return shipped[name_or_path]
    if not str(name_or_path).strip():
        raise SpecsimError(f"profile: expected a shipped profile name or a path to a .json file, got {name_or_path!r}")
    path = Path(name_or_path)
    if path.suffix == ".json" or os.path.lexists(path) or os.sep in name_or_path:
        return check_regular_file(path, "profile file")
    raise SpecsimError(f"unknown profile {name_or_path!r} (expected a path to a .json file or one of: "
                       f"{', '.join(shipped) or 'none shipped'})")


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Load and validate a profile by shipped name or path."""
    path = resolve_profile_path(name_or_path)
    data = read_json(path, "profile")
    try:
        profile = Profile.from_json(data)
    except SpecsimError as err:
        raise SpecsimError(f"profile {path.name}: {err}") from None
    if not profile.name:
        profile = replace(profile, name=path.stem)
    return profile
