"""Serving steps priced by the GPU planner's roofline and runtimes (a :class:`~.step_cost.StepCost`).

Every pass is a :class:`specsim.hardware.passes.PassTable` entry priced under the runtime exactly as
:func:`specsim.hardware.roofline.forward_ms` prices a pass. A pass's runtime-independent terms (FLOPs, bytes,
score elements, rows, all-reduce traffic) are affine in the batch B and in Σ context for a fixed number of
new rows per sequence, so a decode/verify pass over sequences of different KV lengths has exactly the terms of
B sequences at their mean context; they are taken from :func:`~specsim.hardware.passes.pass_terms` at three
points per row count and cached, and a pass's compute, memory and other ms, affine in its terms at fixed rows,
are cached lines in Σ context per (batch, rows, prefill chunks). A step's target pass adds its prefill chunks'
terms (each chunk: its tokens over its cached prompt positions, logits for the last only) with the weights
streamed once, as vLLM V1 runs decode rows and chunked prefill in one forward. Draft passes: γ + the runtime's
``extra_draft_forwards_per_block`` one-row passes at batch B, pass j over KV + j; the first carries the
draft's prefill chunks. The draft's prompt holds ``draft_image_tokens_per_image`` positions per image (None:
the target's, as multimodal drafting; 0: text-only drafting drops them), its decode passes are priced over the
target's context. Vision encoder: :func:`~specsim.hardware.roofline.vision_ms` on one GPU, once per image, its
features reused by the draft. Overhead: the planner's block overhead per SD step (the runtime's fixed part
plus B · its per-sequence part, :func:`~specsim.hardware.runtime.block_overhead_ms`), 0 without SD. Tensor
parallel: the target over ``tp`` GPUs as the planner splits it, the draft on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from specsim.errors import SpecsimError
from specsim.hardware.device import Device
from specsim.hardware.model import ModelSpec
from specsim.hardware.parallel import check_splittable, check_tp, timing_gpus
from specsim.hardware.passes import PassTable, pass_terms
from specsim.hardware.roofline import USABLE_MEMORY_FRACTION, roof_ms, vision_ms
from specsim.hardware.runtime import block_overhead_ms
from specsim.serve.step_cost import chunk_images

_NAMES = tuple(f.name for f in fields(PassTable))
_ADDITIVE = np.array(
    [
        n in ("flops", "base_bytes", "attention_flops", "kv_bytes", "score_elems", "rows", "link_bytes")
        for n in _NAMES
    ]
)
_BYTES = _NAMES.index("base_bytes")


class _Model:
    """Cached pass terms of one model on one device: affine per row count, exact per prefill chunk."""

    def __init__(self, m: ModelSpec, dev: Device, tp: int):
        self.m, self.dev, self.tp = m, dev, tp
        self.affine: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.chunks: dict[tuple[int, int], np.ndarray] = {}

    def _terms(self, batch, context, new, logits=None) -> np.ndarray:
        t = pass_terms(self.m, self.dev, batch, context, new, self.tp, logits)
        return np.array([t[k] for k in _NAMES], dtype=float)

    def coefficients(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(per pass, per sequence, per context token) terms of passes with ``rows`` new rows per sequence."""
        if rows not in self.affine:
            base = self._terms(1, 0, rows)
            per_seq = self._terms(2, 0, rows) - base
            per_ctx = self._terms(1, 1, rows) - base
            self.affine[rows] = (base - per_seq, per_seq, per_ctx)
        return self.affine[rows]

    def weight_bytes(self) -> float:
        """Bytes of weights one pass streams per GPU (counted once in a merged pass)."""
        return float(self.coefficients(1)[0][_BYTES])

    def decode(self, batch: int, rows: int, context_sum: np.ndarray) -> np.ndarray:
        """Terms of passes over ``batch`` sequences × ``rows`` rows at total KV ``context_sum`` (one each)."""
        c0, c1, c2 = self.coefficients(rows)
        return c0 + batch * c1 + np.asarray(context_sum, dtype=float)[:, None] * c2

    def chunk(self, tokens: int, context: int) -> np.ndarray:
        """Terms of one prefill chunk as a pass of its own (logits for its last position only)."""
        key = (int(tokens), int(context))
        if key not in self.chunks:
            self.chunks[key] = self._terms(1, context, tokens, logits=1)
        return self.chunks[key]

    def merge(self, first: np.ndarray | None, chunks) -> np.ndarray | None:
        """One pass's terms: ``first`` (or nothing) plus every chunk, the weights streamed once."""
        if not chunks:
            return first
        parts = ([first] if first is not None else []) + [self.chunk(c[0], c[1]) for c in chunks]
        if not parts:
            return None
        out = parts[0].copy()
        for p in parts[1:]:
            out[_ADDITIVE] += p[_ADDITIVE]
        out[_BYTES] -= (len(parts) - 1) * self.weight_bytes()
        return out


