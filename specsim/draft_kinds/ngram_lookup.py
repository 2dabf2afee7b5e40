"""n-gram, prompt-lookup and suffix drafting: no model, a lookup on the host per sequence per block.

A block of a lookup kind runs no draft forward: the proposer matches the sequence's last tokens in its
prompt and output (n-gram / prompt lookup), or in a suffix tree of them and of earlier outputs (suffix
decoding), on the CPU between the verification and the next step, so its time adds to the block whatever
the GPU does: ``lookup_ms_per_sequence`` (the runtime's) × B. τ comes from traces, imported engine counters
(``specsim import vllm``) or a given τ/α, as for any kind. The llama.cpp drafting modes that look up
n-grams (``ngram-simple``, ``ngram-map-k``, ``ngram-mod``) are lookup kinds of this module too.
"""

from __future__ import annotations

import numpy as np

LOOKUP_KINDS = ("ngram", "suffix")


def lookup_ms(runtime, batch):
    """Host time of one block's lookups for ``batch`` sequences (ms)."""
    return float(getattr(runtime, "lookup_ms_per_sequence", 0.0)) * np.asarray(batch, dtype=float)
