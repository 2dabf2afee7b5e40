"""What one forward pass costs: the interface every pricing reads passes through (ARCHITECTURE.md, Pricing).

A pass is one forward of the ``target`` or the ``draft`` over ``rows`` new positions per sequence for
``batch`` sequences, on caches ``width`` positions wide (pads and masked columns included); ``kind`` names
its place in the engine's alternation (:data:`KINDS`). Implementations:
:class:`specsim.costs.grid_pass_cost.GridPassCost` (a profile's measured grids) and
:class:`specsim.hardware.roofline_pass_cost.RooflinePassCost` (a model on a device under a runtime).
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

TARGET, DRAFT = "target", "draft"
STEP = "step"  # rows on a warm cache after a pass of its kind: target step, verification, later draft steps
FIRST = "first"  # a block's first draft step, right after the verification (1 row, 2 after a full accept)
PREFILL = "prefill"  # a prompt's first pass: rows = its tokens on an empty cache, logits at the last only
UNPADDED = "unpadded"  # a batched target step with no masked column (SDPA then runs without a mask)
TREE = "tree"  # a pass under a tree attention mask: verification of n + 1 rows, a draft level pass
CATCHUP = "catchup"  # the draft's pass over the rows the target just verified (llama.cpp), logits at the last
KINDS = (STEP, FIRST, PREFILL, UNPADDED, TREE, CATCHUP)


class PassMs(NamedTuple):
    """ms of the queried passes (a float for one) and where each lies outside what the source measured."""

    ms: np.ndarray | float
    extrapolated: np.ndarray | bool


class PassCost(Protocol):
    """Prices passes and the work around them (ms); arrays broadcast together."""

    def pass_ms(self, role: str, rows, width, batch=1, *, kind: str = STEP) -> PassMs:
        """Passes of ``role`` (:data:`TARGET`, :data:`DRAFT`) of ``kind`` at (rows, width, batch)."""
        ...

    def block_overhead_ms(self, gamma, batch=1, width=None, *, adaptive: bool = False, gpu_ms=None):
        """Work outside the models per SD block at γ (``adaptive``: an adaptive ensemble's weight update;
        ``gpu_ms``: the block's passes, against which overlapped CPU work hides; None: all of it hides)."""
        ...

    def block_terms_ms(self, gamma, batch=1, width=None, *, gpu_ms=None) -> dict:
        """:meth:`block_overhead_ms` as named terms that sum to it (sampling, rejection, lookup, ...)."""
        ...

    def step_terms_ms(self, batch=1, *, gpu_ms=None) -> dict:
        """:meth:`step_overhead_ms` as named terms that sum to it."""
        ...

    def tree_overhead_ms(self, tree, batch=1, width=0.0) -> float:
        """Work outside the models per token-tree block (a :class:`specsim.draft_shapes.trees.TreeSpec`)."""
        ...

    def step_overhead_ms(self, batch=1, *, gpu_ms=None) -> float:
        """Work outside the model per target-only step (``gpu_ms``: its forward)."""
        ...

    def token_overhead_ms(self, batch=1) -> float:
        """Work outside the models per token an SD block emits (sampling there, detokenising), beyond
        :meth:`block_overhead_ms`; 0 where the engine's block overhead holds it."""
        ...

    @property
    def draft_catchup(self) -> bool:
        """Whether each block's draft also runs a :data:`CATCHUP` pass over the γ + 1 verified rows (its
        first draft step then feeds one row: the target's last token)."""
        ...

    @property
    def first_pass_drafts(self) -> bool:
        """Whether the prompt's pass also verifies a first block of drafts (this project's engines), or emits
        one token with blocks after it (llama.cpp)."""
        ...

    def encoder_ms(self, images: int, *, draft: bool = False) -> float:
        """The target's (``draft``: the draft's own) vision encoder over ``images`` images."""
        ...

    @property
    def extra_draft_forwards(self) -> float:
        """Draft forwards a block runs beyond its γ drafts (priced as a 1-row draft step each)."""
        ...

    @property
    def sampling(self):
        """What drawing tokens at T > 0 adds per draft, per target step and per block's acceptance
        (:class:`specsim.profile_format.sampling_cost.SamplingCost`; None: greedy costs)."""
        ...

    def measured_rows(self, role: str, kind: str = STEP) -> tuple[int, ...] | None:
        """The rows the source prices exactly (None: any)."""
        ...

    def measured_widths(self, role: str, kind: str = STEP, rows: int = 1) -> tuple[float, ...] | None:
        """The caches the source measured passes of ``rows`` rows on, narrowest first (None: any width)."""
        ...

    def check_batch(self, batch: int, where: str = "--batch") -> None:
        """SpecsimError unless the source prices ``batch`` sequences."""
        ...


def draft_steps_ms(cost: PassCost, widths, batch) -> PassMs:
    """A block's draft steps at cache ``widths`` [..., g] (the last axis the steps in order): the first a
    :data:`FIRST` pass, the others :data:`STEP` passes, 1 row each."""
    widths = np.asarray(widths, dtype=float)
    ms, out = cost.pass_ms(DRAFT, 1, widths, batch)
    if widths.shape[-1]:
        first, out0 = cost.pass_ms(DRAFT, 1, widths[..., :1], batch, kind=FIRST)
        ms = np.concatenate([first, ms[..., 1:]], -1)
        out = np.concatenate([out0, out[..., 1:]], -1)
    return PassMs(ms, out)
