"""Where drafts survive: acceptance on image-fact tokens vs generic tokens, from a profile's traces.

A trace position is an *image-fact token* when the target's token there overlaps a fact word
(colour, shape, count, side, same/new verdict or attribute name; :data:`calibrate.zoo.task.FACT_RE`) of
the decoded output. Needs traces recorded with ``tokens`` (``specsim calibrate acceptance`` stores them)
and the zoo tokenizer. No torch: only the ``tokenizers`` library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.zoo.task import FACT_RE


def load_tokenizer(path: str | Path | None = None) -> Any:
    """The zoo's ``tokenizers.Tokenizer`` (default: the shipped target's ``tokenizer.json``)."""
    from tokenizers import Tokenizer

    from calibrate.zoo import weights_dir

    return Tokenizer.from_file(str(path or weights_dir("target") / "tokenizer.json"))


def token_spans(tokens: list[int], tokenizer: Any) -> tuple[str, list[tuple[int, int]]]:
    """Decoded text and each token's character span [start, end) in it (prefix decoding; byte-level BPE)."""
    spans, prev = [], 0
    text = ""
    for k in range(len(tokens)):
        text = tokenizer.decode(list(tokens[: k + 1]), skip_special_tokens=True)
        spans.append((prev, len(text)))
        prev = len(text)
    return text, spans


def fact_mask(tokens: list[int], tokenizer: Any) -> list[bool]:
    """Per position: does the token overlap an image-fact word of the decoded output?"""
    text, spans = token_spans(tokens, tokenizer)
    facts = [m.span() for m in FACT_RE.finditer(text)]
    return [any(a < fe and b > fs for fs, fe in facts) for a, b in spans]


@dataclass(frozen=True)
class MatchByClass:
    """Greedy draft/target agreement on fact tokens and on the other tokens, with position counts."""

    fact_rate: float
    other_rate: float
    fact_positions: int
    other_positions: int


def match_by_class(entry: Any, tokenizer: Any) -> MatchByClass:
    """:class:`MatchByClass` over all traces of a profile acceptance entry (traces need ``tokens``)."""
    hits = {True: [0, 0], False: [0, 0]}
    for t in entry.traces:
        if t.tokens is None or t.match is None:
            raise ValueError(
                f"entry {entry.method}/{entry.scenario}: traces lack 'tokens' (re-run "
                "'specsim calibrate acceptance')"
            )
        for is_fact, m in zip(fact_mask(list(t.tokens), tokenizer), t.match):
            hits[is_fact][0] += m
            hits[is_fact][1] += 1
    rate = lambda k: hits[k][0] / hits[k][1] if hits[k][1] else float("nan")  # noqa: E731
    return MatchByClass(rate(True), rate(False), hits[True][1], hits[False][1])
