"""A serving step priced from a measured profile (:class:`specsim.serve.step_cost.StepCost`).

Decode steps: the batched engine's grids of this machine (:mod:`specsim.profile_format.batched_cost`), one
padded batch read at width = max(context) and B = the sequences decoding (no extrapolation along B); rejected
drafts stay as masked cache columns (``keeps_rejected_drafts``). Prompts: the profile's prefill grids at
batch 1, one first pass per chunk (not fused into the decode pass), and its vision encoder. Outside the
passes: the server loop's terms where measured, else the static batched engine's per block.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specsim.costs.grid_pass_cost import GridPassCost
from specsim.costs.pass_cost import DRAFT, PREFILL, TARGET, draft_steps_ms
from specsim.errors import SpecsimError
from specsim.profile_format import MethodAcceptance, Profile
from specsim.serve.step_cost import chunk_images


@dataclass(frozen=True)
class ProfileStepCost:
    """Step costs (ms) read from a measured profile's batched and prefill grids (module docstring)."""

    keeps_rejected_drafts = True  # the batched engine masks rejected drafts in place (its cache width)

    passes: GridPassCost  # the batched engine's grids (``batched`` set), prefills and encoders
    image_tokens_per_image: int = 0
    draft_drop_tokens_per_image: float = 0.0
    draft_vision: bool = False
    captioner_ms_per_image: float = 0.0
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # pass ms by query (pure reads)

    @classmethod
    def from_profile(
        cls, profile: Profile, image_tokens_per_image: int = 0, entries: Sequence[MethodAcceptance] = ()
    ) -> ProfileStepCost:
        """The profile's costs; with ``entries`` (one drafting method's, any scenarios), that method's
        prompt and set-up per image."""
        passes = GridPassCost.batch(
            profile.latency,
            f"profile {profile.name!r}: no batched cost (calibrate latency --request-batches 1,2,4,8)",
        )
        drop, draft_vision, caption = 0.0, False, 0.0
        if entries:
            drop = draft_drop_tokens_per_image(entries)
            if drop and not image_tokens_per_image:
                raise SpecsimError(
                    "image tokens per image: expected > 0 for a method whose draft drops image positions"
                )
            entry = entries[0]
            draft_vision = entry.uses_draft_vision
            if entry.captions_per_prompt:
                if profile.latency.captioner_ms_per_image is None:  # as setup_ms refuses it for one request
                    raise SpecsimError(
                        f"method {entry.method!r} uses captions, but captioner_ms_per_image is not measured"
                    )
                caption = profile.latency.captioner_ms_per_image
        return cls(passes, int(image_tokens_per_image), drop, draft_vision, caption)

    @property
    def batched(self):
        """The batched engine's measured costs (its server loop's among them)."""
        return self.passes.batched

    def _scales(self, prefill_chunks, since_admission, draft: bool = False) -> tuple[float, float]:
        """(prefill scale, pass scale) of a step. The server loop runs each prompt's vision encoder, target
        prefill and draft prefill one after another between its decode passes, so the prefills find their
        weights out of the CPU's caches (``cold_pass_ms_scale``; the grids timed every pass after another of
        its kind), and the passes of the next few steps run slower than the grid's (the loop's pass scale by
        steps since the admission; a profile without it prices the admitting step's pass cold instead)."""
        loop = self.batched.server_loop
        if loop is None:
            return 1.0, 1.0
        cold = loop.cold_pass_ms_scale if len(prefill_chunks) else 1.0
        if not (loop.draft_pass_scale if draft else loop.target_pass_scale):
            return cold, cold
        if since_admission is None and admissions(prefill_chunks):
            since_admission = 0
        return cold, float(loop.pass_scale(since_admission, draft))

    def _memo_ms(self, key: tuple, price) -> float:
        """``price()`` once per ``key``: a serving run reads the same few passes at every step."""
        if key not in self._memo:
            self._memo[key] = price()
        return self._memo[key]

    def _prefill(self, role: str, chunks, drop_per_image: float = 0.0) -> float:
        rows = [float(c[0] - drop_per_image * chunk_images(c)) for c in chunks if c[0] > 0]
        if not rows:
            return 0.0
        one = lambda r: float(self.passes.pass_ms(role, r, 0.0, 1, kind=PREFILL).ms)
        return float(np.sum([self._memo_ms((role, PREFILL, r), lambda r=r: one(r)) for r in rows]))

    def _memo_many(self, key, widths: np.ndarray, price) -> np.ndarray:
        """ms at each of ``widths`` [K]: remembered ones, the rest priced in one ``price(widths)`` call."""
        keys = [(*key, float(w)) for w in widths]
        new = sorted({k[-1] for k in keys if k not in self._memo})
        if new:
            self._memo.update(zip([(*key, w) for w in new], map(float, price(np.asarray(new)))))
        return np.array([self._memo[k] for k in keys])

    def _target_passes_ms(self, rows: int, widths: np.ndarray, batch: int) -> np.ndarray:
        """One target pass of ``rows`` rows per sequence at ``batch`` per cache width."""
        price = lambda w: np.atleast_1d(self.passes.pass_ms(TARGET, rows, w, batch).ms)
        return self._memo_many((TARGET, rows, batch), widths, price)

    def _draft_blocks_ms(self, widths: np.ndarray, batch: int, gamma: int) -> np.ndarray:
        """A block's γ draft steps at ``batch`` per cache width w (step j at w + j), summed."""
        price = lambda w: np.sum(draft_steps_ms(self.passes, w[:, None] + np.arange(gamma), batch).ms, -1)
        return self._memo_many((DRAFT, gamma, batch), widths, price)

    def target_step_ms(self, batch, rows_per_seq, context_tokens, prefill_chunks=(), since_admission=None):
        cold, warm = self._scales(prefill_chunks, since_admission)
        total = self._prefill(TARGET, prefill_chunks)
        total += sum(self.passes.encoder_ms(chunk_images(c)) for c in prefill_chunks)  # one call per prompt
        total *= cold
        loop = self.batched.server_loop
        if loop is not None:  # each admission joins the batch once and leaves once, and sets its prefill up
            joins = loop.request_ms(rows_per_seq - 1) + loop.prefill_setup_ms(False)
            total += joins * admissions(prefill_chunks)
        if batch:
            width = np.max(context_tokens[:batch], keepdims=True).astype(float)
            total += float(self._target_passes_ms(rows_per_seq, width, batch)[0]) * warm
        return total

    def draft_ms(self, batch, gamma, context_tokens, prefill_chunks=(), since_admission=None) -> float:
        drop = self.draft_drop_tokens_per_image
        cold, warm = self._scales(prefill_chunks, since_admission, draft=True)
        total = self._prefill(DRAFT, prefill_chunks, drop)
        for c in prefill_chunks:
            if self.draft_vision:
                total += self.passes.encoder_ms(chunk_images(c), draft=True)
            total += self.captioner_ms_per_image * chunk_images(c)
        total *= cold
        loop = self.batched.server_loop
        if loop is not None:  # what SD adds to a prefill's set-up: the draft's cache row and prompt
            extra = max(loop.prefill_setup_ms(True) - loop.prefill_setup_ms(False), 0.0)
            total += extra * admissions(prefill_chunks)
        if batch and gamma:
            width = np.max(context_tokens[:batch], keepdims=True).astype(float)
            total += float(self._draft_blocks_ms(width, batch, gamma)[0]) * warm
        return total

    def decode_steps_ms(self, *, batch, gamma, context_tokens, since_admission=None) -> np.ndarray:
        """K decode-only steps at once (ms each; ``context_tokens`` [K, batch], ``since_admission`` [K] or
        None): every step's passes in one grid read each, the same floats as :func:`step_ms` step by step."""
        width = np.max(np.asarray(context_tokens)[:, :batch], axis=1).astype(float)  # [K]
        loop = self.batched.server_loop
        scale = (lambda draft: 1.0) if loop is None else (lambda draft: self._warm(since_admission, draft))
        total = np.zeros(len(width))
        if gamma:
            total = total + self._draft_blocks_ms(width, batch, gamma) * scale(True)
        target = self._target_passes_ms(gamma + 1, width, batch)
        return (total + target * scale(False)) + self.overhead_ms(batch, gamma)

    def _warm(self, since_admission, draft: bool):
        """The loop's pass scale of decode-only steps ``since_admission`` [K] steps after an admission."""
        loop = self.batched.server_loop
        if not (loop.draft_pass_scale if draft else loop.target_pass_scale):
            return 1.0
        return np.asarray(loop.pass_scale(since_admission, draft), dtype=float)

    def extrapolation_note(
        self, widest_context: int, longest_prompt: int, at_least: bool = False
    ) -> str | None:
        """Where a run read the grids past what the profile measured (context, prompt rows), by how much."""
        p = self.passes
        widths = (p.measured_widths(TARGET, rows=2), p.measured_widths(TARGET), p.measured_widths(DRAFT))
        widest = min(w[-1] for w in widths if w is not None)
        rows = p.measured_rows(TARGET, PREFILL)
        parts = []
        if widest_context > widest:
            reach = f"{'at least ' if at_least else ''}{widest_context}"
            parts.append(
                f"KV caches reach {reach} positions, past the batched grids' widest {widest:g} "
                f"({widest_context / widest:.1f}x)"
            )
        if rows and longest_prompt > rows[-1]:
            parts.append(
                f"prompts of {longest_prompt} positions, past the prefill grid's {rows[-1]} rows "
                f"({longest_prompt / rows[-1]:.1f}x)"
            )
        return None if not parts else "extrapolated past the measured grids: " + "; ".join(parts)

    def encoder_ms(self, images) -> float:
        """0: the vision encoder is priced with each prompt's prefill chunk (``target_step_ms``), one call per
        prompt's images, as the server loop runs it."""
        return 0.0

    def overhead_ms(self, batch, gamma) -> float:
        if self.batched.server_loop is not None:
            return self.batched.server_loop.step_overhead_ms(batch, gamma)
        if gamma == 0:
            return self.passes.step_overhead_ms(batch)
        return float(self.passes.block_overhead_ms(gamma, batch))


def admissions(prefill_chunks) -> int:
    """Requests a step admits: its prefill chunks from prompt position 0."""
    return sum(1 for c in prefill_chunks if c[0] > 0 and c[1] == 0)


def draft_drop_tokens_per_image(entries: Sequence[MethodAcceptance]) -> float:
    """Prompt positions a method's draft leaves out per image: mean over the entries' traces of (target
    prompt − draft prompt) / images (0 when no trace of an image scenario records both)."""
    drops = [
        (t.prompt_tokens - t.draft_prompt_tokens) / e.images_per_prompt
        for e in entries
        if e.images_per_prompt
        for t in e.traces
        if t.prompt_tokens is not None and t.draft_prompt_tokens is not None
    ]
    return float(np.mean(drops)) if drops else 0.0
