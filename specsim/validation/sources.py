"""Where a published row comes from (:class:`Source`), and what is reserved for an independent check.

Reserved, and kept out of the published set, its fits and its tests: the Spec-Bench leaderboard,
SpecDecode-Bench ("Speculative Decoding: Performance or Illusion?", Liu, Yu, Park, Stoica, Cheung; arXiv
2601.11580) with its repositories and data, and the EAGLE, EAGLE-2 and EAGLE-3 papers' SpS / vanilla-SD
rows (a separate draft model). Those papers' EAGLE-head rows (e.g. EAGLE-3's SGLang and vLLM batch tables)
may be used: :func:`is_reserved_row` rejects only their draft-model rows.
"""

from __future__ import annotations

from dataclasses import dataclass

RESERVED_KEYS = ("spec-bench",)  # source keys
# Whole sources reserved, recognised by title, venue or address: the Spec-Bench leaderboard
# (hemingkx/Spec-Bench) and SpecDecode-Bench ('Speculative Decoding: Performance or Illusion?').
_RESERVED_MARKS = ("spec-bench", "specbench", "hemingkx", "2601.11580", "specdecode-bench")
# The EAGLE papers (arXiv 2401.15077, 2406.16858, 2503.01840; SafeAILab/EAGLE): their SpS rows are reserved.
_EAGLE_PAPER_MARKS = ("safeailab/eagle", "2401.15077", "2406.16858", "2503.01840")
_EAGLE_PAPER_TITLES = ("eagle:", "eagle-2:", "eagle-3:", "eagle 2:", "eagle 3:")
SPS_KINDS = ("model",)  # the drafting kinds of SpS / vanilla speculative sampling rows


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    authors: str
    year: int
    venue: str
    where: str

    def cite(self) -> str:
        return f"{self.authors} ({self.year}), {self.title}; {self.venue}"


def _text(src: Source) -> str:
    return f"{src.key} {src.title} {src.venue} {src.where}".lower()


def is_reserved(src: Source) -> bool:
    """True for a source reserved whole: the Spec-Bench leaderboard or SpecDecode-Bench."""
    return any(word in src.key.lower() for word in RESERVED_KEYS) or any(
        m in _text(src) for m in _RESERVED_MARKS
    )


def is_eagle_paper(src: Source) -> bool:
    """True for the EAGLE, EAGLE-2 and EAGLE-3 papers (by title, venue or address)."""
    return any(m in _text(src) for m in _EAGLE_PAPER_MARKS) or src.title.lower().startswith(
        _EAGLE_PAPER_TITLES
    )


def is_reserved_row(src: Source, draft_kind: str) -> bool:
    """True for a row the independent check keeps: any row of a reserved source, and an EAGLE paper's SpS
    rows (``draft_kind`` a separate draft model)."""
    return is_reserved(src) or (is_eagle_paper(src) and draft_kind in SPS_KINDS)
