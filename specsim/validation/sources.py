"""Where a published row comes from (:class:`Source`), and the sources reserved for an independent check.

Reserved, and kept out of the published set, its fits and its tests: the Spec-Bench leaderboard, the EAGLE,
EAGLE-2 and EAGLE-3 papers' SpS / vanilla-SD rows, and SpecDecode-Bench ("Speculative Decoding: Performance or
Illusion?", Liu, Yu, Park, Stoica, Cheung; arXiv 2601.11580) with its repositories and data.
"""

from __future__ import annotations

from dataclasses import dataclass

RESERVED_KEYS = ("spec-bench", "eagle")  # source keys
# Reserved sources recognised by title, venue or address: the Spec-Bench leaderboard (hemingkx/Spec-Bench) and
# the EAGLE papers (arXiv 2401.15077, 2406.16858, 2503.01840; SafeAILab/EAGLE); SpecDecode-Bench ('Speculative
# Decoding: Performance or Illusion?', arXiv 2601.11580). EAGLE-method rows measured by others in another
# runtime (e.g. vLLM issues) are not those papers' SpS rows and may stay.
_RESERVED_MARKS = (
    "spec-bench",
    "specbench",
    "hemingkx",
    "safeailab/eagle",
    "2401.15077",
    "2406.16858",
    "2503.01840",
    "2601.11580",  # SpecDecode-Bench: its paper and repositories
    "specdecode-bench",
)
_EAGLE_PAPER_TITLES = ("eagle:", "eagle-2:", "eagle-3:", "eagle 2:", "eagle 3:")


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


def is_reserved(src: Source) -> bool:
    """True for the Spec-Bench leaderboard, the EAGLE papers and SpecDecode-Bench (by key, title or venue)."""
    text = f"{src.key} {src.title} {src.venue} {src.where}".lower()
    return (
        any(word in src.key.lower() for word in RESERVED_KEYS)
        or any(m in text for m in _RESERVED_MARKS)
        or src.title.lower().startswith(_EAGLE_PAPER_TITLES)
    )
