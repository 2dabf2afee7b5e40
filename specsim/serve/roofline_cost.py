"""Serving steps priced by the GPU planner's roofline and runtimes (a :class:`~.step_cost.StepCost`).

Every pass comes from :class:`specsim.hardware.roofline_pass_cost.RooflinePassCost`, priced under the
runtime as :func:`specsim.hardware.roofline.forward_ms` prices a pass. Sequences of different KV lengths
price as B at their mean context (a pass's terms are affine in Σ context at fixed B and rows per sequence).
A step's target pass carries decode rows and prefill chunks in one forward (vLLM V1); draft: γ +
``extra_draft_forwards_per_block`` one-row passes at batch B, pass j over KV + j.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.costs.pass_cost import DRAFT, TARGET
from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.parallel import check_splittable, check_tp, per_gpu_resident_bytes, timing_gpus
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION
from specsim.hardware.roofline_pass_cost import RooflinePassCost
from specsim.serve.step_cost import chunk_images


@dataclass(frozen=True)
class RooflineStepCost:
    """Step costs of ``target``/``draft`` on ``device`` under ``runtime`` (a Runtime or an Efficiency), the
    target over ``tp`` GPUs split as ``split`` (see the module docstring)."""

    target: ModelSpec
    draft: ModelSpec | None  # None: a drafting kind with no model (n-gram, suffix)
    device: Device
    runtime: object
    tp: int = 1
    split: str = "tensor"
    draft_image_tokens_per_image: int | None = None
    draft_kind: str = "model"
    draft_tp: int | None = None  # GPUs the draft is split over (None: as the runtime places it)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        per = self.draft_image_tokens_per_image
        if per is not None and not 0 <= per <= self.image_tokens_per_image:
            raise SpecsimError(
                f"--draft-image-tokens: expected 0..{self.image_tokens_per_image} positions per image (the "
                f"target's), got {per!r}"
            )
        check_tp(self.tp, self.device)
        check_splittable(self.target, self.tp, self.split, "target")
        d_tp = self.draft_tp
        if d_tp is None:
            d_tp = self.tp if getattr(self.runtime, "draft_split", "single") == "target" else 1
        if self.draft is None:
            d_tp = 1
        elif d_tp > 1:
            check_splittable(self.draft, d_tp, self.split, "draft")
        self._cache["draft_gpus"] = d_tp
        self._cache["passes"] = RooflinePassCost(
            self.target,
            self.draft,
            self.device,
            self.runtime,
            timing_gpus(self.tp, self.split),
            timing_gpus(d_tp, self.split),
            self.draft_kind,
        )

    @property
    def passes(self) -> RooflinePassCost:
        """The pass cost every step is composed of."""
        return self._cache["passes"]

    @property
    def image_tokens_per_image(self) -> int:
        return self.target.vision.image_tokens if self.target.vision is not None else 0

    def kv_cache_tokens(self, given: int | None = None) -> int:
        """KV positions that fit on the most loaded GPU beside its weights, at the planner's usable fraction:
        :func:`~specsim.hardware.parallel.per_gpu_resident_bytes` (KV over the GPUs, or over the KV heads
        where ``tp`` exceeds them: replicated heads hold the same positions on every GPU); ``given`` (a
        user's --kv-cache-tokens) instead, when they fit."""
        d_tp, usable = self._cache["draft_gpus"], USABLE_MEMORY_FRACTION * self.device.memory_bytes
        at = lambda n: per_gpu_resident_bytes(  # noqa: E731
            self.target, self.draft, 1, n, self.tp, d_tp, split=self.split
        )
        base = float(at(0))
        per_token = float(at(1)) - base
        if usable - base < per_token:
            models = [self.target] + ([self.draft] if self.draft is not None else [])
            weights = sum(m.weight_bytes for m in models)
            raise SpecsimError(
                f"{' and '.join(m.name for m in models)} leave no room for a KV cache on {self.tp} x "
                f"{self.device.name} (weights {weights / 1e9:.1f} GB)"
            )
        fits = int((usable - base) // per_token)
        if given is not None and given > fits:  # batches that cannot run would be priced
            raise SpecsimError(
                f"--kv-cache-tokens: {given} positions, more than the {fits} that {self.tp} x "
                f"{self.device.name} can hold beside the weights (the roofline's usable memory); expected at "
                f"most {fits}"
            )
        return fits if given is None else given

    def _draft_passes(self, batch: int, gamma: int, chunks) -> list[tuple[tuple[float, ...], float, float]]:
        """(line, Σ KV offset, weight) of a block's draft passes: γ one-row passes at ``batch``, pass j over
        Σ KV + j·B, the first carrying ``chunks``, plus the runtime's extra forwards priced as the first pass
        without them; with nothing decoding, ``chunks`` alone."""
        if self.draft is None:  # a lookup kind: no draft pass (its host work is a block term)
            return []
        lines = self.passes.draft_line
        if not (batch and gamma):
            return [(self.passes.line(DRAFT, 0, 1, chunks), 0.0, 1.0)] if chunks else []
        out = [(lines(batch, chunks if j == 0 else ()), float(batch * j), 1.0) for j in range(gamma)]
        extra = self.passes.extra_draft_forwards
        return out + [(lines(batch, ()), 0.0, extra)] if extra else out

    def _draft_chunks(self, chunks) -> list:
        """The draft's share of prefill chunks: each image's positions replaced by the draft's own."""
        per = self.draft_image_tokens_per_image
        if per is None:
            return list(chunks)
        drop = self.image_tokens_per_image - per
        out = [(c[0] - drop * chunk_images(c), c[1]) for c in chunks]
        return [c for c in out if c[0] > 0]

    def decode_steps_ms(self, *, batch, gamma, context_tokens, since_admission=None) -> np.ndarray:
        """K decode-only steps at once (ms each; ``context_tokens`` [K, batch]): draft, target, overhead,
        every pass of every step from its line in one array expression (``since_admission`` ignored: a GPU
        has no cache warm-up to price)."""
        blocks = self._cache.setdefault("blocks", {})
        if (batch, gamma) not in blocks:
            passes = [
                (self.passes.line(TARGET, batch, gamma + 1, ()), 0.0, 1.0),
                *self._draft_passes(batch, gamma, ()),
            ]
            lines = np.array([p[0] for p in passes])
            blocks[batch, gamma] = (
                lines.T[:, :, None],  # [part, pass, 1]
                np.array([p[1] for p in passes])[:, None],
                np.array([p[2] for p in passes]),
            )
        lines, offsets, weights = blocks[batch, gamma]
        per_pass = self.passes.line_ms(lines, context_tokens.sum(axis=1)[None, :] + offsets)
        return weights @ per_pass + self.overhead_ms(batch, gamma)

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        if not batch and not prefill_chunks:
            return 0.0
        sums = float(context_tokens[:batch].sum()) if batch else 0.0
        return float(self.passes.line_ms(self.passes.line(TARGET, batch, rows_per_seq, prefill_chunks), sums))

    def draft_ms(self, batch, gamma, context_tokens, prefill_chunks=(), since_admission=None) -> float:
        sums = float(context_tokens[:batch].sum()) if batch else 0.0
        passes = self._draft_passes(batch, gamma, self._draft_chunks(prefill_chunks))
        return float(sum(w * self.passes.line_ms(line, sums + off) for line, off, w in passes))

    def encoder_ms(self, images) -> float:
        return self.passes.encoder_ms(images)

    def overhead_ms(self, batch, gamma) -> float:
        # the planner's engine terms: a block's (sampling, rejection, lookup, scheduling) with SD, a
        # target-only step's (sampling, scheduling) without
        if batch <= 0:
            return 0.0
        if gamma > 0:
            return float(self.passes.block_overhead_ms(gamma, batch))
        return float(self.passes.step_overhead_ms(batch))
