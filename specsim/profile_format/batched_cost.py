"""The forward cost of B requests decoded together (schema 3): batched engine passes by rows × width × B (ms).

``calibrate latency --request-batches 1,2,4,8`` times the batched engine's own passes in its alternation:
``target_decode`` (optional ``target_decode_unpadded``), ``target_verify`` (γ+1 rows per request),
``draft_step`` (optional ``draft_first_step``), overheads per block (γ × B) and per target-only step (B),
optional ``draft_catchup`` (llama.cpp) and ``server_loop`` (:class:`ServerLoopCosts`). The context axis is
the **cache width**, pads and masked columns included; read by
:class:`specsim.costs.grid_pass_cost.GridPassCost`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import check_keys, field_int, field_list, field_num, field_req, field_str, show
from specsim.profile_format.cost_grid import CostGrid
from specsim.profile_format.overhead_grid import OverheadGrid

BATCHED_GRIDS = ("target_decode", "target_verify", "draft_step")
OPTIONAL_GRIDS = ("target_decode_unpadded", "draft_first_step", "draft_catchup")
PASS_SCALES = ("target_pass_scale", "draft_pass_scale")  # optional in ``server_loop``
# optional lists of ``server_loop``, each with its values' (lo, hi) bounds
OPTIONAL_LOOP_LISTS = {
    **dict.fromkeys(PASS_SCALES, (0.1, 10.0)),
    "prefill_host_ms": (0.0, 1e6),
    "ms_per_request_by_gamma": (0.0, 1e6),
}
BATCHED_ENGINE = (
    "static batch of B requests, rows left-padded, rejected drafts masked in place "
    "(calibrate/run/batch_engine.py)"
)


@dataclass(frozen=True)
class ServerLoopCosts:
    """The server loop's ms outside its passes (``server_loop``): ``step_ms[i]`` = (a, b) → a + b·B at
    ``gammas[i]`` (0: target-only); ``ms_per_request`` joining and leaving once (``ms_per_request_by_gamma``:
    at each γ; empty: ``ms_per_request``); ``prefill_host_ms`` (target-only, SD) a prefill's ms outside the
    forwards; ``cold_pass_ms_scale`` a pass after flushed CPU caches over one after another pass (1: not
    measured); ``target_pass_scale[k]``, ``draft_pass_scale[k]`` the loop's passes over the grid's by steps
    since the last admission (empty: not measured). Field notes: ARCHITECTURE.md, Notes by module.
    """

    gammas: tuple[int, ...]
    step_ms: tuple[tuple[float, float], ...]
    ms_per_request: float
    cold_pass_ms_scale: float = 1.0
    target_pass_scale: tuple[float, ...] = ()
    draft_pass_scale: tuple[float, ...] = ()
    prefill_host_ms: tuple[float, ...] = ()
    ms_per_request_by_gamma: tuple[float, ...] = ()

    def request_ms(self, gamma: int) -> float:
        """ms a request spends joining and leaving the batch at γ (linear between measured γ)."""
        if not self.ms_per_request_by_gamma:
            return float(self.ms_per_request)
        return float(np.interp(gamma, self.gammas, self.ms_per_request_by_gamma))

    def prefill_setup_ms(self, sd: bool) -> float:
        """A prefill's ms per request outside the models' forwards, target-only or with SD (0: not
        measured)."""
        return float(self.prefill_host_ms[int(sd)]) if self.prefill_host_ms else 0.0

    def pass_scale(self, steps_since_admission, draft: bool = False) -> np.ndarray:
        """The loop's pass ms over the grid's ``steps_since_admission`` steps after an admission (array
        of the same shape; None: the steady state, the last entry; 1 where not measured)."""
        scale = self.draft_pass_scale if draft else self.target_pass_scale
        if not scale:
            return np.ones(np.shape(steps_since_admission))
        if steps_since_admission is None:
            return np.asarray(scale[-1])
        k = np.minimum(np.asarray(steps_since_admission, dtype=np.int64), len(scale) - 1)
        return np.asarray(scale)[k]

    def step_overhead_ms(self, batch: float, gamma: int) -> float:
        """a + b·B at γ (linear between measured γ, the end value outside), at least 0."""
        a = np.interp(gamma, self.gammas, [c[0] for c in self.step_ms])
        b = np.interp(gamma, self.gammas, [c[1] for c in self.step_ms])
        return max(float(a + b * batch), 0.0)

    def to_json(self) -> dict:
        return {
            "gammas": list(self.gammas),
            "step_ms": [list(c) for c in self.step_ms],
            "ms_per_request": self.ms_per_request,
            "cold_pass_ms_scale": self.cold_pass_ms_scale,
        } | {n: list(getattr(self, n)) for n in OPTIONAL_LOOP_LISTS if getattr(self, n)}

    @classmethod
    def from_json(cls, d: dict, where: str) -> ServerLoopCosts:
        keys = {"gammas", "step_ms", "ms_per_request", "cold_pass_ms_scale", *OPTIONAL_LOOP_LISTS}
        check_keys(d if isinstance(d, dict) else {}, keys, where)
        gammas = [
            field_int(g, f"{where}.gammas[{i}]", lo=0)
            for i, g in enumerate(field_list(field_req(d, "gammas", where), f"{where}.gammas"))
        ]
        if gammas != sorted(set(gammas)) or not gammas:
            raise SpecsimError(f"{where}.gammas: expected distinct increasing integers, got {show(gammas)}")
        rows = field_list(field_req(d, "step_ms", where), f"{where}.step_ms")
        if len(rows) != len(gammas):
            raise SpecsimError(f"{where}.step_ms: expected {len(gammas)} [a, b] pairs (one per gamma)")
        pairs = []
        for i, r in enumerate(rows):
            r = field_list(r, f"{where}.step_ms[{i}]")
            if len(r) != 2:
                raise SpecsimError(f"{where}.step_ms[{i}]: expected [a, b] (ms per step: a + b·B)")
            pairs.append(
                tuple(field_num(x, f"{where}.step_ms[{i}][{j}]", lo=-1e6, hi=1e6) for j, x in enumerate(r))
            )
        per = field_num(field_req(d, "ms_per_request", where), f"{where}.ms_per_request", lo=0, hi=1e8)
        cold = field_num(d.get("cold_pass_ms_scale", 1.0), f"{where}.cold_pass_ms_scale", lo=0.1, hi=10.0)
        lists = {
            n: tuple(
                field_num(x, f"{where}.{n}[{i}]", lo=lo, hi=hi)
                for i, x in enumerate(field_list(d[n], f"{where}.{n}"))
            )
            for n, (lo, hi) in OPTIONAL_LOOP_LISTS.items()
            if d.get(n) is not None
        }
        for n, want, what in (
            ("prefill_host_ms", 2, "[target-only ms, SD ms] per request"),
            ("ms_per_request_by_gamma", len(gammas), "one ms per gamma"),
        ):
            if n in lists and len(lists[n]) != want:
                raise SpecsimError(f"{where}.{n}: expected {what} ({want} numbers), got {len(lists[n])}")
        return cls(tuple(gammas), tuple(pairs), per, cold, **lists)


@dataclass(frozen=True)
class BatchedCosts:
    """The batched engine's grids (rows × cache width × B), its overhead per block (γ × B) and per
    target-only step (by B, ms)."""

    target_decode: CostGrid
    target_verify: CostGrid
    draft_step: CostGrid
    overhead_ms_per_block: OverheadGrid
    overhead_ms_per_target_step: tuple[float, ...]  # one per ``target_decode.batch``
    engine: str = BATCHED_ENGINE
    server_loop: ServerLoopCosts | None = None
    target_decode_unpadded: CostGrid | None = None
    draft_first_step: CostGrid | None = None
    draft_catchup: CostGrid | None = None

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return self.target_decode.batch

    def target_step_overhead_ms(self, batch) -> float:
        """ms outside the model per target-only step at B (linear between measured B, end value outside)."""
        return float(np.interp(batch, self.batch_sizes, self.overhead_ms_per_target_step))

    def check_batch(self, batch: int, where: str = "--batch") -> None:
        """SpecsimError unless B lies within the measured batch sizes."""
        lo, hi = self.batch_sizes[0], self.batch_sizes[-1]
        if not lo <= batch <= hi:
            raise SpecsimError(
                f"{where}: batch {batch} was not measured (the profile's batched grid covers {lo}..{hi}; "
                f"calibrate latency --request-batches)"
            )

    def check_gamma(self, gamma: int, where: str = "--gamma") -> None:
        """SpecsimError unless γ lies within the measured gammas (its overhead and verification rows)."""
        lo, hi = self.overhead_ms_per_block.gamma[0], self.overhead_ms_per_block.gamma[-1]
        rows = self.target_verify.rows
        if not (lo <= gamma <= hi and rows[0] <= gamma + 1 <= rows[-1]):
            raise SpecsimError(
                f"{where}: gamma {gamma} was not measured (the profile's batched grid covers gamma "
                f"{lo}..{hi}; calibrate latency --request-gammas)"
            )

    def to_json(self) -> dict:
        return {
            **{n: getattr(self, n).to_json() for n in BATCHED_GRIDS},
            **{n: getattr(self, n).to_json() for n in OPTIONAL_GRIDS if getattr(self, n) is not None},
            "overhead_ms_per_block": self.overhead_ms_per_block.to_json(),
            "overhead_ms_per_target_step": list(self.overhead_ms_per_target_step),
            "engine": self.engine,
        } | ({"server_loop": self.server_loop.to_json()} if self.server_loop is not None else {})

    @classmethod
    def from_json(cls, d: dict, where: str = "latency.cost_model.batched") -> BatchedCosts:
        check_keys(
            d if isinstance(d, dict) else {},
            {*BATCHED_GRIDS, *OPTIONAL_GRIDS, "overhead_ms_per_block", "overhead_ms_per_target_step"}
            | {"engine", "server_loop"},
            where,
        )
        grids = {n: CostGrid.from_json(field_req(d, n, where), f"{where}.{n}") for n in BATCHED_GRIDS}
        grids |= {n: CostGrid.from_json(d[n], f"{where}.{n}") for n in OPTIONAL_GRIDS if d.get(n) is not None}
        batch = grids["target_decode"].batch
        for name, g in grids.items():
            if g.batch != batch:
                raise SpecsimError(
                    f"{where}.{name}.batch: expected the target_decode grid's {show(list(batch))}, "
                    f"got {show(list(g.batch))}"
                )
        for name in ("target_decode", "draft_step", "target_decode_unpadded", "draft_first_step"):
            if name in grids and grids[name].rows != (1,):
                raise SpecsimError(
                    f"{where}.{name}.rows: expected [1] (one row per request), "
                    f"got {show(list(grids[name].rows))}"
                )
        for name in ("target_verify", "draft_catchup"):
            if name in grids and grids[name].rows[0] < 2:
                raise SpecsimError(
                    f"{where}.{name}.rows: expected values >= 2 (gamma + 1 per request), "
                    f"got {show(list(grids[name].rows))}"
                )
        overhead = OverheadGrid.from_json(
            field_req(d, "overhead_ms_per_block", where), f"{where}.overhead_ms_per_block"
        )
        steps = field_list(
            field_req(d, "overhead_ms_per_target_step", where), f"{where}.overhead_ms_per_target_step"
        )
        if len(steps) != len(batch):
            raise SpecsimError(
                f"{where}.overhead_ms_per_target_step: expected {len(batch)} values (one per batch size "
                f"{show(list(batch))}), got {len(steps)}"
            )
        return cls(
            **grids,
            overhead_ms_per_block=overhead,
            overhead_ms_per_target_step=tuple(
                field_num(v, f"{where}.overhead_ms_per_target_step[{i}]", unit="ms", zero_ok=True)
                for i, v in enumerate(steps)
            ),
            engine=field_str(d.get("engine", BATCHED_ENGINE), f"{where}.engine"),
            server_loop=None
            if d.get("server_loop") is None
            else ServerLoopCosts.from_json(d["server_loop"], f"{where}.server_loop"),
        )
