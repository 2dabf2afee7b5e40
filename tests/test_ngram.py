"""n-gram drafting (llama.cpp's ngram-simple): the lookup against a direct transcription of llama.cpp's loop,
llama-server's schedule over a request, the spelling, and its pricing with no draft pass."""

import numpy as np
import pytest

from specsim.draft_shapes.ngram_lookup import NgramSimple, ngram_plan, ngram_simple_draft, parse_ngram
from specsim.errors import SpecsimError


def _reference_draft(tokens, sampled, n, m):
    """common/ngram-map.cpp common_ngram_simple_draft, statement by statement."""
    cur = len(tokens)
    if cur <= n + m + 1:
        return []
    pattern = [tokens[j] for j in range(cur - n + 1, cur)] + [sampled]
    match = 0
    j = cur - n - 1
    while j > 0:
        if all(tokens[j + k] == pattern[k] for k in range(len(pattern))):
            match = j
            break
        j -= 1
    if match == 0:
        return []
    copy = min(m, cur - (match + n))
    if copy < n:
        return []
    return [tokens[match + n + k] for k in range(copy)]


def test_the_lookup_equals_llama_cpps_loop_on_random_histories():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, m = int(rng.integers(1, 4)), int(rng.integers(4, 8))
        tokens = [int(x) for x in rng.integers(0, 4, size=int(rng.integers(0, 40)))]
        sampled = int(rng.integers(0, 4))
        assert ngram_simple_draft(tokens, sampled, NgramSimple(n, m)) == _reference_draft(
            tokens, sampled, n, m
        )


def test_the_plan_follows_llama_servers_schedule():
    plan = ngram_plan(
        [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 1, 2, 9, 9, 9, 9, 9, 9], NgramSimple(2, 3)
    )
    assert plan.start.tolist() == [1, 5, 8, 9, 10, 11, 12]  # the first token comes from the prompt pass
    assert plan.drafts.tolist() == [3, 3, 0, 0, 0, 0, 0]
    assert plan.emitted.tolist() == [4, 3, 1, 1, 1, 1, 1]
    assert plan.tokens == 12  # every token after the first
    capped = ngram_plan([1, 2, 3, 4, 5, 1, 2, 3, 4, 5], [1, 2, 3, 4], NgramSimple(2, 3))
    assert capped.drafts.tolist() == [2]  # at most the tokens left - 1


def test_spellings_and_bad_ones():
    assert parse_ngram("ngram-simple") == NgramSimple(12, 48)
    assert parse_ngram("ngram-simple:3,6") == NgramSimple(3, 6)
    assert parse_ngram("ngram-simple:3,6").label == "ngram-simple:3,6"
    assert "--spec-ngram-simple-size-m" in NgramSimple(3, 6).server_flags()
    for bad in ("ngram", "ngram-simple:6,3", "ngram-simple:0,3", "ngram-mod:3,6"):
        with pytest.raises(SpecsimError):
            parse_ngram(bad)
