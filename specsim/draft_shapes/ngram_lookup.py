"""n-gram, prompt-lookup and suffix drafting: no model, a lookup on the host per sequence per block.

A block of a lookup kind runs no draft forward; its host time adds ``lookup_ms_per_sequence`` (the runtime's)
× B in the roofline, or the measured ``lookup_overhead_ms_per_block`` in a llama.cpp profile. llama.cpp's
``--spec-type ngram-simple`` is replayed exactly (:func:`ngram_simple_draft`, common/ngram-map.cpp) over a
request's prompt and the target's greedy output (:func:`ngram_plan`), so its τ needs only the target's tokens.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from specsim.draft_shapes.block_plans import BlockPlan
from specsim.errors import SpecsimError

LOOKUP_KINDS = ("ngram", "suffix")


def lookup_ms(runtime, batch):
    """Host time of one block's lookups for ``batch`` sequences (ms)."""
    return float(getattr(runtime, "lookup_ms_per_sequence", 0.0)) * np.asarray(batch, dtype=float)


SCHEMA_VERSION = 1
_SPEC = re.compile(r"ngram-simple(?::(\d+),(\d+))?")


@dataclass(frozen=True)
class NgramSimple:
    """llama.cpp's ngram-simple lookup: pattern of ``size_n`` tokens, drafts of ``size_n``..``size_m``."""

    size_n: int = 12
    size_m: int = 48
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not 1 <= self.size_n <= self.size_m:
            raise SpecsimError(f"ngram-simple: expected 1 <= n <= m, got n={self.size_n}, m={self.size_m}")

    @property
    def label(self) -> str:
        """The spelling :func:`parse_ngram` reads (``ngram-simple:N,M``)."""
        return f"ngram-simple:{self.size_n},{self.size_m}"

    def server_flags(self) -> list[str]:
        """llama-server's flags for this kind."""
        return [
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            str(self.size_n),
            "--spec-ngram-simple-size-m",
            str(self.size_m),
        ]


def parse_ngram(text: str) -> NgramSimple:
    """``ngram-simple`` (llama.cpp's defaults 12, 48) or ``ngram-simple:N,M``; SpecsimError otherwise."""
    m = _SPEC.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise SpecsimError(f"n-gram kind: expected ngram-simple or ngram-simple:N,M, got {text!r}")
    return NgramSimple() if m.group(1) is None else NgramSimple(int(m.group(1)), int(m.group(2)))


def ngram_simple_draft(tokens, sampled: int, kind: NgramSimple) -> list[int]:
    """The draft after history ``tokens`` (the context but its last token) and the last token ``sampled``."""
    n, m = kind.size_n, kind.size_m
    cur = len(tokens)
    if cur <= n + m + 1:
        return []
    pattern = list(tokens[cur - n + 1 :]) + [sampled]
    for j in range(cur - n - 1, 0, -1):  # position 0 means no match, as in llama.cpp
        if list(tokens[j : j + n]) == pattern:
            copy = min(m, cur - (j + n))
            return [] if copy < n else list(tokens[j + n : j + n + copy])
    return []


def ngram_plan(prompt_ids, output_ids, kind: NgramSimple, max_new_tokens: int | None = None) -> BlockPlan:
    """llama-server's blocks for one request whose greedy output is ``output_ids``: after the prompt pass's
    token, a block after t tokens looks up a draft (capped at N − t − 1), accepts its prefix that equals the
    output and emits one more token; starts count the first token."""
    out = [int(x) for x in output_ids]
    n = len(out) if max_new_tokens is None else int(max_new_tokens)
    if n > len(out):
        raise SpecsimError(f"max_new_tokens: expected <= the trace's {len(out)} tokens, got {n}")
    history = [int(x) for x in prompt_ids]
    rows, t = [], 1
    while t < n:
        draft = ngram_simple_draft(history + out[: t - 1], out[t - 1], kind)[: max(0, n - t - 1)]
        accepted = 0
        while accepted < len(draft) and draft[accepted] == out[t + accepted]:
            accepted += 1
        emitted = min(accepted + 1, n - t)
        rows.append((t, len(draft), emitted))
        t += emitted
    a = np.asarray(rows, dtype=float).reshape(-1, 3)
    first = np.minimum(a[:, 1], 1.0)  # a block with drafts runs no draft pass; 0 rows without drafts
    return BlockPlan(a[:, 0], a[:, 1], a[:, 2], first, np.ones(len(rows)))


def ngram_counts_plan(kind: NgramSimple, tokens: int, drafted: int, accepted: int) -> BlockPlan:
    """A request's blocks from llama-server's counts alone: ``tokens`` emitted (the first by the prompt
    pass), ``drafted`` proposed, ``accepted``. Drafts are taken at the kind's cap M (llama.cpp copies M
    tokens after a match unless the history ends sooner), spread evenly over the decode; starts count the
    first token."""
    passes = int(tokens) - 1 - int(accepted)
    if passes < 0 or accepted > drafted:
        raise SpecsimError(
            f"n-gram counts: expected accepted <= drafted and < tokens, got tokens={tokens}, "
            f"drafted={drafted}, accepted={accepted}"
        )
    k = min(passes, max(1, round(drafted / kind.size_m))) if drafted > 0 else 0
    drafts, emitted = np.zeros(passes), np.ones(passes)
    at = (np.arange(k) * passes) // max(k, 1)  # k distinct blocks, evenly spaced
    drafts[at] = drafted / max(k, 1)
    emitted[at] += accepted / max(k, 1)
    start = 1.0 + np.concatenate([[0.0], np.cumsum(emitted)[:-1]])
    return BlockPlan(start, drafts, emitted, np.minimum(drafts, 1.0), np.ones(passes))
