"""One prompt's acceptance trace (greedy match, sampling β, top-k ranks, sampled paths, adaptive replay)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, drop_none, field_int, field_list, field_num, field_opt, field_str, show
from specsim.profile_format.adaptive_trace import AdaptiveTrace


@dataclass(frozen=True)
class Trace:
    """One prompt's teacher-forced acceptance trace over the target's own output.

    ``match[t]`` = 1 when the draft's argmax at t is the target's token (greedy); ``beta[t]`` =
    Σ_x min(p_t(x), q_t(x)) (sampling); either may be absent, not both. Optional: ``tokens``,
    ``prompt_tokens``/``draft_prompt_tokens`` (schema 2), top-k ``draft_rank`` and ``draft_top_probs`` (trees,
    confidence policies), ``accept_paths[k][t]`` = min(1, q_t(y_t) / p_t(y_t)) along sampled target paths
    (Leviathan et al. 2023, §3.5), ``adaptive`` (exact replay), ``prompt_ids`` (n-gram replay).
    Field notes: ARCHITECTURE.md, Notes by module.
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
    prompt_ids: tuple[int, ...] | None = None  # the prompt's token ids (n-gram lookups replay from them)

    def to_json(self) -> dict:
        return drop_none(
            {
                "prompt_id": self.prompt_id,
                "match": None if self.match is None else list(self.match),
                "beta": None if self.beta is None else list(self.beta),
                "tokens": None if self.tokens is None else list(self.tokens),
                "prompt_tokens": self.prompt_tokens,
                "draft_prompt_tokens": self.draft_prompt_tokens,
                "draft_rank": None if self.draft_rank is None else list(self.draft_rank),
                "draft_top_probs": None
                if self.draft_top_probs is None
                else [list(p) for p in self.draft_top_probs],
                "accept_paths": None if self.accept_paths is None else [list(p) for p in self.accept_paths],
                "adaptive": None if self.adaptive is None else self.adaptive.to_json(),
                "prompt_ids": None if self.prompt_ids is None else list(self.prompt_ids),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str) -> Trace:
        if not isinstance(d, dict):
            raise SpecsimError(f"{where}: expected an object, got {show(d)}")
        check_keys(
            d,
            {
                "match",
                "beta",
                "prompt_id",
                "tokens",
                "prompt_tokens",
                "draft_prompt_tokens",
                "draft_rank",
                "draft_top_probs",
                "accept_paths",
                "adaptive",
                "prompt_ids",
            },
            where,
        )
        match = d.get("match")
        beta = d.get("beta")
        if match is None and beta is None:
            raise SpecsimError(f"{where}: expected 'match' and/or 'beta', got neither")
        if match is not None:
            match = field_list(match, f"{where}.match", nonempty=False)
            for i, m in enumerate(match):
                if m not in (0, 1) or isinstance(m, float):
                    raise SpecsimError(f"{where}.match[{i}]: expected 0 or 1, got {show(m)}")
        if beta is not None:
            beta = [
                field_num(b, f"{where}.beta[{i}]", lo=0, hi=1 + 1e-9)
                for i, b in enumerate(field_list(beta, f"{where}.beta", nonempty=False))
            ]
        if match is not None and beta is not None and len(match) != len(beta):
            raise SpecsimError(f"{where}: match has {len(match)} positions but beta has {len(beta)}")
        tokens = d.get("tokens")
        if tokens is not None:
            tokens = [
                field_int(t, f"{where}.tokens[{i}]", lo=0, unit="tokens")
                for i, t in enumerate(field_list(tokens, f"{where}.tokens"))
            ]
            if len(tokens) != len(match if match is not None else beta):
                raise SpecsimError(
                    f"{where}.tokens: expected one per position "
                    f"({len(match if match is not None else beta)}), got {len(tokens)}"
                )
        rank, top = _top_k_fields(d, where, len(match if match is not None else beta), match)
        return cls(
            match=None if match is None else tuple(int(m) for m in match),
            beta=None if beta is None else tuple(min(b, 1.0) for b in beta),
            prompt_id=field_opt(d, "prompt_id", field_str, where),
            tokens=None if tokens is None else tuple(tokens),
            prompt_tokens=field_opt(d, "prompt_tokens", lambda v, w: field_int(v, w, lo=1), where),
            draft_prompt_tokens=field_opt(
                d, "draft_prompt_tokens", lambda v, w: field_int(v, w, lo=1), where
            ),
            draft_rank=rank,
            draft_top_probs=top,
            accept_paths=_accept_paths(d.get("accept_paths"), where),
            adaptive=_adaptive(d, where, len(match if match is not None else beta)),
            prompt_ids=field_opt(d, "prompt_ids", _ids, where),
        )


def _ids(value: Any, where: str) -> tuple[int, ...]:
    """Token ids: integers >= 0."""
    ids = field_list(value, where)
    return tuple(field_int(t, f"{where}[{i}]", lo=0, unit="tokens") for i, t in enumerate(ids))


def _adaptive(d: dict, where: str, positions: int) -> AdaptiveTrace | None:
    """The optional ``adaptive`` field of a trace, one entry per position."""
    if d.get("adaptive") is None:
        return None
    out = AdaptiveTrace.from_json(d["adaptive"], f"{where}.adaptive")
    if len(out) != positions:
        raise SpecsimError(
            f"{where}.adaptive.target_probs: expected one per position ({positions}), got {len(out)}"
        )
    return out


def _accept_paths(paths: Any, where: str) -> tuple[tuple[float, ...], ...] | None:
    """Validated ``accept_paths`` of a trace: a non-empty list of non-empty lists of probabilities (each
    sampled path has its own length: it may end at EOS earlier or later than the greedy output)."""
    if paths is None:
        return None
    rows = field_list(paths, f"{where}.accept_paths")
    return tuple(
        tuple(
            min(field_num(b, f"{where}.accept_paths[{k}][{t}]", lo=0, hi=1 + 1e-9), 1.0)
            for t, b in enumerate(field_list(row, f"{where}.accept_paths[{k}]"))
        )
        for k, row in enumerate(rows)
    )


def _top_k_fields(d: dict, where: str, positions: int, match) -> tuple:
    """Validated (draft_rank, draft_top_probs) of a trace; each optional, one entry per position."""
    rank, top = d.get("draft_rank"), d.get("draft_top_probs")
    if rank is not None:
        rank = tuple(
            field_int(r, f"{where}.draft_rank[{i}]", lo=0)
            for i, r in enumerate(field_list(rank, f"{where}.draft_rank", nonempty=False))
        )
        if len(rank) != positions:
            raise SpecsimError(
                f"{where}.draft_rank: expected one per position ({positions}), got {len(rank)}"
            )
        if match is not None and any((r == 0) != bool(m) for r, m in zip(rank, match)):
            i = next(i for i, (r, m) in enumerate(zip(rank, match)) if (r == 0) != bool(m))
            raise SpecsimError(
                f"{where}.draft_rank[{i}]: rank {rank[i]} contradicts match[{i}] = {match[i]} "
                "(expected rank 0 exactly where the draft's argmax matches)"
            )
    if top is not None:
        rows = field_list(top, f"{where}.draft_top_probs", nonempty=False)
        if len(rows) != positions:
            raise SpecsimError(
                f"{where}.draft_top_probs: expected one row per position ({positions}), got {len(rows)}"
            )
        top = tuple(
            tuple(
                field_num(p, f"{where}.draft_top_probs[{i}][{j}]", lo=0, hi=1 + 1e-9)
                for j, p in enumerate(field_list(row, f"{where}.draft_top_probs[{i}]"))
            )
            for i, row in enumerate(rows)
        )
        for i, row in enumerate(top):
            if (
                len(row) != len(top[0])
                or any(b > a + 1e-9 for a, b in zip(row, row[1:]))
                or sum(row) > 1 + 1e-6
            ):
                raise SpecsimError(
                    f"{where}.draft_top_probs[{i}]: expected {len(top[0])} decreasing probabilities "
                    f"summing to <= 1, got {show(list(row))}"
                )
    return rank, top
