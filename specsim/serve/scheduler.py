"""One scheduling step of a vLLM-V1-like continuous-batching scheduler (token budget, chunked prefill).

Models vLLM V1 ``Scheduler.schedule``: a running list in admission order, a FCFS waiting queue, a token budget
(``max_num_batched_tokens``) and an encoder budget per step. Order: decodes (γ+1 tokens each: pending + γ
drafts; 1 without SD), then running prefills' next chunks, then admissions in arrival order (``max_num_seqs``,
budget, a KV cache holding prompt + output + γ). A prompt is its images' positions first, then its text.
Departs from vLLM: decodes before chunks, no draft trimming, whole-sequence KV reservation, no preemption.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.bounds import in_range, range_text
from specsim.errors import SpecsimError

DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM V1's scheduler knobs (``encoder_budget_tokens`` None: equal to ``max_num_batched_tokens``)."""

    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    encoder_budget_tokens: int | None = None
    chunked_prefill: bool = True
    kv_cache_tokens: int | None = None
    kv_cache_source: str = "--kv-cache-tokens"  # who set kv_cache_tokens: the errors name it

    def __post_init__(self) -> None:
        for flag, value in (
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--encoder-budget", self.encoder_budget_tokens),
            ("--kv-cache-tokens", self.kv_cache_tokens),
        ):
            if value is None and flag in ("--encoder-budget", "--kv-cache-tokens"):
                continue
            unit = "kv_tokens" if flag == "--kv-cache-tokens" else "step_tokens"
            integer = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            if not integer or not in_range(value, unit):
                raise SpecsimError(f"{flag}: expected an integer in {range_text(unit)}, got {value!r}")

    @property
    def encoder_budget(self) -> int:
        """Image tokens the encoder may take per step."""
        return (
            self.max_num_batched_tokens if self.encoder_budget_tokens is None else self.encoder_budget_tokens
        )

    def check_workload(
        self, *, image_tokens: int, max_gamma: int, longest_prompt: int, longest_sequence: int
    ) -> None:
        """Refuse settings under which some request could never be scheduled (naming the option);
        ``longest_sequence``: the most KV positions one request reserves."""
        if self.kv_cache_tokens is not None and longest_sequence > self.kv_cache_tokens:
            raise SpecsimError(
                f"{self.kv_cache_source}: expected room for the longest request ({longest_sequence} "
                f"positions: prompt, images, output and gamma lookahead), got {self.kv_cache_tokens}"
            )
        if self.max_num_batched_tokens < max_gamma + 1:
            raise SpecsimError(
                f"--max-num-batched-tokens: expected at least gamma+1 = {max_gamma + 1} (one decode's "
                f"verification rows), got {self.max_num_batched_tokens}"
            )
        if image_tokens > self.encoder_budget:
            # without --encoder-budget the budget is --max-num-batched-tokens: name the flag the user gave
            given = self.encoder_budget_tokens is not None
            raise SpecsimError(
                f"{'--encoder-budget' if given else '--max-num-batched-tokens'}: expected at least one "
                f"image's {image_tokens} tokens per step (the encoder's budget), got {self.encoder_budget}"
            )
        if not self.chunked_prefill and longest_prompt > self.max_num_batched_tokens:
            raise SpecsimError(
                f"--max-num-batched-tokens: without chunked prefill it must hold the longest prompt "
                f"({longest_prompt} tokens, images included), got {self.max_num_batched_tokens}"
            )


@dataclass(frozen=True)
class StepBatch:
    """What one step runs: ``decode`` request ids (γ+1 rows each), prefill ``chunks`` as (request, first
    position, tokens, images encoded), and how many waiting requests it ``admitted``."""

    decode: np.ndarray
    chunks: tuple[tuple[int, int, int, int], ...]
    admitted: int

    @property
    def empty(self) -> bool:
        return self.decode.size == 0 and not self.chunks


def _chunk(
    start: int, left: int, budget: int, enc_budget: int, images: int, image_tokens: int
) -> tuple[int, int]:
    """(tokens, images encoded) of a chunk from ``start`` under both budgets."""
    n = min(left, budget)
    if images == 0 or image_tokens == 0 or n == 0:
        return n, 0
    done = min(images, -(-start // image_tokens))  # images whose first position is before start
    reach = min(images, -(-(start + n) // image_tokens))
    fit = min(reach - done, enc_budget // image_tokens)
    if fit < reach - done:  # stop before the first image the encoder cannot take
        n = (done + fit) * image_tokens - start
    return n, fit


def schedule_step(
    cfg: SchedulerConfig,
    *,
    decoding: np.ndarray,
    prefilling: np.ndarray,
    waiting: range,
    computed: np.ndarray,
    prompt_total: np.ndarray,
    images: np.ndarray,
    image_tokens: int,
    gamma: int,
    kv_need: np.ndarray | None = None,
    kv_free_tokens: float = float("inf"),
) -> StepBatch:
    """One step: decodes first, then running prefills, then admissions (see the module docstring).

    ``decoding``/``prefilling``: running request ids in admission order; ``waiting``: ids of arrived, not yet
    admitted requests in arrival order; ``computed``/``prompt_total``: prompt positions cached / in the prompt
    (images included) per request; ``kv_need``: KV positions each request reserves at admission, against
    ``kv_free_tokens``.
    """
    budget = cfg.max_num_batched_tokens
    per_decode = gamma + 1
    n_decode = min(len(decoding), budget // per_decode)
    decode = decoding[:n_decode]
    budget -= n_decode * per_decode
    enc_budget = cfg.encoder_budget
    chunks = []
    for r in prefilling:
        if budget == 0:
            break
        start = int(computed[r])
        n, enc = _chunk(start, int(prompt_total[r]) - start, budget, enc_budget, int(images[r]), image_tokens)
        if n > 0:
            chunks.append((int(r), start, n, enc))
            budget -= n
            enc_budget -= enc * image_tokens
    admitted = 0
    room = cfg.max_num_seqs - len(decoding) - len(prefilling)
    for r in waiting:
        if budget == 0 or admitted >= room:
            break
        total = int(prompt_total[r])
        if not cfg.chunked_prefill and total > budget:
            break
        if kv_need is not None:
            if kv_need[r] > kv_free_tokens:
                break
            kv_free_tokens -= kv_need[r]
        n, enc = _chunk(0, total, budget, enc_budget, int(images[r]), image_tokens)
        if n == 0 or (not cfg.chunked_prefill and n < total):
            break
        chunks.append((int(r), 0, n, enc))
        budget -= n
        enc_budget -= enc * image_tokens
        admitted += 1
    return StepBatch(decode, tuple(chunks), admitted)
