"""Passes priced from a profile's measured grids (:mod:`specsim.profile_format.cost_model`): this project's
engines, another engine's profile or a GPU's, whichever measured them.

One request's grids (``CostModel``: batch = the draft's batch) and, where ``batched`` is given, the batched
engine's (batch = the requests in the pass, context = the padded cache width), which then price every pass
but the prefills; read by :func:`specsim.profile_format.cost_grid.grid_ms`. ``drafter="lookup"``: no draft
model (n-gram). More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.costs.pass_cost import CATCHUP, DRAFT, FIRST, PREFILL, STEP, TARGET, TREE, UNPADDED, PassMs
from specsim.errors import SpecsimError
from specsim.profile_format import LatencySection
from specsim.profile_format.batched_cost import BatchedCosts
from specsim.profile_format.cost_grid import CostGrid, grid_ms
from specsim.profile_format.cost_model import CostModel

# (role, kind, more than one row) -> (CostModel field, name in errors)
_REQUEST = {
    (TARGET, STEP, False): ("target_decode", "Tp (target_decode)"),
    (TARGET, STEP, True): ("target_verify", "Tv (target_verify)"),
    (TARGET, UNPADDED, False): ("target_decode", "Tp (target_decode)"),
    (TARGET, PREFILL, None): ("target_prefill", "target prefill (target_prefill)"),
    (DRAFT, STEP, None): ("draft_next", "Tq (draft_next)"),
    (DRAFT, FIRST, None): ("draft_first", "Tq first step (draft_first)"),
    (DRAFT, PREFILL, None): ("draft_prefill", "draft prefill (draft_prefill)"),
    (DRAFT, CATCHUP, None): ("draft_catchup", "draft catch-up over the verified rows (draft_catchup)"),
    (TARGET, TREE, None): ("tree.verify", "Tv(n) (tree.verify)"),
    (DRAFT, TREE, None): ("tree.draft", "tree draft level pass (tree.draft)"),
}
_BATCHED = {
    (TARGET, STEP, False): ("target_decode", "batched target_decode"),
    (TARGET, STEP, True): ("target_verify", "batched target_verify"),
    (TARGET, UNPADDED, False): ("target_decode_unpadded", "batched target_decode"),
    (DRAFT, STEP, None): ("draft_step", "batched draft_step"),
    (DRAFT, FIRST, None): ("draft_first_step", "batched draft_first_step"),
    (DRAFT, CATCHUP, None): ("draft_catchup", "batched draft_catchup"),
}
_FALLBACK = {"target_decode_unpadded": "target_decode", "draft_first_step": "draft_step"}


@dataclass(frozen=True)
class GridPassCost:
    """A :class:`specsim.costs.pass_cost.PassCost` read from measured grids (module docstring)."""

    model: CostModel | None  # None: the batched engine's grids alone (no prefill, no request grids)
    batched: BatchedCosts | None = None
    latency: LatencySection | None = None  # the vision encoders' ms per image
    drafter: str = "model"  # "lookup": drafts from a host lookup, no draft model (module docstring)

    @classmethod
    def request(cls, latency: LatencySection) -> GridPassCost:
        """One request's grids (SpecsimError when the profile has no timings)."""
        return cls(latency.forward_costs(), None, latency)

    @classmethod
    def batch(cls, latency: LatencySection, missing: str) -> GridPassCost:
        """The batched engine's grids; SpecsimError ``missing`` when the profile did not measure them."""
        model = latency.forward_costs()
        if model.batched is None:
            raise SpecsimError(missing)
        return cls(model, model.batched, latency)

    def _grid(self, role: str, kind: str, rows) -> tuple[CostGrid | None, str]:
        many = None if kind in (PREFILL, TREE) or role == DRAFT else bool(np.max(rows) > 1)
        table, owner = (
            (_BATCHED, self.batched)
            if self.batched is not None and kind != PREFILL
            else (
                _REQUEST,
                self.model,
            )
        )
        key = (role, kind, many)
        if key not in table:
            raise SpecsimError(f"{role} {kind} pass of {np.max(rows):g} rows: not priced by measured grids")
        field, name = table[key]
        if field.startswith("tree."):
            return _tree_grid(self.model, field[5:]), name
        grid = getattr(owner, field)
        if grid is None and field in _FALLBACK:
            grid = getattr(owner, _FALLBACK[field])
        return grid, name

    @classmethod
    def lookup(cls, latency: LatencySection) -> GridPassCost:
        """One request's grids for a drafter with no model; SpecsimError when the profile did not time its
        blocks."""
        model = latency.forward_costs()
        if model.lookup_overhead_ms_per_block is None:
            raise SpecsimError(
                "the profile's cost model has no lookup_overhead_ms_per_block (n-gram drafting's blocks: "
                "specsim calibrate latency --engine llama.cpp --ngram KIND)"
            )
        return cls(model, None, latency, "lookup")

    def pass_ms(self, role: str, rows, width, batch=1, *, kind: str = STEP) -> PassMs:
        if role == DRAFT and self.drafter == "lookup":
            shape = np.broadcast(np.asarray(rows), np.asarray(width), np.asarray(batch)).shape
            return PassMs(np.zeros(shape) if shape else 0.0, np.zeros(shape, bool) if shape else False)
        grid, name = self._grid(role, kind, rows)
        along = "rows" if kind == PREFILL else "context"
        return PassMs(*grid_ms(grid, rows, width, batch, name=name, along=along))

    def block_overhead_ms(self, gamma, batch=1, width=None, *, adaptive: bool = False, gpu_ms=None):
        if self.drafter == "lookup":
            return np.asarray(self.model.lookup_overhead_ms_per_block.at(gamma, batch, width), dtype=float)
        if self.batched is not None:
            return self.batched.overhead_ms_per_block.at(gamma, batch)
        return self.model.block_overhead_ms(gamma, batch, width, adaptive)

    def block_terms_ms(self, gamma, batch=1, width=None, *, gpu_ms=None) -> dict:
        """The measured per-block overhead is one term: the engine's work outside its passes."""
        return {"block_fixed": self.block_overhead_ms(gamma, batch, width)}

    def step_terms_ms(self, batch=1, *, gpu_ms=None) -> dict:
        return {"step": self.step_overhead_ms(batch)}

    def tree_overhead_ms(self, tree, batch=1, width=0.0) -> float:
        return self.model.tree.overhead_at(tree, batch, width)

    def step_overhead_ms(self, batch=1, *, gpu_ms=None) -> float:
        if self.batched is not None:
            return self.batched.target_step_overhead_ms(batch)
        return self.model.overhead_ms_per_target_step

    def token_overhead_ms(self, batch=1) -> float:
        return self.model.overhead_ms_per_token if self.model is not None else 0.0

    @property
    def draft_catchup(self) -> bool:
        return self.drafter == "model" and self.model is not None and self.model.draft_catchup is not None

    @property
    def first_pass_drafts(self) -> bool:
        return self.model is None or self.model.first_pass_drafts

    def encoder_ms(self, images: int, *, draft: bool = False) -> float:
        return self.latency.vision_ms(images, draft=draft) if images else 0.0

    @property
    def extra_draft_forwards(self) -> float:
        return 0.0  # the engines' own forwards are in their grids

    @property
    def sampling(self):
        """What drawing tokens at T > 0 adds (:class:`specsim.profile_format.sampling_cost.SamplingCost`;
        None:
        not measured)."""
        return self.model.sampling

    def measured_rows(self, role: str, kind: str = STEP) -> tuple[int, ...] | None:
        grid, _ = self._grid(role, kind, 2 if role == TARGET and kind == STEP else 1)
        return None if grid is None else grid.rows

    def measured_widths(self, role: str, kind: str = STEP, rows: int = 1) -> tuple[float, ...] | None:
        grid, _ = self._grid(role, kind, rows)
        return None if grid is None else tuple(grid.context_tokens)

    def check_batch(self, batch: int, where: str = "--batch") -> None:
        if self.batched is not None:
            self.batched.check_batch(batch, where)


def _tree_grid(model: CostModel, field: str) -> CostGrid:
    """A token-tree grid; SpecsimError naming the command that measures it."""
    if model.tree is None:
        raise SpecsimError(
            "the profile's cost model has no token-tree grids (run 'specsim calibrate latency "
            "--tree-sizes 2,4,8,16,32,64' or '--tree SPEC')"
        )
    grid = getattr(model.tree, field)
    if grid is None:
        raise SpecsimError(
            "the cost model has no tree draft level pass (tree.draft) grid (every swept tree had depth 1; "
            "add --tree-sizes 4 or deeper trees to 'specsim calibrate latency')"
        )
    return grid
