"""The forward-cost model of a profile (schema 2): ms of one forward pass over rows × context × batch.

``calibrate latency`` times the engine's own forwards in its alternation on grids ms[rows][context][batch]
(medians): ``target_decode``, ``target_verify`` (γ+1 rows), ``draft_first``, ``draft_next``,
``target_prefill``/``draft_prefill``; optional :class:`TreeCosts`. Around them: overheads per block and per
target step, ``adaptive_ms_per_block``, ``sampling``, ``batched`` (schema 3); llama.cpp's ``draft_catchup``,
``overhead_ms_per_token``, ``first_pass_drafts``, ``lookup_overhead_ms_per_block``. Interpolation:
:mod:`~specsim.profile_format.cost_grid`. More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.errors import SpecsimError
from specsim.jsonio import (
    check_keys,
    drop_none,
    field_list,
    field_num,
    field_opt,
    field_req,
    field_str,
    show,
)
from specsim.profile_format.batched_cost import BatchedCosts
from specsim.profile_format.cost_grid import CostGrid
from specsim.profile_format.overhead_grid import OverheadGrid, TreeOverheadFit, signed_ms
from specsim.profile_format.sampling_cost import SamplingCost

GRID_NAMES = (
    "target_decode",
    "target_verify",
    "draft_first",
    "draft_next",
    "target_prefill",
    "draft_prefill",
)
INTERPOLATION = (
    "context_tokens: piecewise linear, flagged linear extrapolation outside the measured range; "
    "rows and batch: exact or linear between measured values, an error outside them"
)


# --------------------------------------------------------------------------- overhead and host check
@dataclass(frozen=True)
class HostCheck:
    """A sentinel point re-timed at the end of a calibration: did the machine's load change meanwhile?"""

    sentinel: str
    start_ms: float
    end_ms: float
    threshold: float
    contended: bool
    note: str = ""

    @property
    def rel_change(self) -> float:
        return self.end_ms / self.start_ms - 1.0

    def to_json(self) -> dict:
        return {
            "sentinel": self.sentinel,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "threshold": self.threshold,
            "contended": self.contended,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, d: dict, where: str) -> HostCheck:
        check_keys(
            d if isinstance(d, dict) else {},
            {"sentinel", "start_ms", "end_ms", "threshold", "contended", "note"},
            where,
        )
        contended = field_req(d, "contended", where)
        if not isinstance(contended, bool):
            raise SpecsimError(f"{where}.contended: expected true or false, got {show(contended)}")
        return cls(
            sentinel=field_str(field_req(d, "sentinel", where), f"{where}.sentinel"),
            start_ms=field_num(field_req(d, "start_ms", where), f"{where}.start_ms", unit="ms"),
            end_ms=field_num(field_req(d, "end_ms", where), f"{where}.end_ms", unit="ms"),
            threshold=field_num(field_req(d, "threshold", where), f"{where}.threshold", lo=0),
            contended=contended,
            note=field_str(d.get("note", ""), f"{where}.note", allow_empty=True),
        )


