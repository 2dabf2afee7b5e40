"""What one run of the engine (:mod:`calibrate.run.engine`) records: a :class:`BlockRecord` per draft/verify
block (or target-only step) with its counts and per-stage ms, gathered into a request's :class:`DecodeResult`
(JSON with ``schema_version``), from which τ, the accepted-length histogram and the stage totals follow.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.jsonio import check_schema_version

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BlockRecord:
    """One draft/verify block (or one target-only step, γ = 0): counts and per-stage ms.

    ``accepted`` counts drafts kept (capped at ``emitted`` − 1 when EOS truncates); ``overhead_ms`` = block −
    draft model − target model ms (a request's records add up to its decoding loop's wall time). For the cost
    model: the verify pass fed ``target_rows`` on ``target_context_tokens`` cached positions, the draft's
    first step ``draft_first_rows`` on ``draft_context_tokens``; ``draft_step_ms`` is each draft step's ms.
    Field notes: ARCHITECTURE.md, Notes by module.
    """

    gamma: int
    accepted: int
    emitted: int
    draft_ms: float
    verify_ms: float
    block_ms: float
    target_context_tokens: int = 0
    target_rows: int = 0
    draft_context_tokens: int = 0
    draft_first_rows: int = 1
    draft_step_ms: tuple[float, ...] = ()

    @property
    def overhead_ms(self) -> float:
        return self.block_ms - self.draft_ms - self.verify_ms

    def to_json(self) -> dict:
        return {
            "gamma": self.gamma,
            "accepted": self.accepted,
            "emitted": self.emitted,
            "draft_ms": self.draft_ms,
            "verify_ms": self.verify_ms,
            "block_ms": self.block_ms,
            "target_context_tokens": self.target_context_tokens,
            "target_rows": self.target_rows,
            "draft_context_tokens": self.draft_context_tokens,
            "draft_first_rows": self.draft_first_rows,
            "draft_step_ms": list(self.draft_step_ms),
        }

    @classmethod
    def from_json(cls, d: dict):
        return cls(**(d | {"draft_step_ms": tuple(d.get("draft_step_ms", ()))}))


@dataclass(frozen=True)
class DecodeResult:
    """A whole request: emitted tokens, set-up stage ms (prefills, vision, captions) and blocks.

    ``gamma`` = 0 marks a target-only run (every block is one target step).
    """

    tokens: tuple[int, ...]
    prompt_tokens: int
    gamma: int
    method: str
    setup_ms: dict[str, float]
    blocks: tuple[BlockRecord, ...]
    prompt_id: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def decode_ms(self) -> float:
        """Wall time of the decode phase (all blocks), ms."""
        return float(sum(b.block_ms for b in self.blocks))

    @property
    def total_ms(self) -> float:
        return self.decode_ms + float(sum(self.setup_ms.values()))

    @property
    def tau(self) -> float:
        """Tokens emitted per block, bonus included (1 for target-only)."""
        return len(self.tokens) / max(len(self.blocks), 1)

    @property
    def overhead_ms(self) -> float:
        return float(sum(b.overhead_ms for b in self.blocks))

    def accepted_histogram(self) -> tuple[int, ...]:
        """h[k] = blocks that kept exactly k drafts, k = 0..γ."""
        hist = [0] * (self.gamma + 1)
        for b in self.blocks:
            hist[b.accepted] += 1
        return tuple(hist)

    def stage_ms(self) -> dict[str, float]:
        """Set-up stages plus decode-phase totals: draft generation, target verification, overhead."""
        return dict(self.setup_ms) | {
            "draft_generation_ms": float(sum(b.draft_ms for b in self.blocks)),
            "target_verification_ms": float(sum(b.verify_ms for b in self.blocks)),
            "overhead_ms": self.overhead_ms,
        }

    def to_json(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "tokens": list(self.tokens),
            "prompt_tokens": self.prompt_tokens,
            "gamma": self.gamma,
            "method": self.method,
            "prompt_id": self.prompt_id,
            "setup_ms": dict(self.setup_ms),
            "blocks": [b.to_json() for b in self.blocks],
        }

    @classmethod
    def from_json(cls, d: dict) -> DecodeResult:
        check_schema_version(d, SCHEMA_VERSION, "decode result")
        return cls(
            tokens=tuple(int(t) for t in d["tokens"]),
            prompt_tokens=int(d["prompt_tokens"]),
            gamma=int(d["gamma"]),
            method=str(d["method"]),
            prompt_id=d.get("prompt_id"),
            setup_ms={k: float(v) for k, v in d["setup_ms"].items()},
            blocks=tuple(BlockRecord.from_json(b) for b in d["blocks"]),
        )