@dataclass(frozen=True)
class RooflineStepCost:
    """Step costs of ``target``/``draft`` on ``device`` under ``runtime`` (a Runtime or an Efficiency), the
    target over ``tp`` GPUs split as ``split`` (see the module docstring)."""

    target: ModelSpec
    draft: ModelSpec
    device: Device
    runtime: object
    tp: int = 1
    split: str = "tensor"
    draft_image_tokens_per_image: int | None = None
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
        self._cache["target"] = _Model(self.target, self.device, timing_gpus(self.tp, self.split))
        self._cache["draft"] = _Model(self.draft, self.device, 1)
        self._cache["vision"] = {}

    @property
    def image_tokens_per_image(self) -> int:
        return self.target.vision.image_tokens if self.target.vision is not None else 0

    def kv_cache_tokens(self) -> int:
        """KV positions that fit beside both models' weights: (usable memory of ``tp`` GPUs − weights) / KV
        bytes per position of target + draft (the planner's usable fraction; replicated KV heads ignored)."""
        weights = self.target.weight_bytes + self.draft.weight_bytes
        free = USABLE_MEMORY_FRACTION * self.device.memory_bytes * self.tp - weights
        per_token = self.target.kv_bytes_per_token + self.draft.kv_bytes_per_token
        if free < per_token:
            raise SpecsimError(
                f"{self.target.name} and {self.draft.name} leave no room for a KV cache on {self.tp} x "
                f"{self.device.name} (weights {weights / 1e9:.1f} GB)"
            )
        return int(free // per_token)

    def _line(self, role: str, batch: int, rows: int, chunks) -> tuple[float, ...]:
        """(compute, memory, attention compute, attention memory, rest) ms of one ``role`` pass over
        ``batch`` sequences × ``rows`` rows with prefill ``chunks`` (tokens, cached) in the same pass, each
        as (ms at Σ KV 0, ms per Σ KV token): at fixed (batch, rows, chunks) the terms are affine in Σ KV
        and the efficiencies depend on the rows only, so each part is a line, computed once from two points
        and cached."""
        lines = self._cache.setdefault("lines", {})
        key = (role, batch, rows, tuple((int(c[0]), int(c[1])) for c in chunks) if chunks else ())
        line = lines.get(key)
        if line is None:
            model = self._cache[role]
            if batch:
                terms = model.decode(batch, rows, np.array([0.0, 1.0]))
                if chunks:
                    terms = np.stack([model.merge(t, chunks) for t in terms])
            else:
                terms = np.stack([model.merge(None, chunks)] * 2)
            parts = PassTable(**{name: terms[:, i] for i, name in enumerate(_NAMES)}).parts_ms(self.runtime)
            line = lines[key] = tuple(v for p in parts for v in (float(p[0]), float(p[1] - p[0])))
        return line

    def _pass_ms(self, line: tuple[float, ...], sums):
        """ms of a pass from its :meth:`_line` at summed KV ``sums`` (a float or an array)."""
        c0, c1, m0, m1, ac0, ac1, am0, am1, r0, r1 = line
        overlap = self.runtime.overlap
        return (
            roof_ms(c0 + c1 * sums, m0 + m1 * sums, overlap)
            + roof_ms(ac0 + ac1 * sums, am0 + am1 * sums, overlap)
            + r0
            + r1 * sums
        )

    def _draft_passes(self, batch: int, gamma: int, chunks) -> list[tuple[tuple[float, ...], float, float]]:
        """(line, Σ KV offset, weight) of a block's draft passes: γ one-row passes at ``batch``, pass j over
        Σ KV + j·B, the first carrying ``chunks``, plus the runtime's extra forwards priced as the first pass
        without them; with nothing decoding, ``chunks`` alone."""
        if not (batch and gamma):
            return [(self._line("draft", 0, 1, chunks), 0.0, 1.0)] if chunks else []
        out = [
            (self._line("draft", batch, 1, chunks if j == 0 else ()), float(batch * j), 1.0)
            for j in range(gamma)
        ]
        extra = float(self.runtime.extra_draft_forwards_per_block)
        return out + [(self._line("draft", batch, 1, ()), 0.0, extra)] if extra else out

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
        every pass of every step from its :meth:`_line` in one array expression (``since_admission``
        ignored: a GPU has no cache warm-up to price)."""
        blocks = self._cache.setdefault("blocks", {})
        if (batch, gamma) not in blocks:
            passes = [
                (self._line("target", batch, gamma + 1, ()), 0.0, 1.0),
                *self._draft_passes(batch, gamma, ()),
            ]
            lines = np.array([p[0] for p in passes])
            blocks[batch, gamma] = (
                lines.T[:, :, None],  # [part, pass, 1]
                np.array([p[1] for p in passes])[:, None],
                np.array([p[2] for p in passes]),
            )
        lines, offsets, weights = blocks[batch, gamma]
        per_pass = self._pass_ms(lines, context_tokens.sum(axis=1)[None, :] + offsets)
        return weights @ per_pass + self.overhead_ms(batch, gamma)

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        if not batch and not prefill_chunks:
            return 0.0
        sums = float(context_tokens[:batch].sum()) if batch else 0.0
        return float(self._pass_ms(self._line("target", batch, rows_per_seq, prefill_chunks), sums))

    def draft_ms(self, batch, gamma, context_tokens, prefill_chunks=(), since_admission=None) -> float:
        sums = float(context_tokens[:batch].sum()) if batch else 0.0
        passes = self._draft_passes(batch, gamma, self._draft_chunks(prefill_chunks))
        return float(sum(w * self._pass_ms(line, sums + off) for line, off, w in passes))

    def encoder_ms(self, images) -> float:
        if not images or self.target.vision is None:
            return 0.0
        cache = self._cache["vision"]
        if images not in cache:
            cache[images] = float(
                vision_ms(self.target.vision, self.target.dtype_bytes, self.device, self.runtime, images)
            )
        return cache[images]

    def overhead_ms(self, batch, gamma) -> float:
        # the planner's block overhead: the fixed part plus B · the per-sequence part (runtime.py)
        return float(block_overhead_ms(self.runtime, batch)) if gamma > 0 and batch > 0 else 0.0