# --------------------------------------------------------------------------- token trees
@dataclass(frozen=True)
class TreeCosts:
    """Token-tree forwards: ``verify`` (rows = n+1, context, batch 1), ``draft`` (rows = expanded nodes of
    one level pass ℓ ≥ 1, at the cache length the pass starts from, by draft batch; None when every swept
    tree had depth 1), the tree engine's ms per block outside the models by n (the grid's ``gamma`` axis)
    and draft batch, and the tree specs the sweep ran (:mod:`specsim.draft_shapes.trees`)."""

    verify: CostGrid
    draft: CostGrid | None
    overhead_ms_per_block: OverheadGrid
    trees: tuple[str, ...] = ()
    overhead_fit: TreeOverheadFit | None = None  # by size and depth; used when present (deep trees)

    def overhead_at(self, tree, batch, context) -> float:
        """ms per block outside the models for ``tree`` (a :class:`specsim.draft_shapes.trees.TreeSpec`) at
        ``context``: the size × depth plane when the sweep spanned enough depths, else the grid by n."""
        if self.overhead_fit is not None:  # deep trees: one more level is one more pass and acceptance step
            return self.overhead_fit.at(tree.n, tree.depth, batch, context)
        return float(self.overhead_ms_per_block.at(tree.n, batch, context))

    @property
    def max_nodes(self) -> int:
        """The largest n whose verification was measured."""
        return int(self.verify.rows[-1]) - 1

    def to_json(self) -> dict:
        return drop_none(
            {
                "verify": self.verify.to_json(),
                "draft": None if self.draft is None else self.draft.to_json(),
                "overhead_ms_per_block": self.overhead_ms_per_block.to_json(),
                "trees": list(self.trees),
                "overhead_fit": None if self.overhead_fit is None else self.overhead_fit.to_json(),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str) -> TreeCosts:
        check_keys(
            d if isinstance(d, dict) else {},
            {"verify", "draft", "overhead_ms_per_block", "trees", "overhead_fit"},
            where,
        )
        verify = CostGrid.from_json(field_req(d, "verify", where), f"{where}.verify")
        if verify.batch != (1,) or verify.rows[0] < 2:
            raise SpecsimError(
                f"{where}.verify: expected batch [1] and rows >= 2 (n+1 positions), got batch "
                f"{show(list(verify.batch))}, rows {show(list(verify.rows))}"
            )
        trees = field_list(d.get("trees", []), f"{where}.trees", nonempty=False)
        return cls(
            verify=verify,
            draft=field_opt(d, "draft", CostGrid.from_json, where),
            overhead_ms_per_block=OverheadGrid.from_json(
                field_req(d, "overhead_ms_per_block", where), f"{where}.overhead_ms_per_block"
            ),
            trees=tuple(field_str(t, f"{where}.trees[{i}]") for i, t in enumerate(trees)),
            overhead_fit=field_opt(d, "overhead_fit", TreeOverheadFit.from_json, where),
        )


def target_step_ms(value, tp_ms: float, where: str) -> float:
    """A target-only step's ms beyond the decode grid's Tp. Negative where real runs found the engine's step
    faster than the grid's timing (llama.cpp: llama-bench's, timed minutes before them), never so far that
    a priced step (``tp_ms``: the grid's fastest) would not stay above zero."""
    step = signed_ms(value, where)
    if step < 0 and step <= -tp_ms:
        raise SpecsimError(
            f"{where}: expected > -{tp_ms:.6g} (the target's fastest decode step, ms), got {show(value)}"
        )
    return step


def block_floor_ms(verify: CostGrid, gamma: int) -> float:
    """The cheapest verification of a block at γ (ms): the grid's fastest pass at the largest measured row
    count ≤ γ + 1 (more rows cost more), below which no block at γ is priced."""
    i = max(int(np.searchsorted(np.asarray(verify.rows), gamma + 1, side="right")) - 1, 0)
    return float(verify.values()[i].min())


def check_block_residuals(grid: OverheadGrid, verify: CostGrid, where: str) -> OverheadGrid:
    """``grid``, each γ's residual checked above minus its cheapest verification (:func:`block_floor_ms`):
    an engine's real blocks may run under their grids' forwards (llama.cpp: llama-bench's, timed minutes
    before), never so far that a block would be priced at or below zero."""
    pooled = np.asarray(grid.ms, dtype=float)
    by_context = pooled if grid.ms_by_context is None else np.asarray(grid.ms_by_context, dtype=float)
    for i, g in enumerate(grid.gamma):
        # the pooled values price a block whose context is not given, the by-context ones the rest
        floor, worst = block_floor_ms(verify, g), float(min(np.min(pooled[i]), np.min(by_context[i])))
        if worst <= -floor:
            raise SpecsimError(
                f"{where}: expected > -{floor:.6g} at gamma {g} (its cheapest verification, ms), "
                f"got {show(worst)}"
            )
    return grid


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class CostModel:
    """The grids, the engine's overhead and the host check of one latency calibration (plus, optionally,
    the token-tree grids)."""

    target_decode: CostGrid
    target_verify: CostGrid
    draft_first: CostGrid
    draft_next: CostGrid
    target_prefill: CostGrid | None  # None: not measured (a schema-1 profile without prefill tables)
    draft_prefill: CostGrid | None
    overhead_ms_per_block: OverheadGrid
    overhead_ms_per_target_step: float
    host_check: HostCheck | None = None
    interpolation: str = INTERPOLATION
    tree: TreeCosts | None = None
    sampling: SamplingCost | None = (
        None  # what T > 0 adds (specsim.profile_format.sampling_cost); None: not measured
    )
    adaptive_ms_per_block: OverheadGrid | None = (
        None  # what an adaptive ensemble's weight update adds; None: free
    )
    batched: BatchedCosts | None = None  # B requests decoded together (schema 3); None: not measured
    draft_catchup: CostGrid | None = None  # the draft's pass over the verified rows (llama.cpp); None: none
    overhead_ms_per_token: float = 0.0  # per token a block emits, beyond the block's overhead
    first_pass_drafts: bool = True  # False: the prompt's pass emits one token, blocks start after it
    lookup_overhead_ms_per_block: OverheadGrid | None = None  # blocks of a drafter with no model (n-gram)

    def block_overhead_ms(self, gamma, batch, context, adaptive: bool = False):
        """The engine's overhead of blocks at ``gamma`` (ms, array-like), plus an adaptive ensemble's
        weight update when ``adaptive`` (free in profiles that did not time it)."""
        ms = np.asarray(self.overhead_ms_per_block.at(gamma, batch, context), dtype=float)
        if adaptive and self.adaptive_ms_per_block is not None:
            ms = ms + np.asarray(self.adaptive_ms_per_block.at(gamma, batch, context), dtype=float)
        return ms

    def to_json(self) -> dict:
        return drop_none(
            {
                **{n: getattr(self, n).to_json() for n in GRID_NAMES if getattr(self, n) is not None},
                "overhead_ms_per_block": self.overhead_ms_per_block.to_json(),
                "overhead_ms_per_target_step": self.overhead_ms_per_target_step,
                "host_check": None if self.host_check is None else self.host_check.to_json(),
                "interpolation": self.interpolation,
                "tree": None if self.tree is None else self.tree.to_json(),
                "sampling": None if self.sampling is None else self.sampling.to_json(),
                "adaptive_ms_per_block": None
                if self.adaptive_ms_per_block is None
                else self.adaptive_ms_per_block.to_json(),
                "batched": None if self.batched is None else self.batched.to_json(),
                "draft_catchup": None if self.draft_catchup is None else self.draft_catchup.to_json(),
                "overhead_ms_per_token": self.overhead_ms_per_token or None,
                "first_pass_drafts": None if self.first_pass_drafts else False,
                "lookup_overhead_ms_per_block": None
                if self.lookup_overhead_ms_per_block is None
                else self.lookup_overhead_ms_per_block.to_json(),
            }
        )

    @classmethod
    def from_json(cls, d: dict, where: str = "latency.cost_model") -> CostModel:
        check_keys(
            d if isinstance(d, dict) else {},
            {
                *GRID_NAMES,
                "overhead_ms_per_block",
                "overhead_ms_per_target_step",
                "host_check",
                "interpolation",
                "tree",
                "sampling",
                "adaptive_ms_per_block",
                "batched",
                "draft_catchup",
                "overhead_ms_per_token",
                "first_pass_drafts",
                "lookup_overhead_ms_per_block",
            },
            where,
        )
        first = d.get("first_pass_drafts", True)
        if not isinstance(first, bool):
            raise SpecsimError(f"{where}.first_pass_drafts: expected true or false, got {show(first)}")
        grids = {
            name: CostGrid.from_json(field_req(d, name, where), f"{where}.{name}") for name in GRID_NAMES
        }
        if grids["target_decode"].rows[0] != 1:
            raise SpecsimError(
                f"{where}.target_decode.rows: expected to start at 1, "
                f"got {show(list(grids['target_decode'].rows))}"
            )
        for name in ("target_prefill", "draft_prefill"):
            if grids[name].context_tokens != (0.0,):
                raise SpecsimError(
                    f"{where}.{name}.context_tokens: expected [0] (a prompt's first pass), "
                    f"got {show(list(grids[name].context_tokens))}"
                )
        for name in ("target_decode", "target_verify", "target_prefill"):
            if grids[name].batch != (1,):
                raise SpecsimError(
                    f"{where}.{name}.batch: expected [1] (the target runs one request), "
                    f"got {show(list(grids[name].batch))}"
                )

        # llama.cpp's blocks (no draft in the prompt's pass) keep the sign their real runs measured.
        def blocks(value, at: str) -> OverheadGrid:
            grid = OverheadGrid.from_json(value, at, signed=not first)
            return grid if first else check_block_residuals(grid, grids["target_verify"], at)

        overhead = blocks(field_req(d, "overhead_ms_per_block", where), f"{where}.overhead_ms_per_block")
        lookup = field_opt(d, "lookup_overhead_ms_per_block", blocks, where)
        step = target_step_ms(
            field_req(d, "overhead_ms_per_target_step", where),
            float(grids["target_decode"].values().min()),
            f"{where}.overhead_ms_per_target_step",
        )
        return cls(
            **grids,
            overhead_ms_per_block=overhead,
            overhead_ms_per_target_step=step,
            host_check=field_opt(d, "host_check", HostCheck.from_json, where),
            interpolation=field_str(d.get("interpolation", INTERPOLATION), f"{where}.interpolation"),
            tree=field_opt(d, "tree", TreeCosts.from_json, where),
            sampling=field_opt(d, "sampling", SamplingCost.from_json, where),
            adaptive_ms_per_block=field_opt(d, "adaptive_ms_per_block", OverheadGrid.from_json, where),
            batched=field_opt(d, "batched", BatchedCosts.from_json, where),
            draft_catchup=_catchup_grid(d, where),
            overhead_ms_per_token=field_num(
                d.get("overhead_ms_per_token", 0.0), f"{where}.overhead_ms_per_token", unit="ms", zero_ok=True
            ),
            first_pass_drafts=first,
            lookup_overhead_ms_per_block=lookup,
        )

    @property
    def max_gamma(self) -> int:
        """The largest γ whose verification was measured."""
        return int(self.target_verify.rows[-1]) - 1

    def check_gamma(self, gamma: int, flag: str = "--gamma") -> None:
        """SpecsimError naming ``flag`` when ``gamma`` verifies more rows than the grid measured."""
        if gamma > self.max_gamma:
            raise SpecsimError(
                f"{flag} {gamma}: the profile's grid stops at gamma {self.max_gamma} (give {flag} up to it)"
            )


def _catchup_grid(d: dict, where: str) -> CostGrid | None:
    """The optional ``draft_catchup`` grid: rows >= 2 (γ + 1 verified rows), batch 1."""
    grid = field_opt(d, "draft_catchup", CostGrid.from_json, where)
    if grid is not None and (grid.rows[0] < 2 or grid.batch != (1,)):
        raise SpecsimError(
            f"{where}.draft_catchup: expected rows >= 2 (gamma + 1) and batch [1], got rows "
            f"{show(list(grid.rows))}, batch {show(list(grid.batch))}"
        )
    return grid


def with_residuals(model: CostModel, grid: OverheadGrid, step_ms: float, where: str) -> CostModel:
    """``model`` with a per-block grid and a target-only step beyond Tp (ms, signed), checked as every
    calibration's are: each γ's block and the n-gram lookup's above minus their cheapest verification
    (:func:`check_block_residuals`), the step above minus the cheapest Tp (:func:`target_step_ms`)."""
    step_ms = target_step_ms(step_ms, float(model.target_decode.values().min()), f"{where}: target-only step")
    grid = check_block_residuals(grid, model.target_verify, where)
    lookup = model.lookup_overhead_ms_per_block
    if lookup is not None:
        check_block_residuals(lookup, model.target_verify, f"{where} (n-gram lookup)")
    return replace(model, overhead_ms_per_block=grid, overhead_ms_per_target_step=step_ms)
