"""The stored record of an adaptive in-batch ensemble's trace: what its exact block-by-block replay needs.

The replay itself is :func:`specsim.draft_shapes.adaptive.adaptive_plan`; this module holds the data and its
JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, field_list, field_num, field_req, show

# The adaptive rule's step size η and floor ε (calibrate's AdaptiveEnsembleDrafter uses these).
ETA, FLOOR = 2.0, 0.05
# Each member's top-K tokens are the rivals stored per position.
RIVALS_PER_MEMBER = 4


@dataclass(frozen=True)
class AdaptiveTrace:
    """What the adaptive replay needs along one prompt's target output (N positions, k members).

    ``target_probs[t][j]`` = p_j(y_t); ``rival_probs[t][c][j]`` = p_j(x_c) for the rivals x_c ≠ y_t;
    ``member_match[t][j]`` = [argmax p_j = y_t]; ``prior`` w⁰ [k]; ``eta``, ``floor`` the rule's η, ε.
    """

    prior: tuple[float, ...]
    target_probs: tuple[tuple[float, ...], ...]
    rival_probs: tuple[tuple[tuple[float, ...], ...], ...]
    member_match: tuple[tuple[int, ...], ...]
    eta: float = ETA
    floor: float = FLOOR

    def __len__(self) -> int:
        return len(self.target_probs)

    def to_json(self) -> dict:
        return {
            "prior": list(self.prior),
            "eta": self.eta,
            "floor": self.floor,
            "target_probs": [list(p) for p in self.target_probs],
            "rival_probs": [[list(r) for r in rs] for rs in self.rival_probs],
            "member_match": [list(m) for m in self.member_match],
        }

    @classmethod
    def from_json(cls, d: dict, where: str) -> AdaptiveTrace:
        keys = ("prior", "eta", "floor", "target_probs", "rival_probs", "member_match")
        check_keys(d if isinstance(d, dict) else {}, set(keys), where)
        prior = tuple(
            field_num(p, f"{where}.prior[{j}]", zero_ok=True)
            for j, p in enumerate(field_list(field_req(d, "prior", where), f"{where}.prior"))
        )
        k = len(prior)
        if not abs(sum(prior) - 1) < 1e-6:
            raise SpecsimError(f"{where}.prior: expected weights summing to 1, got {show(list(prior))}")

        def row(v, w, kind=float):
            items = field_list(v, w)
            if len(items) != k:
                raise SpecsimError(f"{w}: expected {k} values (one per member), got {show(v)}")
            if kind is int:
                if any(x not in (0, 1) or isinstance(x, float) for x in items):
                    raise SpecsimError(f"{w}: expected 0 or 1 per member, got {show(v)}")
                return tuple(int(x) for x in items)
            return tuple(field_num(x, f"{w}[{j}]", zero_ok=True, hi=1 + 1e-9) for j, x in enumerate(items))

        target = tuple(
            row(v, f"{where}.target_probs[{t}]")
            for t, v in enumerate(field_list(field_req(d, "target_probs", where), f"{where}.target_probs"))
        )
        rivals = tuple(
            tuple(
                row(r, f"{where}.rival_probs[{t}][{c}]")
                for c, r in enumerate(field_list(v, f"{where}.rival_probs[{t}]"))
            )
            for t, v in enumerate(field_list(field_req(d, "rival_probs", where), f"{where}.rival_probs"))
        )
        match = tuple(
            row(v, f"{where}.member_match[{t}]", int)
            for t, v in enumerate(field_list(field_req(d, "member_match", where), f"{where}.member_match"))
        )
        if not len(target) == len(rivals) == len(match):
            raise SpecsimError(
                f"{where}: expected target_probs, rival_probs and member_match of one length, got "
                f"{len(target)}, {len(rivals)} and {len(match)}"
            )
        return cls(
            prior,
            target,
            rivals,
            match,
            eta=field_num(field_req(d, "eta", where), f"{where}.eta", zero_ok=True),
            floor=field_num(field_req(d, "floor", where), f"{where}.floor", zero_ok=True, hi=1.0),
        )
